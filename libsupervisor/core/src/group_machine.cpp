#include "tasksup/supervisor/group_machine.hpp"

#include <algorithm>
#include <utility>

namespace tasksup {

std::string_view to_string(group_strategy x) noexcept {
  switch (x) {
    case group_strategy::one_for_one:
      return "one_for_one";
    case group_strategy::one_for_all:
      return "one_for_all";
    case group_strategy::rest_for_one:
      return "rest_for_one";
    case group_strategy::steps:
      return "steps";
    case group_strategy::race:
      return "race";
  }
  return "one_for_one";
}

std::optional<group_strategy>
parse_group_strategy(std::string_view str) noexcept {
  // "steps" is a workflow's, never written in a group file.
  for (auto x : {group_strategy::one_for_one, group_strategy::one_for_all,
                 group_strategy::rest_for_one})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

std::string_view to_string(auto_shutdown x) noexcept {
  switch (x) {
    case auto_shutdown::never:
      return "never";
    case auto_shutdown::any_significant:
      return "any_significant";
    case auto_shutdown::all_significant:
      return "all_significant";
  }
  return "never";
}

std::optional<auto_shutdown>
parse_auto_shutdown(std::string_view str) noexcept {
  for (auto x : {auto_shutdown::never, auto_shutdown::any_significant,
                 auto_shutdown::all_significant})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

std::string_view to_string(member_end x) noexcept {
  switch (x) {
    case member_end::normal:
      return "normal";
    case member_end::failed:
      return "failed";
    case member_end::stopped:
      return "stopped";
  }
  return "failed";
}

std::string_view to_string(member_phase x) noexcept {
  switch (x) {
    case member_phase::idle:
      return "idle";
    case member_phase::starting:
      return "starting";
    case member_phase::running:
      return "running";
    case member_phase::stopping:
      return "stopping";
    case member_phase::ended:
      return "ended";
    case member_phase::removed:
      return "removed";
    case member_phase::skipped:
      return "skipped";
  }
  return "idle";
}

std::string_view to_string(group_end x) noexcept {
  switch (x) {
    case group_end::completed:
      return "completed";
    case group_end::auto_shutdown:
      return "auto_shutdown";
    case group_end::intensity:
      return "intensity";
    case group_end::stopped:
      return "stopped";
    case group_end::start_failed:
      return "start_failed";
    case group_end::won:
      return "won";
  }
  return "completed";
}

namespace {

bool live(member_phase x) noexcept {
  return x == member_phase::starting || x == member_phase::running ||
         x == member_phase::stopping;
}

} // namespace

group_machine::group_machine(group_shape shape) : shape_(std::move(shape)) {
  st_.members.resize(shape_.members.size());
  st_.window =
    restart_window{shape_.intensity.max_restarts, shape_.intensity.period_s};
  if (shape_.strategy == group_strategy::steps) {
    dependents_.resize(shape_.members.size());
    for (std::size_t i = 0; i < shape_.members.size(); ++i)
      for (auto d : shape_.members[i].depends_on)
        if (d < dependents_.size() && d != i)
          dependents_[d].push_back(i);
  }
}

void group_machine::rescan() noexcept {
  stop_below_ = st_.members.size();
  start_from_ = 0;
}

void group_machine::start(double) {
  if (st_.started || st_.end)
    return;
  st_.started = true;
  rescan();
  for (std::size_t i = 0; i < st_.members.size(); ++i) {
    st_.members[i].to_start = true;
    if (shape_.strategy == group_strategy::steps)
      st_.members[i].deps_left = shape_.members[i].depends_on.size();
  }
  check_settled();
}

void group_machine::started(std::size_t i, double) {
  if (i >= st_.members.size() || st_.in_flight != group_op{group_op::start, i})
    return;
  st_.in_flight.reset();
  auto& m = st_.members[i];
  m.phase = member_phase::running;
  if (i + 1 == st_.members.size())
    st_.first_start_done = true;
  // Started while a restart or the group's end wants it stopped.
  if (st_.shutting_down || m.to_stop)
    stop_below_ = std::max(stop_below_, i + 1);
}

void group_machine::start_failed(std::size_t i, double now_s) {
  if (i >= st_.members.size() || st_.in_flight != group_op{group_op::start, i})
    return;
  st_.in_flight.reset();
  rescan();
  auto& m = st_.members[i];
  // A step or a racer that cannot start only fails itself.
  if (!st_.first_start_done && !st_.shutting_down &&
      shape_.strategy != group_strategy::steps &&
      shape_.strategy != group_strategy::race) {
    m.phase = member_phase::idle;
    m.last = member_end::failed;
    begin_end(group_end::start_failed, i);
    return;
  }
  m.phase = member_phase::running;
  ended(i, member_end::failed, now_s);
}

void group_machine::ended(std::size_t i, member_end how, double now_s) {
  if (i >= st_.members.size())
    return;
  st_.skipped.clear();
  auto& m = st_.members[i];
  auto temporary = shape_.members[i].restart == restart_type::temporary;
  if (m.phase == member_phase::stopping) {
    // The stop the group asked for.
    if (st_.in_flight == group_op{group_op::stop, i})
      st_.in_flight.reset();
    m.last = member_end::stopped;
    m.to_stop = false;
    m.phase = temporary    ? member_phase::removed
              : m.to_start ? member_phase::idle
                           : member_phase::ended;
    start_from_ = std::min(start_from_, i);
    check_settled();
    return;
  }
  // An end of its own: whatever it leads to may start or stop any member.
  rescan();
  if (m.phase == member_phase::starting) {
    // Ended before its start was confirmed: it did start.
    st_.in_flight.reset();
    m.phase = member_phase::running;
    if (i + 1 == st_.members.size())
      st_.first_start_done = true;
  }
  if (m.phase != member_phase::running)
    return; // Not running: a stale report.
  m.last = how;
  if (st_.shutting_down || m.to_stop) {
    // The group was about to stop it anyway (its own end, or a restart
    // that takes this member along): no decision of its own.
    m.to_stop = false;
    m.phase = temporary    ? member_phase::removed
              : m.to_start ? member_phase::idle
                           : member_phase::ended;
    check_settled();
    return;
  }
  decide(i, how, now_s);
  check_settled();
}

void group_machine::stop(double) {
  begin_end(group_end::stopped, std::nullopt);
}

void group_machine::step_ended(std::size_t i, member_end how) {
  auto& m = st_.members[i];
  m.phase = member_phase::ended;
  auto passed =
    how == member_end::normal ||
    (how == member_end::failed && shape_.members[i].continue_on_failure);
  if (!passed) {
    skip_dependents(i);
    return;
  }
  for (auto d : dependents_[i])
    if (auto& o = st_.members[d]; o.deps_left > 0 && --o.deps_left == 0)
      start_from_ = std::min(start_from_, d);
}

void group_machine::skip_dependents(std::size_t i) {
  std::vector<std::size_t> todo{i};
  while (!todo.empty()) {
    auto k = todo.back();
    todo.pop_back();
    for (auto d : dependents_[k]) {
      auto& o = st_.members[d];
      if (o.phase != member_phase::idle || !o.to_start)
        continue;
      o.to_start = false;
      o.phase = member_phase::skipped;
      o.skipped_by = i;
      st_.skipped.push_back(d);
      todo.push_back(d);
    }
  }
  std::sort(st_.skipped.begin(), st_.skipped.end());
}

void group_machine::decide(std::size_t i, member_end how, double now_s) {
  if (shape_.strategy == group_strategy::steps) {
    step_ended(i, how);
    return;
  }
  if (shape_.strategy == group_strategy::race) {
    st_.members[i].phase = member_phase::ended;
    if (how == member_end::normal)
      begin_end(group_end::won, i);
    return;
  }
  auto& spec = shape_.members[i];
  auto& m = st_.members[i];
  auto restart =
    how != member_end::stopped &&
    (spec.restart == restart_type::permanent ||
     (spec.restart == restart_type::transient && how == member_end::failed));
  if (!restart) {
    m.phase = spec.restart == restart_type::temporary ? member_phase::removed
                                                      : member_phase::ended;
    if (spec.significant && how != member_end::stopped &&
        significant_end_ends_group(i))
      begin_end(group_end::auto_shutdown, i);
    return;
  }
  if (!st_.window.try_restart(now_s)) {
    m.phase = member_phase::ended;
    begin_end(group_end::intensity, i);
    return;
  }
  std::size_t first = 0;
  std::size_t last = st_.members.size();
  if (shape_.strategy == group_strategy::one_for_one) {
    first = i;
    last = i + 1;
  } else if (shape_.strategy == group_strategy::rest_for_one) {
    first = i;
  }
  group_restart rec;
  rec.at_s = now_s;
  rec.member = i;
  rec.cause = how;
  for (auto j = first; j < last; ++j) {
    auto& o = st_.members[j];
    if (j == i) {
      o.phase = member_phase::idle;
      o.to_start = true;
      ++o.restarts;
      rec.restarted.push_back(j);
      continue;
    }
    if (o.phase == member_phase::removed)
      continue;
    auto temporary = shape_.members[j].restart == restart_type::temporary;
    if (o.phase == member_phase::running || o.phase == member_phase::starting ||
        o.phase == member_phase::stopping)
      o.to_stop = true;
    if (temporary) {
      // Never started again: it goes once stopped (or at once when it is
      // not running).
      o.to_start = false;
      if (!live(o.phase))
        o.phase = member_phase::removed;
      continue;
    }
    if (o.phase == member_phase::ended)
      o.phase = member_phase::idle;
    if (!o.to_start) {
      o.to_start = true;
      ++o.restarts;
    }
    rec.restarted.push_back(j);
  }
  ++st_.restart_count;
  st_.history.push_back(std::move(rec));
  if (st_.history.size() > max_restart_history)
    st_.history.erase(st_.history.begin());
}

bool group_machine::significant_end_ends_group(std::size_t i) const {
  switch (shape_.shutdown) {
    case auto_shutdown::never:
      return false;
    case auto_shutdown::any_significant:
      return true;
    case auto_shutdown::all_significant:
      for (std::size_t j = 0; j < st_.members.size(); ++j) {
        if (j == i || !shape_.members[j].significant)
          continue;
        auto& o = st_.members[j];
        if (o.to_start || live(o.phase) || o.phase == member_phase::idle)
          return false;
      }
      return true;
  }
  return false;
}

void group_machine::begin_end(group_end why, std::optional<std::size_t> by) {
  if (st_.shutting_down || st_.end)
    return;
  rescan();
  st_.shutting_down = why;
  st_.end_by = by;
  for (auto& m : st_.members) {
    m.to_start = false;
    m.to_stop = false;
  }
  check_settled();
}

void group_machine::check_settled() {
  if (st_.end || !st_.started || st_.in_flight)
    return;
  for (auto& m : st_.members)
    if (live(m.phase) || (!st_.shutting_down && m.to_start))
      return;
  if (st_.shutting_down) {
    st_.end = st_.shutting_down;
    return;
  }
  st_.end = group_end::completed;
  // A race that completes had no winner: it failed, named by its first
  // member that did not succeed.
  auto race = shape_.strategy == group_strategy::race;
  auto steps = shape_.strategy == group_strategy::steps;
  for (std::size_t j = 0; j < st_.members.size(); ++j) {
    auto last = st_.members[j].last;
    auto dropped = last == member_end::failed || last == member_end::stopped;
    if (race    ? last != member_end::normal
        : steps ? dropped && !shape_.members[j].continue_on_failure
                : last == member_end::failed) {
      st_.end_by = j;
      break;
    }
  }
}

std::optional<group_op> group_machine::next() {
  if (st_.in_flight || st_.end || !st_.started)
    return std::nullopt;
  // Stops first, the last member first.
  for (auto j = std::min(stop_below_, st_.members.size()); j-- > 0;) {
    auto& m = st_.members[j];
    if (m.phase == member_phase::running && (st_.shutting_down || m.to_stop)) {
      m.phase = member_phase::stopping;
      stop_below_ = j;
      st_.in_flight = group_op{group_op::stop, j};
      return st_.in_flight;
    }
  }
  stop_below_ = 0;
  if (!st_.shutting_down) {
    for (auto j = start_from_; j < st_.members.size(); ++j) {
      auto& m = st_.members[j];
      if (m.to_start && m.phase == member_phase::idle && m.deps_left == 0) {
        m.to_start = false;
        m.phase = member_phase::starting;
        start_from_ = j + 1;
        st_.in_flight = group_op{group_op::start, j};
        return st_.in_flight;
      }
    }
    start_from_ = st_.members.size();
  }
  check_settled();
  return std::nullopt;
}

member_end group_machine::end_as_member() const noexcept {
  if (!st_.end)
    return member_end::failed;
  switch (*st_.end) {
    case group_end::completed:
      return st_.end_by ? member_end::failed : member_end::normal;
    case group_end::auto_shutdown:
    case group_end::won:
      return member_end::normal;
    case group_end::intensity:
    case group_end::start_failed:
      return member_end::failed;
    case group_end::stopped:
      return member_end::stopped;
  }
  return member_end::failed;
}

void group_machine::restore(state st) {
  if (st.members.size() == st_.members.size())
    st_ = std::move(st);
  rescan();
}

} // namespace tasksup

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
  }
  return "one_for_one";
}

std::optional<group_strategy>
parse_group_strategy(std::string_view str) noexcept {
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
  }
  return "completed";
}

namespace {

bool live(member_phase x) noexcept {
  return x == member_phase::starting || x == member_phase::running ||
         x == member_phase::stopping;
}

} // namespace

group_machine::group_machine(group_shape shape)
  : shape_(std::move(shape)), members_(shape_.members.size()),
    window_(shape_.intensity.max_restarts, shape_.intensity.period_s) {}

void group_machine::start(double) {
  if (started_ || end_)
    return;
  started_ = true;
  for (auto& m : members_)
    m.to_start = true;
  check_settled();
}

void group_machine::started(std::size_t i, double) {
  if (i >= members_.size() || in_flight_ != group_op{group_op::start, i})
    return;
  in_flight_.reset();
  members_[i].phase = member_phase::running;
  if (i + 1 == members_.size())
    first_start_done_ = true;
}

void group_machine::start_failed(std::size_t i, double now_s) {
  if (i >= members_.size() || in_flight_ != group_op{group_op::start, i})
    return;
  in_flight_.reset();
  auto& m = members_[i];
  if (!first_start_done_ && !shutting_down_) {
    m.phase = member_phase::idle;
    m.last = member_end::failed;
    begin_end(group_end::start_failed, i);
    return;
  }
  m.phase = member_phase::running;
  ended(i, member_end::failed, now_s);
}

void group_machine::ended(std::size_t i, member_end how, double now_s) {
  if (i >= members_.size())
    return;
  auto& m = members_[i];
  auto temporary = shape_.members[i].restart == restart_type::temporary;
  if (m.phase == member_phase::stopping) {
    // The stop the group asked for.
    if (in_flight_ == group_op{group_op::stop, i})
      in_flight_.reset();
    m.last = member_end::stopped;
    m.to_stop = false;
    m.phase = temporary    ? member_phase::removed
              : m.to_start ? member_phase::idle
                           : member_phase::ended;
    check_settled();
    return;
  }
  if (m.phase == member_phase::starting) {
    // Ended before its start was confirmed: it did start.
    in_flight_.reset();
    m.phase = member_phase::running;
    if (i + 1 == members_.size())
      first_start_done_ = true;
  }
  if (m.phase != member_phase::running)
    return; // Not running: a stale report.
  m.last = how;
  if (shutting_down_ || m.to_stop) {
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

void group_machine::decide(std::size_t i, member_end how, double now_s) {
  auto& spec = shape_.members[i];
  auto& m = members_[i];
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
  if (!window_.try_restart(now_s)) {
    m.phase = member_phase::ended;
    begin_end(group_end::intensity, i);
    return;
  }
  std::size_t first = 0;
  std::size_t last = members_.size();
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
    auto& o = members_[j];
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
  ++restart_count_;
  history_.push_back(std::move(rec));
  if (history_.size() > max_restart_history)
    history_.erase(history_.begin());
}

bool group_machine::significant_end_ends_group(std::size_t i) const {
  switch (shape_.shutdown) {
    case auto_shutdown::never:
      return false;
    case auto_shutdown::any_significant:
      return true;
    case auto_shutdown::all_significant:
      for (std::size_t j = 0; j < members_.size(); ++j) {
        if (j == i || !shape_.members[j].significant)
          continue;
        auto& o = members_[j];
        if (o.to_start || live(o.phase) || o.phase == member_phase::idle)
          return false;
      }
      return true;
  }
  return false;
}

void group_machine::begin_end(group_end why, std::optional<std::size_t> by) {
  if (shutting_down_ || end_)
    return;
  shutting_down_ = why;
  end_by_ = by;
  for (auto& m : members_) {
    m.to_start = false;
    m.to_stop = false;
  }
  check_settled();
}

void group_machine::check_settled() {
  if (end_ || !started_ || in_flight_)
    return;
  for (auto& m : members_)
    if (live(m.phase) || (!shutting_down_ && m.to_start))
      return;
  if (shutting_down_) {
    end_ = shutting_down_;
    return;
  }
  end_ = group_end::completed;
  for (std::size_t j = 0; j < members_.size(); ++j)
    if (members_[j].last == member_end::failed) {
      end_by_ = j;
      break;
    }
}

std::optional<group_op> group_machine::next() {
  if (in_flight_ || end_ || !started_)
    return std::nullopt;
  // Stops first, the last member first.
  for (auto j = members_.size(); j-- > 0;) {
    auto& m = members_[j];
    if (m.phase == member_phase::running && (shutting_down_ || m.to_stop)) {
      m.phase = member_phase::stopping;
      in_flight_ = group_op{group_op::stop, j};
      return in_flight_;
    }
  }
  if (!shutting_down_)
    for (std::size_t j = 0; j < members_.size(); ++j) {
      auto& m = members_[j];
      if (m.to_start && m.phase == member_phase::idle) {
        m.to_start = false;
        m.phase = member_phase::starting;
        in_flight_ = group_op{group_op::start, j};
        return in_flight_;
      }
    }
  check_settled();
  return std::nullopt;
}

member_end group_machine::end_as_member() const noexcept {
  if (!end_)
    return member_end::failed;
  switch (*end_) {
    case group_end::completed:
      return end_by_ ? member_end::failed : member_end::normal;
    case group_end::auto_shutdown:
      return member_end::normal;
    case group_end::intensity:
    case group_end::start_failed:
      return member_end::failed;
    case group_end::stopped:
      return member_end::stopped;
  }
  return member_end::failed;
}

group_machine::state group_machine::snapshot() const {
  state st;
  st.members = members_;
  st.started = started_;
  st.first_start_done = first_start_done_;
  st.shutting_down = shutting_down_;
  st.end = end_;
  st.end_by = end_by_;
  st.in_flight = in_flight_;
  st.window = window_.recorded();
  st.history = history_;
  st.restart_count = restart_count_;
  return st;
}

void group_machine::restore(state st) {
  if (st.members.size() != members_.size())
    return;
  members_ = std::move(st.members);
  started_ = st.started;
  first_start_done_ = st.first_start_done;
  shutting_down_ = st.shutting_down;
  end_ = st.end;
  end_by_ = st.end_by;
  in_flight_ = st.in_flight;
  window_.restore(std::move(st.window));
  history_ = std::move(st.history);
  restart_count_ = st.restart_count;
}

} // namespace tasksup

#include "tasksup/actors/group_supervisor_actor.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/journal_codec.hpp"

#include "tasksup/supervisor/events.hpp"

#include "actor_now.hpp"

#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

struct group_state {
  group_options opts;
  std::optional<group_machine> machine;
  /// Member index by id.
  std::map<std::string, std::size_t> index;
  /// The supervisor of each nested group member while it runs.
  std::vector<group_supervisor_actor> children;
  /// Whether the parent was told that every member started.
  bool announced = false;
  /// How the user (or the group above) asked the group to stop, if it did:
  /// a kill stops every member at once.
  std::optional<stop_mode> stop;
  /// The span id of its events, and the seeds of its nested groups.
  std::optional<trace_id_generator> ids;
  std::string span;
  /// The nested groups below each nested group member, by id -> that
  /// member's index (for `(stop, id, mode)`).
  std::map<std::string, std::size_t> below;
  /// The group's slot in its tree (owned by `opts.tree`).
  group_slot* slot = nullptr;
  /// The run token of each member's last start.
  std::vector<std::int64_t> run_of;
  static inline const char* name = "tasksup.group";
};

using group_ptr = group_supervisor_actor::stateful_pointer<group_state>;

using input_kind = journaled_group_input::kind_t;

double now_s(group_ptr self) {
  return detail::now_s(self);
}

/// Feeds `in` to the machine (`start` makes a fresh one: a run of the
/// group). False for an input that does not fit the group (a damaged
/// journal).
bool apply_input(group_ptr self, const journaled_group_input& in) {
  auto& st = self->state;
  auto& m = st.machine;
  if (in.kind == input_kind::start) {
    m.emplace(st.opts.spec->shape());
    m->start(in.at_s);
    return true;
  }
  if (!m)
    return false;
  switch (in.kind) {
    case input_kind::started:
    case input_kind::start_failed:
    case input_kind::ended:
      if (in.member >= m->size())
        return false;
      if (in.kind == input_kind::started)
        m->started(in.member, in.at_s);
      else if (in.kind == input_kind::start_failed)
        m->start_failed(in.member, in.at_s);
      else
        m->ended(in.member, in.how, in.at_s);
      return true;
    case input_kind::stop:
    case input_kind::kill: {
      auto mode =
        in.kind == input_kind::kill ? stop_mode::kill : stop_mode::cancel;
      if (!st.stop || mode == stop_mode::kill)
        st.stop = mode;
      m->stop(in.at_s);
      return true;
    }
    case input_kind::start:
      break;
  }
  return false;
}

/// The token of a start handed out now: the tree's salt and the group's
/// input count.
std::int64_t run_token(group_ptr self) {
  auto& st = self->state;
  return st.opts.tree->salt + (st.slot->inputs.load() & 0xffffffff);
}

/// Feeds the machine an input and journals it (its record number is the
/// group's input count).
void feed(group_ptr self, input_kind kind, std::size_t member = 0,
          member_end how = member_end::normal) {
  auto& st = self->state;
  journaled_group_input in;
  in.kind = kind;
  in.at_s = now_s(self);
  in.member = static_cast<std::uint32_t>(member);
  in.how = how;
  if (kind == input_kind::start)
    in.run = st.opts.run;
  apply_input(self, in);
  auto n = ++st.slot->inputs;
  if (st.opts.tree->journal && st.slot->seq != 0)
    self->send(st.opts.tree->journal, jrecord_atom::value, st.slot->seq, n,
               encode(in));
}

void pump(group_ptr self);

/// Sends a `group` event about this group to the events sink.
void emit(group_ptr self, std::string_view change, std::string_view member,
          std::string_view how, const std::vector<std::string>& members = {},
          std::string_view outcome = {}) {
  auto& st = self->state;
  if (!st.opts.events)
    return;
  event_head h{st.opts.spec->id, 0, st.opts.trace_id, st.span, wall_clock_s()};
  self->send(st.opts.events, event_atom::value,
             group_event(h, change, member, how, members,
                         st.machine->restart_count(), outcome));
}

/// The word for how a group's end counts as a result.
std::string_view outcome_word(member_end x) {
  switch (x) {
    case member_end::normal:
      return "succeeded";
    case member_end::failed:
      return "failed";
    case member_end::stopped:
      return "stopped";
  }
  return "failed";
}

/// Tells the parent how the group ended, and exits.
void report_end(group_ptr self) {
  auto& st = self->state;
  auto& m = *st.machine;
  group_report r;
  r.group_id = st.opts.spec->id;
  r.as_member = m.end_as_member();
  r.reason = m.end_reason().value_or(group_end::completed);
  if (auto by = m.end_member())
    r.by_member = st.opts.spec->members[*by].id;
  r.restarts = m.restart_count();
  emit(self, "ended", r.by_member, to_string(r.reason), {},
       outcome_word(r.as_member));
  if (st.opts.parent)
    self->send(st.opts.parent, group_ended_atom::value, std::move(r));
  self->quit();
}

/// Member `i` runs (its start was confirmed).
void member_up(group_ptr self, std::size_t i) {
  auto& st = self->state;
  feed(self, input_kind::started, i);
  emit(self, "member_started", st.opts.spec->members[i].id, {});
  pump(self);
}

/// Feeds the machine an end of member `i` (`ended`, or a failed start when
/// `how` is empty), with the events: the end, and the restart decision it
/// led to, if it did.
void member_down(group_ptr self, std::size_t i, std::optional<member_end> how) {
  auto& st = self->state;
  auto& m = *st.machine;
  auto& members = st.opts.spec->members;
  auto before = m.restart_count();
  emit(self, how ? "member_ended" : "member_start_failed", members[i].id,
       how ? to_string(*how) : "failed");
  if (how)
    feed(self, input_kind::ended, i, *how);
  else
    feed(self, input_kind::start_failed, i);
  // A workflow's steps that will not run now.
  for (auto k : m.snapshot().skipped)
    emit(self, "member_skipped", members[k].id, members[i].id);
  if (m.restart_count() > before && !m.history().empty()) {
    auto& d = m.history().back();
    std::vector<std::string> names;
    names.reserve(d.restarted.size());
    for (auto k : d.restarted)
      names.push_back(members[k].id);
    emit(self, "restart", members[d.member].id, to_string(d.cause), names);
  }
  pump(self);
}

/// Asks the host to start task member `i`'s current run (`run_of`), and
/// calls `done` with its answer (false for an error).
template<class Done>
void ask_host_to_start(group_ptr self, std::size_t i, Done done) {
  auto& st = self->state;
  self
    // No timeout: the host answers every start (its admission checks may
    // take long), and CAF 0.17 keeps a request's timeout on its clock until
    // it expires, answered or not.
    ->request(st.opts.host, caf::infinite, member_start_atom::value,
              st.opts.spec->id, *st.opts.spec->members[i].task, st.run_of[i])
    .then([=](bool ok) { done(ok); }, [=](caf::error&) { done(false); });
}

/// Starts member `i`: a nested group at once, a task through the host.
void start_member(group_ptr self, std::size_t i) {
  auto& st = self->state;
  const auto& member = st.opts.spec->members[i];
  if (member.group) {
    group_options child;
    child.spec = member.group;
    child.host = st.opts.host;
    child.parent = caf::actor_cast<group_parent_actor>(self);
    child.events = st.opts.events;
    child.trace_id = st.opts.trace_id;
    child.seed = st.ids->child_seed();
    child.tree = st.opts.tree;
    child.run = st.run_of[i];
    st.children[i] = caf::actor_cast<group_supervisor_actor>(
      spawn_group(self->system(), std::move(child)));
    self->link_to(st.children[i]);
    // Started once it says so (`group_started`).
    return;
  }
  ask_host_to_start(self, i, [=](bool ok) {
    if (ok)
      member_up(self, i);
    else
      member_down(self, i, std::nullopt);
  });
}

/// Stops member `i`; its end comes back as `member_ended` (a task) or
/// `group_ended` (a nested group).
void stop_member(group_ptr self, std::size_t i) {
  auto& st = self->state;
  const auto& member = st.opts.spec->members[i];
  auto mode = st.stop.value_or(stop_mode::cancel);
  if (member.group) {
    self->send(st.children[i], stop_atom::value, mode);
    return;
  }
  self->send(st.opts.host, member_stop_atom::value, member.id,
             mode == stop_mode::kill ? 0.0
                                     : member.task->settings.stop_grace_s);
}

/// Hands out what the machine asks for, carried out when `act` (else only
/// noted: a replay); a start gets its run token.
void take_ops(group_ptr self, bool act) {
  auto& st = self->state;
  auto& m = *st.machine;
  while (auto op = m.next()) {
    if (op->kind == group_op::start)
      st.run_of[op->member] = run_token(self);
    if (!act)
      continue;
    if (op->kind == group_op::start)
      start_member(self, op->member);
    else
      stop_member(self, op->member);
  }
}

/// Carries out what the machine asks for, until it waits for an answer or
/// an end; reports the group's end once it has one.
void pump(group_ptr self) {
  take_ops(self, true);
  auto& m = *self->state.machine;
  auto& st = self->state;
  if (m.done()) {
    report_end(self);
  } else if (m.first_start_done() && !st.announced) {
    st.announced = true;
    emit(self, "started", {}, {});
    if (st.opts.parent)
      self->send(st.opts.parent, group_started_atom::value, st.opts.spec->id);
  }
}

/// Whether the current message comes from the supervisor of nested group
/// member `i`.
bool from_child(group_ptr self, std::size_t i) {
  auto& child = self->state.children[i];
  return child && self->current_sender() ==
                    caf::actor_cast<caf::strong_actor_ptr>(child);
}

/// Nested group member `i` ended `how` (its report, or its exit without
/// one): before it said it started, its start failed.
void child_ended(group_ptr self, std::size_t i, member_end how) {
  auto& st = self->state;
  self->unlink_from(st.children[i]);
  st.children[i] = nullptr;
  if (st.machine->phase(i) == member_phase::starting)
    member_down(self, i, std::nullopt);
  else
    member_down(self, i, how);
}

/// The ids of the groups nested in `g`, at every level.
void nested_group_ids(const group_spec& g, std::vector<std::string>& out) {
  for (auto& m : g.members)
    if (m.group) {
      out.push_back(m.group->id);
      nested_group_ids(*m.group, out);
    }
}

/// The rows of this group and its members; each running nested group's
/// rows (from its own `status`) follow its member row, a level deeper.
caf::result<std::vector<group_row>> tree_status(group_ptr self) {
  auto& st = self->state;
  auto& m = *st.machine;
  auto& spec = *st.opts.spec;
  auto rows = std::make_shared<std::vector<std::vector<group_row>>>();
  rows->resize(spec.members.size() + 1);
  group_row top;
  top.id = spec.id;
  top.group = true;
  top.phase = member_phase::running;
  top.restarts = static_cast<int>(m.restart_count());
  top.strategy = spec.strategy;
  rows->front().push_back(std::move(top));
  std::size_t asked = 0;
  for (std::size_t i = 0; i < spec.members.size(); ++i) {
    auto& member = spec.members[i];
    group_row r;
    r.depth = 1;
    r.id = member.id;
    r.group = member.group != nullptr;
    r.restart = member.restart;
    r.significant = member.significant;
    r.phase = m.phase(i);
    r.last = m.last_end(i);
    r.restarts = m.restarts_of(i);
    if (member.group)
      r.strategy = member.group->strategy;
    for (auto d : member.depends_on)
      r.depends_on.push_back(spec.members[d].id);
    (*rows)[i + 1].push_back(std::move(r));
    if (st.children[i])
      ++asked;
  }
  auto flatten = [rows] {
    std::vector<group_row> out;
    for (auto& part : *rows)
      for (auto& r : part)
        if (out.size() < wire::max_list_entries)
          out.push_back(std::move(r));
    return out;
  };
  if (asked == 0)
    return flatten();
  auto rp = self->make_response_promise<std::vector<group_row>>();
  auto pending = std::make_shared<std::size_t>(asked);
  for (std::size_t i = 0; i < spec.members.size(); ++i) {
    if (!st.children[i])
      continue;
    auto done = [=]() mutable {
      if (--*pending == 0)
        rp.deliver(flatten());
    };
    self->request(st.children[i], caf::infinite, status_atom::value)
      .then(
        [=](std::vector<group_row>& below) mutable {
          auto& part = (*rows)[i + 1];
          // Its own row is its member row here; its members go below.
          for (std::size_t k = 1; k < below.size(); ++k) {
            below[k].depth += 1;
            part.push_back(std::move(below[k]));
          }
          done();
        },
        [=](caf::error&) mutable { done(); });
  }
  return rp;
}

/// The index of the member named `id`, if the group has one.
std::optional<std::size_t> member_index(group_ptr self, const std::string& id) {
  auto i = self->state.index.find(id);
  if (i == self->state.index.end())
    return std::nullopt;
  return i->second;
}

/// Finds running task member `i` again after a replay: the host answers a
/// start of the run it knows as that run went (true, then its end if it
/// ended); a member it cannot account for ended failed.
void reattach_member(group_ptr self, std::size_t i) {
  ask_host_to_start(self, i, [=](bool ok) {
    auto phase = self->state.machine->phase(i);
    if (!ok &&
        (phase == member_phase::running || phase == member_phase::stopping))
      member_down(self, i, member_end::failed);
  });
}

/// Replays the inputs the journal kept for this group, or returns false
/// when there are none of its current run (then it starts afresh).
bool replay(group_ptr self) {
  auto& st = self->state;
  auto inputs = std::exchange(st.slot->replay, {});
  if (inputs.empty())
    return false;
  // The current run's inputs begin at its last start.
  auto first = inputs.end();
  for (auto i = inputs.begin(); i != inputs.end(); ++i)
    if (i->kind == input_kind::start)
      first = i;
  if (first == inputs.end() || first->run != st.opts.run) {
    // Its run never journaled its start: the inputs are an earlier run's.
    st.slot->inputs = static_cast<std::int64_t>(inputs.size());
    return false;
  }
  std::int64_t n = first - inputs.begin();
  for (auto i = first; i != inputs.end(); ++i) {
    ++n;
    st.slot->inputs = n;
    // An input that does not fit the group (a damaged record) is skipped.
    if (apply_input(self, *i))
      take_ops(self, false);
  }
  st.slot->inputs = static_cast<std::int64_t>(inputs.size());
  return true;
}

/// After a replay: every member the machine has live is found again (a
/// task through the host, a nested group by resuming its own supervisor),
/// an op under way is carried out again, and the parent learns what it
/// may have missed (that the group started, or how it ended).
void resume(group_ptr self) {
  auto& st = self->state;
  auto& m = *st.machine;
  if (!m.done()) {
    for (std::size_t i = 0; i < m.size(); ++i) {
      auto phase = m.phase(i);
      auto group = st.opts.spec->members[i].group != nullptr;
      auto live =
        phase == member_phase::running || phase == member_phase::stopping;
      if (phase == member_phase::starting || (group && live)) {
        // A nested group resumes in its own supervisor.
        start_member(self, i);
      } else if (live) {
        reattach_member(self, i);
      }
      if (phase == member_phase::stopping)
        stop_member(self, i);
    }
  }
  if (m.first_start_done()) {
    // The parent may not have learned it (before the group's end, if it
    // ended): it ignores a second word.
    st.announced = true;
    if (st.opts.parent)
      self->send(st.opts.parent, group_started_atom::value, st.opts.spec->id);
  }
  pump(self);
}

/// Stops the group: every member in reverse order (at once for a kill).
void stop_group(group_ptr self, stop_mode mode) {
  feed(self, mode == stop_mode::kill ? input_kind::kill : input_kind::stop);
  pump(self);
}

group_supervisor_actor::behavior_type group_behavior(group_ptr self,
                                                     group_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  if (!st.opts.tree)
    st.opts.tree = make_group_tree(*st.opts.spec, st.opts.seed);
  st.slot = st.opts.tree->groups.at(st.opts.spec->id).get();
  st.run_of.resize(st.opts.spec->members.size());
  st.ids.emplace(st.opts.seed);
  st.span = st.ids->span_id();
  st.children.resize(st.opts.spec->members.size());
  for (std::size_t i = 0; i < st.opts.spec->members.size(); ++i) {
    auto& member = st.opts.spec->members[i];
    st.index.emplace(member.id, i);
    if (member.group) {
      std::vector<std::string> ids;
      nested_group_ids(*member.group, ids);
      for (auto& id : ids)
        st.below.emplace(std::move(id), i);
    }
  }
  // A nested group that dies without reporting failed; anything else that
  // ends this group's link (its parent going) ends it too.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto& st = self->state;
    for (std::size_t i = 0; i < st.children.size(); ++i)
      if (st.children[i] && st.children[i].address() == msg.source) {
        if (msg.reason)
          child_ended(self, i, member_end::failed);
        else
          st.children[i] = nullptr;
        return;
      }
    if (msg.reason)
      self->quit(std::move(msg.reason));
  });
  if (replay(self)) {
    resume(self);
  } else {
    feed(self, input_kind::start);
    pump(self);
  }
  return {
    [=](member_ended_atom, const std::string& id, member_end how) {
      if (self->current_sender() !=
          caf::actor_cast<caf::strong_actor_ptr>(self->state.opts.host))
        return;
      auto i = member_index(self, id);
      if (!i || self->state.opts.spec->members[*i].group)
        return;
      member_down(self, *i, how);
    },
    [=](group_started_atom, const std::string& id) {
      auto i = member_index(self, id);
      // A resumed nested group says it again: only a start counts.
      if (!i || !from_child(self, *i) ||
          self->state.machine->phase(*i) != member_phase::starting)
        return;
      member_up(self, *i);
    },
    [=](group_ended_atom, const group_report& r) {
      auto i = member_index(self, r.group_id);
      if (!i || !from_child(self, *i))
        return;
      child_ended(self, *i, r.as_member);
    },
    [=](stop_atom, stop_mode mode) { stop_group(self, mode); },
    [=](stop_atom, const std::string& id, stop_mode mode) -> caf::result<bool> {
      auto& st = self->state;
      if (id == st.opts.spec->id) {
        stop_group(self, mode);
        return true;
      }
      auto i = st.below.find(id);
      if (i == st.below.end()) {
        // A nested group member of this group itself.
        auto k = member_index(self, id);
        if (!k || !st.opts.spec->members[*k].group || !st.children[*k])
          return false;
        return self->delegate(st.children[*k], stop_atom::value, id, mode);
      }
      if (!st.children[i->second])
        return false;
      return self->delegate(st.children[i->second], stop_atom::value, id, mode);
    },
    [=](status_atom) { return tree_status(self); },
  };
}

} // namespace

std::shared_ptr<group_tree> make_group_tree(const group_spec& top,
                                            std::uint64_t seed) {
  auto tree = std::make_shared<group_tree>();
  // 31 bits of the seed, above the 32 of a group's input count: tokens are
  // positive and differ between trees.
  tree->salt = static_cast<std::int64_t>((seed ^ (seed >> 31)) & 0x7fffffff)
               << 32;
  if (tree->salt == 0)
    tree->salt = std::int64_t{1} << 32;
  for (auto* g : tree_groups(top))
    tree->groups.emplace(g->id, std::make_unique<group_slot>());
  return tree;
}

group_supervisor_actor spawn_group(caf::actor_system& sys, group_options opts) {
  return sys.spawn(group_behavior, std::move(opts));
}

} // namespace tasksup

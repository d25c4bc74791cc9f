#include "tasksup/actors/group_supervisor_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

/// The longest a host may take to say whether a member runs: admission
/// checks of a task may run commands.
constexpr auto member_start_timeout = std::chrono::minutes{10};

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
  static inline const char* name = "tasksup.group";
};

using group_ptr = group_supervisor_actor::stateful_pointer<group_state>;

double now_s(group_ptr self) {
  return std::chrono::duration<double>(self->clock().now().time_since_epoch())
    .count();
}

void pump(group_ptr self);

/// Tells the parent how the group ended, and exits.
void report_end(group_ptr self) {
  auto& st = self->state;
  auto& m = *st.machine;
  group_report r;
  r.group_id = st.opts.spec.id;
  r.as_member = m.end_as_member();
  r.reason = m.end_reason().value_or(group_end::completed);
  if (auto by = m.end_member())
    r.by_member = st.opts.spec.members[*by].id;
  r.restarts = m.restart_count();
  if (st.opts.parent)
    self->send(st.opts.parent, group_ended_atom::value, std::move(r));
  self->quit();
}

/// Starts member `i`: a nested group at once, a task through the host.
void start_member(group_ptr self, std::size_t i) {
  auto& st = self->state;
  const auto& member = st.opts.spec.members[i];
  if (member.group) {
    group_options child;
    child.spec = *member.group;
    child.host = st.opts.host;
    child.parent = caf::actor_cast<group_parent_actor>(self);
    st.children[i] = caf::actor_cast<group_supervisor_actor>(
      spawn_group(self->system(), std::move(child)));
    self->link_to(st.children[i]);
    // Started once it says so (`group_started`).
    return;
  }
  self
    ->request(st.opts.host, member_start_timeout, member_start_atom::value,
              st.opts.spec.id, *member.task)
    .then(
      [=](bool ok) {
        if (ok)
          self->state.machine->started(i, now_s(self));
        else
          self->state.machine->start_failed(i, now_s(self));
        pump(self);
      },
      [=](caf::error&) {
        self->state.machine->start_failed(i, now_s(self));
        pump(self);
      });
}

/// Stops member `i`; its end comes back as `member_ended` (a task) or
/// `group_ended` (a nested group).
void stop_member(group_ptr self, std::size_t i) {
  auto& st = self->state;
  const auto& member = st.opts.spec.members[i];
  auto mode = st.stop.value_or(stop_mode::cancel);
  if (member.group) {
    self->send(st.children[i], stop_atom::value, mode);
    return;
  }
  self->send(st.opts.host, member_stop_atom::value, member.id,
             mode == stop_mode::kill ? 0.0
                                     : member.task->settings.stop_grace_s);
}

/// Carries out what the machine asks for, until it waits for an answer or
/// an end; reports the group's end once it has one.
void pump(group_ptr self) {
  auto& m = *self->state.machine;
  while (auto op = m.next()) {
    if (op->kind == group_op::start)
      start_member(self, op->member);
    else
      stop_member(self, op->member);
  }
  auto& st = self->state;
  if (m.done()) {
    report_end(self);
  } else if (m.first_start_done() && !st.announced) {
    st.announced = true;
    if (st.opts.parent)
      self->send(st.opts.parent, group_started_atom::value, st.opts.spec.id);
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
  auto& m = *st.machine;
  if (m.phase(i) == member_phase::starting)
    m.start_failed(i, now_s(self));
  else
    m.ended(i, how, now_s(self));
  pump(self);
}

/// The index of the member named `id`, if the group has one.
std::optional<std::size_t> member_index(group_ptr self, const std::string& id) {
  auto i = self->state.index.find(id);
  if (i == self->state.index.end())
    return std::nullopt;
  return i->second;
}

group_supervisor_actor::behavior_type group_behavior(group_ptr self,
                                                     group_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.machine.emplace(st.opts.spec.shape());
  st.children.resize(st.opts.spec.members.size());
  for (std::size_t i = 0; i < st.opts.spec.members.size(); ++i)
    st.index.emplace(st.opts.spec.members[i].id, i);
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
  st.machine->start(now_s(self));
  pump(self);
  return {
    [=](member_ended_atom, const std::string& id, member_end how) {
      if (self->current_sender() !=
          caf::actor_cast<caf::strong_actor_ptr>(self->state.opts.host))
        return;
      auto i = member_index(self, id);
      if (!i || self->state.opts.spec.members[*i].group)
        return;
      self->state.machine->ended(*i, how, now_s(self));
      pump(self);
    },
    [=](group_started_atom, const std::string& id) {
      auto i = member_index(self, id);
      if (!i || !from_child(self, *i))
        return;
      self->state.machine->started(*i, now_s(self));
      pump(self);
    },
    [=](group_ended_atom, const group_report& r) {
      auto i = member_index(self, r.group_id);
      if (!i || !from_child(self, *i))
        return;
      child_ended(self, *i, r.as_member);
    },
    [=](stop_atom, stop_mode mode) {
      auto& st = self->state;
      if (!st.stop || mode == stop_mode::kill)
        st.stop = mode;
      st.machine->stop(now_s(self));
      pump(self);
    },
  };
}

} // namespace

group_supervisor_actor spawn_group(caf::actor_system& sys, group_options opts) {
  return sys.spawn(group_behavior, std::move(opts));
}

} // namespace tasksup

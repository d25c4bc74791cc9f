#include "event_hub.hpp"

#include <caf/actor_cast.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/spawn_options.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace tasksup::detail {

namespace {

/// The events of one task, kept so that a client subscribing after the task
/// began still sees all of it: every event but output lines, and output
/// lines up to a byte budget (the attempt's log file has them all).
struct event_history {
  std::vector<event> events;
  std::size_t log_bytes = 0;
  std::size_t dropped_logs = 0;

  /// Output lines kept per task, in bytes of text (a line's JSON is its
  /// text, escaped, plus the head's ~170 bytes).
  static constexpr std::size_t log_budget = 64 * 1024;
  static constexpr std::size_t log_head_bytes = 170;

  void add(const event& ev) {
    if (ev.kind == event_kind::log) {
      // Measured without rendering: the hub renders nothing.
      auto* f = ev.fields();
      auto* line = f ? std::get_if<event_data::log>(&f->data) : nullptr;
      auto bytes = line ? line->line.size() + log_head_bytes : ev.json().size();
      if (log_bytes + bytes > log_budget) {
        ++dropped_logs;
        return;
      }
      log_bytes += bytes;
    }
    events.push_back(ev);
  }
};

/// What the hub knows of one task.
struct tracked_task {
  /// The journal's number of the task, 0 without a journal.
  std::int64_t seq = 0;
  /// The number of its last journaled event.
  std::int64_t event_n = 0;
  /// Rebuilt after a restart: its history before is only in the journal.
  bool restored = false;
  /// Its events since it was tracked (a restored, finished task has none).
  event_history history;
};

struct event_hub_state {
  registry_actor registry;
  journal_actor journal;
  std::map<std::string, tracked_task> tasks;
  std::vector<subscriber_actor> subscribers;
  static inline const char* name = "tasksup.event_hub";
};

using hub_pointer = event_hub_actor::stateful_pointer<event_hub_state>;

void publish(hub_pointer self, const event& ev) {
  auto& st = self->state;
  // The registry tracks a task before its supervisor runs.
  if (auto i = st.tasks.find(ev.task_id); i != st.tasks.end()) {
    auto& t = i->second;
    t.history.add(ev);
    // Output lines are in the attempt's log file; the rest is history.
    if (st.journal && t.seq > 0 && ev.kind != event_kind::log)
      self->send(st.journal, jevent_atom::value, t.seq, ++t.event_n, ev);
  }
  // Subscribers take events from the registry only: the hub is part of it.
  for (auto& sub : st.subscribers)
    caf::send_as(st.registry, sub, event_atom::value, ev);
}

void subscribe(hub_pointer self, const subscriber_actor& sub) {
  auto& subs = self->state.subscribers;
  if (std::find(subs.begin(), subs.end(), sub) == subs.end()) {
    subs.push_back(sub);
    self->monitor(sub);
  }
}

event_hub_actor::behavior_type
event_hub(hub_pointer self, registry_actor registry, journal_actor journal) {
  self->state.registry = std::move(registry);
  self->state.journal = std::move(journal);
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& subs = self->state.subscribers;
    subs.erase(
      std::remove_if(subs.begin(), subs.end(),
                     [&](auto& x) { return x.address() == dm.source; }),
      subs.end());
  });
  return {
    [=](event_atom, const event& ev) { publish(self, ev); },
    [=](event_atom, const std::vector<event>& evs) {
      // A supervisor's events of one failed attempt, in order.
      for (auto& ev : evs)
        publish(self, ev);
    },
    [=](escalate_atom, task_result& r) {
      // The registry accepts a result only from the task's own supervisor:
      // the hub names the sender.
      self->send(self->state.registry, escalate_atom::value, std::move(r),
                 caf::actor_cast<caf::actor_addr>(self->current_sender()));
    },
    [=](escalate_atom, task_result& r, caf::actor_addr& from) {
      // The registry's word that a supervisor ended without a result, sent
      // back after whatever that supervisor sent here before it ended.
      self->send(self->state.registry, escalate_atom::value, std::move(r),
                 std::move(from));
    },
    [=](subscribe_atom, const subscriber_actor& sub) {
      subscribe(self, sub);
      return true;
    },
    [=](subscribe_atom, const subscriber_actor& sub,
        const std::string& task_id) -> caf::result<std::vector<event>> {
      auto& st = self->state;
      auto i = st.tasks.find(task_id);
      if (i == st.tasks.end()) {
        // The registry says whether retention removed it, and when.
        auto rp = self->make_response_promise<std::vector<event>>();
        self->request(st.registry, caf::infinite, status_atom::value, task_id)
          .then(
            [rp, task_id](task_status&) mutable {
              rp.deliver(make_error(protocol_error::unknown_task,
                                    "no events of task '" + task_id + "'"));
            },
            [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
        return rp;
      }
      subscribe(self, sub);
      auto& t = i->second;
      if (!t.restored || !st.journal)
        return t.history.events;
      // The journal has every event but output lines, up to the ones queued
      // just now; everything after reaches `sub` as it happens.
      auto rp = self->make_response_promise<std::vector<event>>();
      self
        ->request(st.journal, caf::infinite, jhistory_atom::value, t.seq,
                  task_id)
        .then(
          [rp](std::vector<event>& evs) mutable { rp.deliver(std::move(evs)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](unsubscribe_atom, const subscriber_actor& sub) {
      auto& subs = self->state.subscribers;
      subs.erase(std::remove(subs.begin(), subs.end(), sub), subs.end());
      return true;
    },
    [=](track_atom, const std::string& task_id, std::int64_t seq,
        std::int64_t last_event, bool restored) {
      // A group member's rerun goes on with its history.
      auto& tasks = self->state.tasks;
      if (auto i = tasks.find(task_id); i != tasks.end() && !restored) {
        i->second.seq = seq;
        i->second.event_n = last_event;
        return;
      }
      tasks.insert_or_assign(task_id,
                             tracked_task{seq, last_event, restored, {}});
    },
    [=](untrack_atom, const std::string& task_id) {
      self->state.tasks.erase(task_id);
    },
  };
}

} // namespace

event_hub_actor spawn_event_hub(caf::local_actor* registry,
                                journal_actor journal) {
  return registry->spawn<caf::linked>(
    event_hub, caf::actor_cast<registry_actor>(registry), std::move(journal));
}

} // namespace tasksup::detail

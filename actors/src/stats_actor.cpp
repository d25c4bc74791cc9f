#include "tasksup/actors/stats_actor.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/events.hpp"
#include "tasksup/actors/journal_figures.hpp"
#include "tasksup/actors/node_stats.hpp"
#include "tasksup/actors/protocol.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

/// How long a query waits for the registry.
constexpr std::chrono::seconds registry_timeout{5};

/// How long a scrape waits for the journal (busy with a slow commit, it
/// may not answer in time: the scrape then goes without its figures).
constexpr std::chrono::seconds journal_timeout{2};

/// Live events held before the replay sorted them out, at most; past it
/// they are folded as they come (a node starting with that much going on
/// then counts some events of resumed tasks twice rather than grow).
constexpr std::size_t max_held_events = 100000;

struct stats_state {
  registry_actor registry;
  /// The node's journal; null without one.
  journal_actor journal;
  node_stats stats;
  /// Until the registry said which tasks it has, live events wait here.
  bool sorted = false;
  std::vector<event> early;
  /// Live events of tasks whose history is on its way, by task.
  std::map<std::string, std::vector<event>> held;
  std::size_t held_count = 0;
  static inline const char* name = "tasksup.stats";
};

using stats_actor_t = stats_actor::stateful_pointer<stats_state>;

/// Folds in `past` (a task's history) and then its held live events that
/// the history did not have, in order: each event counts once, and a task
/// resumed from the journal counts the attempts of its earlier life too.
void fold_history(stats_actor_t self, const std::string& id,
                  const std::vector<event>& past) {
  auto& st = self->state;
  std::set<std::string> seen;
  for (auto& ev : past) {
    st.stats.add(ev);
    seen.insert(ev.json());
  }
  if (auto i = st.held.find(id); i != st.held.end()) {
    for (auto& ev : i->second)
      if (seen.count(ev.json()) == 0)
        st.stats.add(ev);
    st.held_count -= i->second.size();
    st.held.erase(i);
  }
}

/// Folds in the history of every task the registry has (finished ones
/// from the journal after a restart, and unfinished ones resumed from it,
/// whose earlier attempts count as well). Live events of a task wait until
/// its history is in, so that nothing counts twice or out of order.
void replay_history(stats_actor_t self) {
  auto me = caf::actor_cast<subscriber_actor>(self);
  auto release_early = [=] {
    auto& st = self->state;
    for (auto& ev : st.early) {
      if (auto i = st.held.find(ev.task_id); i != st.held.end()) {
        i->second.push_back(std::move(ev));
        ++st.held_count;
      } else {
        st.stats.add(ev);
      }
    }
    st.early.clear();
    st.early.shrink_to_fit();
    st.sorted = true;
  };
  self->request(self->state.registry, registry_timeout, status_atom::value)
    .then(
      [=](std::vector<task_status>& all) {
        for (auto& s : all)
          self->state.held[s.task_id];
        release_early();
        for (auto& s : all) {
          auto id = s.task_id;
          self
            ->request(self->state.registry, registry_timeout,
                      subscribe_atom::value, me, id)
            .then(
              [=](std::vector<event>& past) { fold_history(self, id, past); },
              [=](caf::error&) { fold_history(self, id, {}); });
        }
      },
      [=](caf::error&) { release_early(); });
}

/// Answers `rp` with the metrics of `tasks` and `h`, the journal's figures
/// when the node has a journal that answers, `cluster` (the cluster's
/// figures, if any) and the tasks restarting often.
void deliver_metrics(stats_actor_t self, caf::response_promise rp,
                     std::vector<task_status> tasks, node_health h,
                     std::string cluster) {
  cluster += self->state.stats.restarting_prometheus(wall_clock_s());
  if (!self->state.journal) {
    rp.deliver(self->state.stats.prometheus(tasks, h) + cluster);
    return;
  }
  self->request(self->state.journal, journal_timeout, jstats_atom::value)
    .then(
      [=](journal_figures& j) mutable {
        rp.deliver(self->state.stats.prometheus(tasks, h, &j) + cluster);
      },
      [=](caf::error&) mutable {
        rp.deliver(self->state.stats.prometheus(tasks, h) + cluster);
      });
}

/// Adds the cluster's figures (the registry's worker nodes) and goes on
/// with `deliver_metrics`; without an answer, the scrape goes without them.
void deliver_with_cluster(stats_actor_t self, caf::response_promise rp,
                          std::vector<task_status> tasks, node_health h) {
  self->request(self->state.registry, registry_timeout, nodes_atom::value)
    .then(
      [=](std::vector<node_info>& nodes) mutable {
        std::vector<node_load> loads;
        for (auto& n : nodes)
          loads.push_back(node_load{n.offer, n.running});
        deliver_metrics(self, rp, tasks, h,
                        node_stats::cluster_prometheus(loads, tasks));
      },
      [=](caf::error&) mutable {
        deliver_metrics(self, rp, tasks, h, std::string{});
      });
}

stats_actor::behavior_type stats_behavior(stats_actor_t self,
                                          registry_actor registry,
                                          journal_actor journal) {
  self->state.registry = registry;
  self->state.journal = std::move(journal);
  self->monitor(registry);
  self->set_down_handler([=](const caf::down_msg& dm) {
    if (dm.source == self->state.registry.address())
      self->quit(dm.reason);
  });
  self
    ->request(registry, registry_timeout, subscribe_atom::value,
              caf::actor_cast<subscriber_actor>(self))
    .then([=](bool) { replay_history(self); },
          [=](caf::error& err) { self->quit(std::move(err)); });
  return {
    [=](event_atom, const event& ev) {
      auto& st = self->state;
      if (self->current_sender() !=
          caf::actor_cast<caf::strong_actor_ptr>(st.registry))
        return;
      if (ev.kind == event_kind::log)
        return; // output lines are not figures
      if (!st.sorted && st.early.size() < max_held_events) {
        st.early.push_back(ev);
        return;
      }
      if (auto i = st.held.find(ev.task_id);
          i != st.held.end() && st.held_count < max_held_events) {
        i->second.push_back(ev);
        ++st.held_count;
        return;
      }
      st.stats.add(ev);
    },
    [=](metrics_atom) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      auto reg = self->state.registry;
      self->request(reg, registry_timeout, status_atom::value)
        .then(
          [=](std::vector<task_status>& tasks) mutable {
            self->request(reg, registry_timeout, health_atom::value)
              .then(
                [=](node_health& h) mutable {
                  deliver_with_cluster(self, rp, tasks, h);
                },
                [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](agents_atom, double window_s) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      self->request(self->state.registry, registry_timeout, health_atom::value)
        .then(
          [=](node_health& h) mutable {
            rp.deliver(
              self->state.stats.agents_json(wall_clock_s(), window_s, h));
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](clock_atom) { return self->state.stats.clocks(wall_clock_s()); },
    [=](clock_atom, const std::string& task_id) {
      return self->state.stats.clocks(wall_clock_s(), task_id);
    },
    [=](clock_atom, std::vector<std::string>& task_ids) {
      return self->state.stats.clocks(wall_clock_s(), std::move(task_ids));
    },
    [=](view_atom) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      self->request(self->state.registry, registry_timeout, status_atom::value)
        .then(
          [=](std::vector<task_status>& tasks) mutable {
            rp.deliver(self->state.stats.tasks_json(tasks, wall_clock_s()));
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](view_atom, std::uint64_t limit,
        const std::string& after) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      self->request(self->state.registry, registry_timeout, status_atom::value)
        .then(
          [=](std::vector<task_status>& tasks) mutable {
            rp.deliver(self->state.stats.tasks_page_json(
              std::move(tasks), wall_clock_s(), limit, after));
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](view_atom, const std::string& task_id) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      auto reg = self->state.registry;
      auto me = caf::actor_cast<subscriber_actor>(self);
      self->request(reg, registry_timeout, status_atom::value, task_id)
        .then(
          [=](task_status& st) mutable {
            // Already subscribed: this only fetches the history.
            self
              ->request(reg, registry_timeout, subscribe_atom::value, me,
                        task_id)
              .then(
                [=](std::vector<event>& past) mutable {
                  rp.deliver(
                    self->state.stats.task_json(st, past, wall_clock_s()));
                },
                [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
  };
}

} // namespace

stats_actor spawn_stats(caf::actor_system& sys, registry_actor registry,
                        journal_actor journal) {
  return sys.spawn(stats_behavior, std::move(registry), std::move(journal));
}

} // namespace tasksup

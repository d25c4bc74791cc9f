#include "tasksup/actors/stats_actor.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/journal_figures.hpp"
#include "tasksup/actors/node_stats.hpp"
#include "tasksup/actors/protocol.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <chrono>
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

struct stats_state {
  caf::actor registry;
  /// The node's journal; null without one.
  caf::actor journal;
  node_stats stats;
  static inline const char* name = "tasksup.stats";
};

using stats_actor_t = caf::stateful_actor<stats_state>;

/// Folds in the histories of tasks that finished before the subscription
/// began. A task still running is left to the live stream (its earlier
/// events are not replayed: they would be counted once, its later ones
/// live); one already seen live is skipped, so nothing counts twice.
void replay_finished(stats_actor_t* self) {
  auto me = caf::actor_cast<caf::actor>(self);
  self->request(self->state.registry, registry_timeout, status_atom::value)
    .then(
      [=](std::vector<task_status>& all) {
        for (auto& s : all) {
          if (s.state != task_state::done || self->state.stats.knows(s.task_id))
            continue;
          self
            ->request(self->state.registry, registry_timeout,
                      subscribe_atom::value, me, s.task_id)
            .then(
              [=](std::vector<event>& past) {
                auto id = past.empty() ? std::string{} : past.front().task_id;
                if (id.empty() || self->state.stats.knows(id))
                  return;
                for (auto& ev : past)
                  self->state.stats.add(ev);
              },
              [](caf::error&) {});
        }
      },
      [](caf::error&) {});
}

/// Answers `rp` with the metrics of `tasks` and `h`, and the journal's
/// figures when the node has a journal that answers.
void deliver_metrics(stats_actor_t* self, caf::response_promise rp,
                     std::vector<task_status> tasks, node_health h) {
  if (!self->state.journal) {
    rp.deliver(self->state.stats.prometheus(tasks, h));
    return;
  }
  self->request(self->state.journal, journal_timeout, jstats_atom::value)
    .then(
      [=](journal_figures& j) mutable {
        rp.deliver(self->state.stats.prometheus(tasks, h, &j));
      },
      [=](caf::error&) mutable {
        rp.deliver(self->state.stats.prometheus(tasks, h));
      });
}

caf::behavior stats_behavior(stats_actor_t* self, caf::actor registry,
                             caf::actor journal) {
  self->state.registry = registry;
  self->state.journal = std::move(journal);
  self->monitor(registry);
  self->set_down_handler([=](const caf::down_msg& dm) {
    if (dm.source == self->state.registry.address())
      self->quit(dm.reason);
  });
  self
    ->request(registry, registry_timeout, subscribe_atom::value,
              caf::actor_cast<caf::actor>(self))
    .then([=](bool) { replay_finished(self); },
          [=](caf::error& err) { self->quit(std::move(err)); });
  return {
    [=](event_atom, const event& ev) {
      if (self->current_sender() ==
          caf::actor_cast<caf::strong_actor_ptr>(self->state.registry))
        self->state.stats.add(ev);
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
                  deliver_metrics(self, rp, tasks, h);
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
    [=](view_atom, const std::string& task_id) -> caf::result<std::string> {
      auto rp = self->make_response_promise<std::string>();
      auto reg = self->state.registry;
      auto me = caf::actor_cast<caf::actor>(self);
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

caf::actor spawn_stats(caf::actor_system& sys, caf::actor registry,
                       caf::actor journal) {
  return sys.spawn(stats_behavior, std::move(registry), std::move(journal));
}

} // namespace tasksup

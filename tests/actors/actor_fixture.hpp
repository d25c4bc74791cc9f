#pragma once

// Shared setup for the actor tests: an actor system on CAF's test
// coordinator (simulated clock, one thread, explicit run()), a collector that
// plays the parent/subscriber, a scripted runtime on the actor clock and a
// helper to make requests and read their replies.

#include "tasksup/actors/actor_timer.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/runtime/scripted_runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tasksup::test {

/// What a collector received, in order.
struct collected {
  std::vector<event> events;
  std::vector<task_result> results;
  std::vector<attempt_report> reports;
  /// How many events each message held (1, or a batch's size).
  std::vector<std::size_t> per_message;
  /// How many events had arrived when each result did.
  std::vector<std::size_t> events_before_result;

  /// The kinds of the events of `task_id` (all tasks when empty).
  std::vector<event_kind> kinds(const std::string& task_id = {}) const {
    std::vector<event_kind> out;
    for (auto& ev : events)
      if (task_id.empty() || ev.task_id == task_id)
        out.push_back(ev.kind);
    return out;
  }

  /// The events of one kind.
  std::vector<event> of(event_kind kind,
                        const std::string& task_id = {}) const {
    std::vector<event> out;
    for (auto& ev : events)
      if (ev.kind == kind && (task_id.empty() || ev.task_id == task_id))
        out.push_back(ev);
    return out;
  }
};

/// A test actor system with a simulated clock.
class fixture {
public:
  fixture() {
    cfg_.set("scheduler.policy", caf::atom("testing"));
    register_protocol(cfg_);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ =
      &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    runtime =
      std::make_shared<runtime::scripted_runtime>(make_actor_timer(*sys_));
  }

  ~fixture() {
    // Let every pending timer fire, then stop whatever is still alive, so
    // the system's destructor has nothing to wait for.
    drain();
    for (auto& x : to_stop_)
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    to_stop_.clear();
    drain();
    runtime.reset();
  }

  caf::actor_system& sys() { return *sys_; }

  /// Runs every job that is ready now (simulated time does not move).
  void run() { sched_->run(); }

  /// Moves simulated time by `seconds` and runs what became due.
  void advance(double seconds) {
    auto d = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(seconds));
    sched_->advance_time(d);
    sched_->run();
  }

  /// Moves simulated time by `seconds` and runs what became due, except
  /// `held`'s messages: they wait in its mailbox, in arrival order, until
  /// the next run(). How a test orders a race between actors.
  template<class Handle>
  void advance_all_but(const Handle& held, double seconds) {
    auto d = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(seconds));
    sched_->advance_time(d);
    auto* ptr = caf::actor_cast<caf::abstract_actor*>(held);
    sched_->run_jobs_filtered([ptr](caf::resumable* job) {
      return dynamic_cast<caf::abstract_actor*>(job) != ptr;
    });
  }

  /// Fires every pending timer (moving time forward) until nothing is left.
  void drain() {
    for (int i = 0; i < 100000; ++i) {
      sched_->run();
      if (sched_->trigger_timeouts() == 0 && !sched_->has_job())
        return;
    }
  }

  /// Stops `x` when the fixture ends.
  caf::actor keep(caf::actor x) {
    to_stop_.push_back(x);
    return x;
  }

  /// Stops `x` when the fixture ends; the test holds it as a client that
  /// does not know its interface would (to send what it does not take).
  template<class Handle>
  caf::actor keep_dynamic(const Handle& x) {
    return keep(caf::actor_cast<caf::actor>(x));
  }

  /// Stops the typed actor `x` when the fixture ends.
  template<class... Sigs>
  caf::typed_actor<Sigs...> keep(caf::typed_actor<Sigs...> x) {
    to_stop_.push_back(caf::actor_cast<caf::actor>(x));
    return x;
  }

  /// A parent/subscriber that records events, escalations and reports.
  caf::actor collector(std::shared_ptr<collected> out) {
    return keep(sys_->spawn([out]() -> caf::behavior {
      return {
        [out](event_atom, const event& ev) {
          out->events.push_back(ev);
          out->per_message.push_back(1);
        },
        [out](event_atom, const std::vector<event>& evs) {
          out->events.insert(out->events.end(), evs.begin(), evs.end());
          out->per_message.push_back(evs.size());
        },
        [out](escalate_atom, const task_result& r) {
          out->results.push_back(r);
          out->events_before_result.push_back(out->events.size());
        },
        [out](attempt_exited_atom, const attempt_report& r) {
          out->reports.push_back(r);
        },
      };
    }));
  }

  /// Sends a request from a fresh actor and runs until it is answered.
  /// `dest` is a `caf::actor` or a typed handle (whose interface then checks
  /// the request and `T` at compile time).
  template<class T, class Handle, class... Ts>
  std::optional<caf::expected<T>> ask(const Handle& dest, Ts... xs) {
    auto out = ask_later<T>(dest, xs...);
    run();
    return *out;
  }

  /// ask() without running: the answer is in the result once a run or an
  /// advance has delivered the request and its reply.
  template<class T, class Handle, class... Ts>
  std::shared_ptr<std::optional<caf::expected<T>>> ask_later(const Handle& dest,
                                                             Ts... xs) {
    auto out = std::make_shared<std::optional<caf::expected<T>>>();
    sys_->spawn([=](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, xs...)
        .then([=](T& x) { *out = std::move(x); },
              [=](caf::error& err) { *out = std::move(err); });
    });
    return out;
  }

  /// Scripted attempts, on the actor clock.
  std::shared_ptr<runtime::scripted_runtime> runtime;

private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::vector<caf::actor> to_stop_;
};

/// A step that exits with `code` after printing `lines`.
inline runtime::scripted_step
exits(int code, std::vector<std::string> lines = {}, double duration_s = 0) {
  runtime::scripted_step s;
  s.exit_code = code;
  s.lines = std::move(lines);
  s.duration_s = duration_s;
  return s;
}

/// A step that runs until stopped or killed.
inline runtime::scripted_step hangs() {
  runtime::scripted_step s;
  s.hang = true;
  return s;
}

/// An agent whose command is `<id>-cli`.
inline agent_spec agent(const std::string& id) {
  agent_spec a;
  a.agent_id = id;
  a.agent_cli = id + "-cli";
  return a;
}

/// A task running the chain `ids` (each falling back to the next).
inline task_spec task_with(const std::string& id,
                           const std::vector<std::string>& ids) {
  task_spec t;
  t.id = id;
  t.prompt = "do it";
  agent_selection sel;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    sel.agents.push_back(agent(ids[i]));
    if (i + 1 < ids.size())
      sel.agent_fallbacks[ids[i]] = ids[i + 1];
  }
  t.selection = sel;
  return t;
}

} // namespace tasksup::test

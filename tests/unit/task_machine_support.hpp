#pragma once

// What the task machine's tests share: picking effects out of a batch and
// making outcomes and classifications.

#include "tasksup/supervisor/task_machine.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <memory>

#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tasksup::test {

/// Every effect of type `T` in `fx`, in order.
template<class T>
std::vector<T> all_of(const machine_effects& fx) {
  std::vector<T> out;
  for (auto& e : fx)
    if (auto* x = std::get_if<T>(&e))
      out.push_back(*x);
  return out;
}

/// The one effect of type `T` in `fx` (fails the test unless exactly one).
template<class T>
const T& only(const machine_effects& fx) {
  const T* found = nullptr;
  for (auto& e : fx)
    if (auto* x = std::get_if<T>(&e)) {
      REQUIRE(found == nullptr);
      found = x;
    }
  REQUIRE(found != nullptr);
  return *found;
}

/// Whether `fx` has an effect of type `T`.
template<class T>
bool has(const machine_effects& fx) {
  for (auto& e : fx)
    if (std::holds_alternative<T>(e))
      return true;
  return false;
}

/// An attempt that exited with `code` after `duration` seconds.
inline attempt_outcome exited(int code, double duration = 1) {
  attempt_outcome o;
  o.exit_code = code;
  o.duration_s = duration;
  return o;
}

/// A classification as `cls` by rule `rule`.
inline classification as(error_class cls, std::string rule = "r") {
  classification c;
  c.cls = cls;
  c.rule = std::move(rule);
  return c;
}

/// One task on a machine, fed inputs by hand; each test file adds the
/// steps it drives.
struct machine_task {
  machine_task(supervisor_config cfg, std::size_t chain)
    : machine(std::make_shared<const supervisor_config>(std::move(cfg)), chain),
      st(machine.initial()) {}

  task_machine machine;
  task_machine_state st;
  machine_effects fx;
  double now = 0;

  bool feed(machine_input in) {
    fx.clear();
    return machine.handle(st, std::move(in), now, fx);
  }

  /// Grants the pending permission: the attempt starts.
  void grant(bool allowed = true, bool token = true) {
    auto ask = only<effect::ask_permission>(fx);
    REQUIRE(feed(input::permission{ask.generation, allowed, token, "agent"}));
  }

  /// Starts the task and lets its first attempt run.
  void start_running() {
    REQUIRE(feed(input::start{}));
    grant();
  }

  /// Answers the pending delay request: the retry waits `seconds`.
  void delay(double seconds) {
    auto ask = only<effect::ask_delay>(fx);
    delay_decision d;
    d.delay_s = seconds;
    REQUIRE(feed(input::delay_decided{ask.generation, d}));
  }
};

} // namespace tasksup::test

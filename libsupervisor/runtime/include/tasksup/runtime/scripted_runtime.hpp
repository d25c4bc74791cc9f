#pragma once

#include "tasksup/runtime/runtime.hpp"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::runtime {

/// One scripted attempt: what the fake agent prints and how it ends.
struct scripted_step {
  /// Exit code reported when the step ends by itself.
  int exit_code = 0;
  /// Signal reported with the exit (0 for a normal exit).
  int signal = 0;
  /// Reported as the outcome's OOM flag.
  bool oom_killed = false;
  /// Output lines, delivered through `on_line` when the attempt starts.
  std::vector<std::string> lines;
  /// How long the attempt runs before it exits; measured on the runtime's
  /// timer (see `scripted_runtime::timer_fn`).
  double duration_s = 0;
  /// Runs until stopped (then 143, signal 15) or killed (137, signal 9).
  bool hang = false;
  /// Reported as the outcome's artifacts.
  std::vector<std::string> artifacts;
  /// Reported as the outcome's infrastructure error (an attempt the runtime
  /// could not start or watch).
  std::string infrastructure_error;
  /// Reported as the outcome's `started` and `retry_futile` (an attempt the
  /// runtime could not start, and whether starting again can help).
  bool started = true;
  bool retry_futile = false;
  /// `start` throws instead of starting: simulates a broken runtime driver,
  /// so the caller (a worker actor) dies without reporting an exit.
  bool throw_on_start = false;
};

/// What the scripted runtime was asked to do, in order.
struct scripted_call {
  enum class kind { start, stop, kill };
  kind what = kind::start;
  std::string task_id;
  int attempt = 0;
  std::string agent_id;
  /// The grace period of a `stop`.
  std::chrono::milliseconds grace{0};
  /// The full spec of a `start`.
  attempt_spec spec;
};

/// An in-memory runtime for tests and benchmarks: outcomes, output
/// and durations are scripted per agent and attempt. The n-th attempt of an
/// agent within a task plays the n-th step of that agent's script (the last
/// step repeats); a script for a (task, agent) pair wins over the agent's.
/// Agents without a script exit 0 at once. Thread-safe. Its attempts live in
/// this object's memory and die with it, so `adopt` (the base class's)
/// reports every attempt as not adopted (infrastructure, "node restarted")
/// and `reap` has nothing to do: a node restarted on a scripted runtime
/// counts its interrupted attempts once, as infrastructure failures.
class scripted_runtime : public container_runtime {
public:
  /// Runs `fire` after `delay_s` seconds. The actor layer supplies one driven
  /// by the actor clock, so scripted durations pass in simulated time under a
  /// test coordinator. Without a timer every step ends at once (its
  /// `duration_s` is still reported).
  using timer_fn =
    std::function<void(double delay_s, std::function<void()> fire)>;

  explicit scripted_runtime(timer_fn timer = {});
  ~scripted_runtime() override;

  /// Replaces the timer; affects attempts started afterwards.
  void set_timer(timer_fn timer);

  /// Scripts every task's attempts of `agent_id`.
  void script(const std::string& agent_id, std::vector<scripted_step> steps);

  /// Scripts the attempts of `agent_id` within one task.
  void script(const std::string& task_id, const std::string& agent_id,
              std::vector<scripted_step> steps);

  std::string_view name() const noexcept override;

  std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                        attempt_callbacks cb) override;

  /// Every start, stop and kill so far, in order.
  std::vector<scripted_call> calls() const;

  /// Number of attempts started so far.
  std::size_t started() const;

  /// Number of attempts started for `task_id`.
  std::size_t started(const std::string& task_id) const;

  /// Attempts started and not yet exited.
  std::size_t running() const;

  /// The highest number of attempts that ran at the same time.
  std::size_t max_running() const;

  /// State shared with running attempts (they may outlive the runtime).
  struct shared;

private:
  std::shared_ptr<shared> shared_;
};

} // namespace tasksup::runtime

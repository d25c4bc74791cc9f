#pragma once

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/interfaces.hpp"

#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/agent.hpp"
#include "tasksup/supervisor/agent_output.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/local_actor.hpp>
#include <caf/timespan.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tasksup {

/// What one attempt runs: the part of a worker's options that is data, so
/// that it can go to a worker node (`remote_attempt`) or, for a kept worker,
/// in its next `(next_attempt, attempt_options)`.
struct attempt_options {
  /// The attempt to start; never reused.
  runtime::attempt_spec spec;
  /// Trace and span of the attempt's events (task and attempt come from
  /// `spec`).
  std::string trace_id;
  std::string span_id;
  /// For the `attempt_started` event.
  std::string agent_cli;
  /// Output lines forwarded as `log` events; further lines only reach the
  /// runtime's tail and its log file (which keeps the full output). Bounds
  /// the event stream of a chatty agent.
  std::int64_t max_log_events = 10000;
  /// Which parser reads the agent's output (its profile's): `log` events
  /// then show readable progress instead of raw JSON, and the outcome
  /// carries what the parser learned in `structured`.
  output_format output = output_format::text;
  /// Seconds without an output line (and without an exit) after which the
  /// attempt is stopped and reported with the structured error
  /// `idle_timeout` (classified retryable, rule `idle_timeout`); 0 = off.
  double idle_timeout_s = 0;
  /// Patterns of lines that are not activity for `idle_timeout_s` (the
  /// profile's `idle_noise`); an attempt stopped while printing only these
  /// is reported with the structured error `idle_noise` (rule `idle_noise`).
  std::vector<std::string> idle_noise;
  /// Grace between the idle stop's SIGTERM and the kill.
  std::int64_t idle_stop_grace_ms = 5000;
  /// Names of variables copied from this process's environment into the
  /// attempt's (the agent's `env_passthrough`); a variable the task's own
  /// `env` sets wins, a missing one is left out.
  std::vector<std::string> env_passthrough;
  /// Set for an attempt that ran when the node restarted: the worker takes
  /// it over (`container_runtime::adopt`, with this runtime id; empty when
  /// unknown) instead of starting it.
  std::optional<std::string> adopt_id;
  /// Also send `(start, attempt, runtime_id)` to the supervisor once the
  /// attempt runs (a journaling supervisor records it for adoption).
  bool report_runtime_id = false;
  /// Kept for the task's next attempt: after its report the worker waits
  /// for `(next_attempt, attempt_options)` from its supervisor instead of
  /// quitting (it quits when its supervisor goes down, or is told
  /// `(release)`).
  bool keep = false;
};

/// What one container worker is spawned with: its first attempt, and what
/// stays with the worker for every attempt it runs.
struct worker_options : attempt_options {
  std::shared_ptr<runtime::container_runtime> runtime;
  /// Where the attempt's events (attempt_started, log lines) go: the task's
  /// event sink, one hop less than through the supervisor, which sends its
  /// own events there too (one process: the order is kept, as the worker's
  /// events precede its report). Empty: the supervisor.
  event_sink_actor events;
  /// On a worker node: how long the attempt outlives an unreachable
  /// supervisor (its coordinator failed over or restarted) for a new owner
  /// to adopt it. Zero: it is killed at once.
  caf::timespan adopt_grace{0};
  /// The timer its idle checks and grace go through (`make_actor_timer`),
  /// shared by the workers of a node; empty: the worker makes its own. One
  /// per node, not per worker: each is an actor that pending checks keep
  /// alive, and CAF's clock thread destroys what it drops at shutdown (a few
  /// dozen at once deadlock it).
  std::function<void(double, std::function<void()>)> timer;
};

/// Copies what the worker needs from the agent that runs the attempt: its
/// output format, idle timeout and noise, and env_passthrough names.
void apply_agent_options(attempt_options& opts, const agent_spec& agent);

/// Spawns a container worker for one attempt. It starts the attempt on the
/// runtime, forwards `attempt_started` and per-line `log` events to
/// `supervisor` as `(event, event)`, reports `(attempt_exited,
/// attempt_report)` and quits. It obeys `(stop, stop_mode, grace_ms)`. If
/// `supervisor` goes down first, it kills its attempt, unless
/// `adopt_grace` says to keep it: then the attempt runs on (its report, if
/// it ends, is held) until its agent hands it to a new owner (`adopt`) who
/// has it go on (`resume`); it is killed when the grace runs out or its
/// node stops (`node_lost`). If starting throws, the worker dies without a
/// report (the supervisor sees a `down_msg`).
container_worker_actor spawn_container_worker(caf::actor_system& sys,
                                              attempt_owner_actor supervisor,
                                              worker_options opts);

/// The same, spawned in the context of `spawner` (the supervisor): the
/// worker then runs next on the spawner's thread instead of queueing behind
/// everything the scheduler holds, so a burst of attempts does not keep a
/// burst of not-yet-started workers (and their specs) alive.
container_worker_actor spawn_container_worker(caf::local_actor* spawner,
                                              attempt_owner_actor supervisor,
                                              worker_options opts);

} // namespace tasksup

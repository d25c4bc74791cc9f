#pragma once

#include "tasksup/supervisor/outcome.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::runtime {

/// A host path made visible to the attempt.
struct mount {
  std::string host_path;
  std::string container_path;
  bool read_only = false;
};

/// Everything a runtime needs to start one attempt in a fresh container or
/// process. Never reused: one spec, one attempt.
/// The file an agent creates in its artifacts directory to say "done, do not
/// restart me" (a permanent task); passed as TASKSUP_DONE_FILE.
inline constexpr std::string_view done_file_name = "tasksup-done";

/// The file in the attempt directory that holds `attempt_spec::feedback`.
inline constexpr std::string_view feedback_file_name = "feedback.txt";

/// How many of its newest output lines an attempt's outcome carries
/// (`attempt_outcome::tail`). The runtime keeps this one tail; the worker,
/// the task supervisor (feedback, the failure's lines) and the classifier
/// read it and keep no tail of their own.
inline constexpr std::size_t outcome_tail_lines = 256;

struct attempt_spec {
  std::string task_id;
  int attempt = 1;
  /// The agent's id, for labels, scripted runtimes and logs.
  std::string agent_id;
  /// argv[0] is the agent's command; never run through a shell.
  std::vector<std::string> argv;
  /// Extra environment (the runtime adds TASKSUP_TASK_ID, TASKSUP_ATTEMPT,
  /// TASKSUP_ARTIFACTS_DIR, TASKSUP_DONE_FILE and, with `feedback`,
  /// TASKSUP_FEEDBACK, as the agent sees them).
  std::map<std::string, std::string> env;
  /// What the agent is told about the task's last failed attempt; empty for
  /// nothing. The runtime that runs the attempt (on whichever node) writes
  /// it to `<attempt_dir>/feedback.txt` and passes that file's path, as the
  /// agent sees it, in TASKSUP_FEEDBACK.
  std::string feedback;
  /// Host directory for this attempt's files (workspace/, artifacts/,
  /// output.log); the runtime creates it. Must be unique per attempt.
  std::string attempt_dir;
  /// Host directory the task keeps from attempt to attempt
  /// (`member_state_dir`); the runtime creates it when missing, never clears
  /// it, and passes it as TASKSUP_MEMBER_STATE as the agent sees it
  /// (mounted in a container). Empty for none. Set by the node that runs
  /// the attempt: it does not travel with a placed attempt.
  std::string state_dir;
  /// Working directory; empty means `<attempt_dir>/workspace`. For docker,
  /// the directory inside the container.
  std::string workdir;
  std::vector<mount> mounts;
  /// The agent's config directory, passed as TASKSUP_AGENT_CONFIG_DIR (and
  /// mounted at the same path in containers); empty for none.
  std::string config_dir;
  std::optional<std::uint64_t> memory_limit_mb;
  /// Container image (docker only).
  std::string image;
  /// Labels on the container (docker), e.g. tasksup.task_id, tasksup.attempt.
  std::map<std::string, std::string> labels;
  /// The attempt's trace context (W3C trace-context ids in hex), so that the
  /// agent's own telemetry joins the task's trace: the runtime passes
  /// TASKSUP_TRACE_ID, TASKSUP_SPAN_ID and TRACEPARENT (`add_trace_env`).
  /// Empty: none.
  std::string trace_id;
  std::string span_id;
};

/// The directory a task keeps from run to run:
/// `<attempt_root>/<task id>/state`, beside its attempt directories. A
/// function of the two alone, so a restarted node finds it again; it goes
/// when the task is forgotten.
std::string member_state_dir(std::string_view attempt_root,
                             std::string_view task_id);

/// Adds the trace context `trace_id` / `span_id` to `env`: TASKSUP_TRACE_ID,
/// TASKSUP_SPAN_ID and TRACEPARENT (`00-<trace>-<span>-01`: version 00,
/// sampled). Nothing when either is empty.
void add_trace_env(std::string_view trace_id, std::string_view span_id,
                   std::map<std::string, std::string>& env);

/// Which of an attempt's output streams a line came from.
enum class output_stream : std::uint8_t { out, err };

/// "stdout" or "stderr".
constexpr const char* to_string(output_stream s) noexcept {
  return s == output_stream::err ? "stderr" : "stdout";
}

/// Where a running attempt reports. All are called from the runtime's own
/// thread (or synchronously from `start` for in-memory runtimes), never
/// concurrently for one attempt; `on_exit` exactly once and last.
struct attempt_callbacks {
  /// For an attempt whose id comes later (`attempt_handle::id_later()`),
  /// exactly once and first: the id, once the runtime knows it (empty when
  /// the attempt never started). Not called for any other attempt.
  std::function<void(std::string_view runtime_id)> on_started;
  /// One line of stdout or stderr, without the newline; long lines are
  /// delivered in pieces of bounded size, and the runtime's output limits
  /// bound what is delivered per line and per attempt. Returns false when
  /// the receiver is full: the runtime then stops reading the attempt's
  /// output (the agent blocks on its pipe, as on a slow terminal) until
  /// `attempt_handle::resume_output()`.
  std::function<bool(output_stream stream, std::string_view line)> on_line;
  /// At most once, after the last line and before `on_exit`: a sentence
  /// saying how much output the limits kept from `on_line` and the log.
  std::function<void(std::string_view text)> on_notice;
  /// The final outcome (tail, artifacts, log path filled in).
  std::function<void(attempt_outcome outcome)> on_exit;
};

/// Control over a running attempt; safe to call from any thread, and after the
/// attempt ended (then it does nothing).
class attempt_handle {
public:
  virtual ~attempt_handle() = default;

  /// Graceful stop: SIGTERM / the engine's stop, then kill after `grace`.
  virtual void stop(std::chrono::milliseconds grace) = 0;

  /// Force-kill at once, with everything the attempt started.
  virtual void kill() = 0;

  /// The receiver of `on_line` caught up after it returned false: reading
  /// goes on. Does nothing when reading was not paused.
  virtual void resume_output() {}

  /// The container id or pid, for events. Where `id_later()` is true this
  /// waits until the runtime knows it.
  virtual std::string id() const = 0;

  /// True when `start` returned before the runtime knew the attempt's id
  /// (the process runtime does not wait for its shim to start the agent):
  /// `attempt_callbacks::on_started` brings it. The same for the handle's
  /// whole life.
  virtual bool id_later() const { return false; }
};

/// An attempt that another instance of the runtime started (the node died
/// and restarted while it ran), to be taken over by `adopt`.
struct adopt_spec {
  std::string task_id;
  int attempt = 1;
  std::string agent_id;
  /// The attempt's directory, as `attempt_spec::attempt_dir` named it.
  std::string attempt_dir;
  /// What `attempt_handle::id()` returned for it: the agent's pid (process)
  /// or the container id (docker).
  std::string runtime_id;
  /// The labels it was started with (docker checks them against the
  /// container's, so a reused id is never taken for the attempt).
  std::map<std::string, std::string> labels;
};

/// What `reap` may remove: attempts nobody will ever adopt.
struct reap_spec {
  /// Process runtime: the shims recorded in attempt directories below this
  /// directory (`<root>/<task>/<attempt>/shim.pid`, up to three levels).
  std::string attempt_root;
  /// Docker: containers labelled `tasksup.owner=<owner>` (e.g. "run",
  /// "serve"); empty for none.
  std::string owner;
  /// Docker: only those of them whose owning process (labels
  /// tasksup.owner_pid and tasksup.owner_start) is no longer alive.
  bool dead_owners = false;
  /// Runtime ids (pids, container ids) and attempt directories left alone:
  /// the attempts being adopted.
  std::set<std::string> keep;
  /// Docker: the attempts being adopted as (task id, attempt number), kept
  /// by their labels however they were found (an attempt whose container id
  /// was not recorded is adopted by its labels).
  std::set<std::pair<std::string, int>> keep_attempts;
};

/// What `reap` did.
struct reap_report {
  /// One line per attempt killed or container removed.
  std::vector<std::string> reaped;
  /// What could not be looked at or removed, naming it.
  std::vector<std::string> errors;
};

/// A container runtime: process, docker or scripted.
class container_runtime {
public:
  virtual ~container_runtime() = default;

  /// "process", "docker" or "scripted".
  virtual std::string_view name() const noexcept = 0;

  /// Starts an attempt. A failure to start is not returned: it arrives as an
  /// outcome through `cb.on_exit` (exit 127 for a missing agent, otherwise
  /// `infrastructure_error` set), so callers have exactly one path.
  virtual std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                                attempt_callbacks cb) = 0;

  /// Takes over a running or finished attempt that another instance of this
  /// runtime started, and reports it through `cb` like one `start`ed here:
  /// `on_line` for the output written from now on (lines written before are
  /// only in the log and the outcome's tail), `on_exit` exactly once with
  /// the agent's real end. An attempt that cannot be adopted (no trace of it
  /// is left, or its record is unreadable) has whatever is left of it killed
  /// and is reported with `infrastructure_error` saying that the node
  /// restarted and the attempt could not be adopted. The default (a runtime
  /// whose attempts die with it) reports just that.
  virtual std::shared_ptr<attempt_handle> adopt(adopt_spec spec,
                                                attempt_callbacks cb);

  /// Kills what is left of attempts that nobody will adopt (see
  /// `reap_spec`); synchronous. The default has nothing to reap.
  virtual reap_report reap(const reap_spec& spec);
};

} // namespace tasksup::runtime

#pragma once

#include "tasksup/runtime/output_capture.hpp"
#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/expected.hpp"

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::runtime {

/// Where the attempt's workspace (`<attempt_dir>/workspace`) appears inside
/// the container; also the default working directory.
inline constexpr std::string_view docker_workspace_dir = "/workspace";

/// Where the attempt's artifacts directory (`<attempt_dir>/artifacts`)
/// appears inside the container; passed as TASKSUP_ARTIFACTS_DIR.
inline constexpr std::string_view docker_artifacts_dir = "/tasksup/artifacts";
/// Where a container sees the task's state directory
/// (`attempt_spec::state_dir`); passed as TASKSUP_MEMBER_STATE.
inline constexpr std::string_view docker_member_state_dir = "/tasksup/state";

/// Where a container sees `attempt_spec::feedback` (mounted read-only).
inline constexpr std::string_view docker_feedback_file =
  "/tasksup/feedback.txt";

/// Settings of the Docker runtime. The engine must run on this host: the
/// attempt's directories are bind-mounted, so the engine has to see the same
/// filesystem as tasksup.
struct docker_runtime_options {
  /// The engine's unix socket.
  std::string socket_path = "/var/run/docker.sock";
  /// Engine API version used in every request path (`/v<version>/...`);
  /// 1.41 is Docker 20.10, which every newer engine still serves.
  std::string api_version = "1.41";
  /// HostConfig.NetworkMode; empty keeps the engine's default (the bridge),
  /// "none" for an engine started without a bridge or for offline agents.
  std::string network_mode;
  /// Runs the engine's init (tini) as PID 1, so that `stop` delivers SIGTERM
  /// to an agent that installs no handler of its own (PID 1 ignores it).
  bool init = true;
  /// Bound on every short request (create, start, inspect, remove, kill);
  /// `stop` gets its grace period on top. Waiting for the exit has no bound.
  std::chrono::milliseconds request_timeout{60'000};
  /// How long the output stream may lag behind the container's exit before it
  /// is cut off and the outcome reported with the output seen so far.
  std::chrono::milliseconds output_drain_timeout{10'000};
  /// How long destroying the runtime waits for its containers to be killed
  /// and removed before it abandons them.
  std::chrono::milliseconds shutdown_timeout{30'000};
  /// Largest engine response body accepted (inspect, errors); longer ones
  /// are an infrastructure error.
  std::size_t max_response_bytes = 4 * 1024 * 1024;
  /// Most artifact paths reported per attempt; the rest are left out.
  std::size_t max_artifacts = 10'000;
  /// Bounds of each attempt's output capture.
  output_capture_limits output_limits;
  /// The label tasksup.owner on every container (e.g. "run", "serve"), so
  /// that `reap` finds the containers of an owner that died; empty: none.
  /// Every container also carries tasksup.owner_pid and tasksup.owner_start
  /// (this process's pid and start time), which tell a dead owner from a
  /// live one.
  std::string owner;
  /// An attempt with a memory limit that the kernel SIGKILLed (exit 137)
  /// while the engine did not yet say OOMKilled is inspected again for this
  /// long: the engine handles the container's exit and its OOM event
  /// separately, and may answer `wait` before it has recorded the OOM kill.
  std::chrono::milliseconds oom_settle_timeout{2000};
  /// Keep an attempt's memory limit on a cgroup of tasksup's own, made the
  /// container's CgroupParent, so that the kernel tells tasksup of an OOM
  /// kill itself, however early it comes (the engine misses one that comes
  /// before containerd's shim watches the container's cgroup). Used when
  /// the engine runs on this host in the same cgroup namespace with the
  /// cgroupfs driver and a memory controller is writable here; otherwise
  /// the limit is the container's own and OOMKilled is the engine's word.
  bool watch_memory = true;
};

/// Options for the engine named by DOCKER_HOST (only `unix://` sockets are
/// supported), or the default socket when it is unset, with `network_mode`
/// from TASKSUP_DOCKER_NETWORK when set (e.g. "none" for an engine started
/// without a bridge). Fails naming the variable when DOCKER_HOST points
/// elsewhere.
expected<docker_runtime_options> docker_options_from_environment();

/// Creates the Docker Engine runtime: one I/O thread serving every attempt
/// over the engine's unix socket (no docker CLI). Each attempt runs in a
/// fresh container labelled tasksup.task_id, tasksup.attempt and
/// tasksup.agent_id, with `<attempt_dir>/workspace` mounted at
/// `docker_workspace_dir`, `<attempt_dir>/artifacts` at
/// `docker_artifacts_dir` (artifacts are listed from the host side of that
/// bind mount), the config dir read-only at its own path, and
/// `<attempt_dir>/output.log` holding the full output (read through an
/// attach made before start, so nothing is lost). The container is removed
/// before `on_exit`. The image must already exist: tasksup never pulls.
/// A stop or kill that arrives before the container started means it never
/// starts (exit 143 or 137 is reported). The engine reports a signal death
/// as exit 128+N, so exit codes 129..192 also set `signal`. `adopt` takes
/// over a container another instance started (found by id, or by the labels
/// tasksup.task_id and tasksup.attempt when the id is empty; its labels must
/// name the same task and attempt): it re-reads the container's output from
/// the engine (what output.log already holds is not appended or delivered
/// again), waits for its end, reads exit code and OOMKilled from the engine
/// and removes it; a container that is gone is reported as not adopted.
/// `reap` removes (force) the containers labelled with `reap_spec::owner`
/// that are not kept. Destroying the
/// runtime kills and removes its running containers (their outcomes carry
/// an infrastructure error) and joins the thread.
std::shared_ptr<container_runtime>
make_docker_runtime(docker_runtime_options options);

/// The engine's version string (GET /version), or why it does not answer.
expected<std::string>
docker_engine_version(const docker_runtime_options& options);

/// Whether the engine holds `image` locally (tasksup never pulls), or why
/// the engine could not say.
expected<bool> docker_image_present(const docker_runtime_options& options,
                                    std::string_view image);

/// One container as listed by the engine.
struct docker_container_summary {
  /// Full container id.
  std::string id;
  /// Its names, without the leading '/'.
  std::vector<std::string> names;
  /// "created", "running", "exited", ...
  std::string state;
  /// Every label of the container.
  std::map<std::string, std::string> labels;
};

/// Containers in any state carrying `label` ("key" or "key=value"), e.g. to
/// find attempts left behind by a crashed supervisor.
expected<std::vector<docker_container_summary>>
list_docker_containers(const docker_runtime_options& options,
                       std::string_view label);

} // namespace tasksup::runtime

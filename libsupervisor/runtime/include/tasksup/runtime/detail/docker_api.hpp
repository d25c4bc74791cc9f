#pragma once

#include "tasksup/runtime/docker_runtime.hpp"
#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/expected.hpp"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::runtime::detail {

/// The body of POST /containers/create for one attempt: image, argv as Cmd,
/// env (with the TASKSUP_* variables), working directory, labels, mounts,
/// memory limit (swap capped at the same value so the limit is real). Fails
/// naming the attempt_spec field that cannot be expressed. With
/// `cgroup_parent`, the container goes below that cgroup, which holds the
/// memory limit instead of the container's own.
expected<std::string> docker_create_body(const attempt_spec& spec,
                                         const docker_runtime_options& options,
                                         std::string_view cgroup_parent = {});

/// What GET /info says about the engine's cgroups.
struct docker_engine_info {
  /// CgroupDriver: "cgroupfs" or "systemd".
  std::string cgroup_driver;
  /// CgroupVersion: "1" or "2" (absent before API 1.40: "1").
  std::string cgroup_version = "1";
};

/// The cgroup fields of a GET /info response.
expected<docker_engine_info> parse_docker_info(std::string_view body);

/// The container id from a create response; rejects ids that are not plain
/// hex (they end up in request paths).
expected<std::string> parse_docker_create_response(std::string_view body);

/// What inspect says about a finished container.
struct docker_container_state {
  /// State.ExitCode.
  int exit_code = 0;
  /// State.OOMKilled.
  bool oom_killed = false;
  /// State.Error, the engine's reason when it could not run the process.
  std::string error;
  /// State.Running.
  bool running = false;
  /// Config.Labels (string values only).
  std::map<std::string, std::string> labels;
};

/// The state from a GET /containers/{id}/json response.
expected<docker_container_state> parse_docker_inspect(std::string_view body);

/// StatusCode from a POST /containers/{id}/wait response; an Error.Message
/// in it is an error.
expected<int> parse_docker_wait(std::string_view body);

/// Containers from a GET /containers/json response.
expected<std::vector<docker_container_summary>>
parse_docker_container_list(std::string_view body);

/// The engine's explanation of a failed request: the JSON "message" when
/// there is one, else the start of the body, else "HTTP <status>"; always
/// short and printable.
std::string docker_error_message(unsigned status, std::string_view body);

} // namespace tasksup::runtime::detail

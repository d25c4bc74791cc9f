#pragma once

// A cluster of tasksup nodes: worker nodes join a coordinator over CAF's
// network layer and run the attempts it places on them. The task
// supervisors stay on the coordinator; each remote attempt's container
// worker runs on its worker node, spawned there by the node's agent, and
// reports to its supervisor across the network. See README "Design: the
// cluster".

#include "tasksup/actors/container_worker_actor.hpp"
#include "tasksup/actors/inspect.hpp"

#include "tasksup/runtime/runtime.hpp"
#include "tasksup/supervisor/placement.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace tasksup {

/// How long a supervisor waits for a node's agent to start an attempt.
inline constexpr std::chrono::seconds remote_start_timeout{10};

/// One attempt as a coordinator sends it to a worker node: the attempt and
/// what its container worker needs (the runtime is the node's own, by
/// name; paths in `spec` are made the node's own by its agent).
struct remote_attempt {
  /// `adopt_id` and `keep` are the coordinator's own: a worker node neither
  /// adopts nor keeps a worker for it.
  attempt_options attempt;
  /// `process` or `docker`.
  std::string runtime;
  /// The epoch of the leadership that placed it (coordinators sharing a
  /// journal; 0 otherwise). A worker node refuses a placement from an epoch
  /// older than one it has seen: a deposed leader cannot start attempts.
  std::int64_t epoch = 0;
};

/// One worker node as the coordinator sees it.
struct node_info {
  node_offer offer;
  /// Attempts the coordinator has placed there and that still run.
  int running = 0;
  /// Seconds since the node joined.
  double joined_s = 0;
};

/// What a worker node's agent needs.
struct node_agent_options {
  /// The node's name in the cluster (for messages and attempt paths).
  std::string name;
  /// The node's runtimes by name.
  std::map<std::string, std::shared_ptr<runtime::container_runtime>> runtimes;
  /// Where the attempts placed here keep their directories.
  std::string attempt_root;
  /// How long an attempt outlives its coordinator's connection for the
  /// coordinator that takes over (or the same one, restarted) to adopt it.
  /// Zero: the attempts die with the connection.
  caf::timespan adopt_grace{0};
};

/// Spawns a worker node's agent: it starts the attempts its coordinator
/// places here (`run_attempt`), each in a container worker that reports to
/// the attempt's supervisor on the coordinator. When that supervisor
/// becomes unreachable (the node lost its coordinator) the attempt is
/// killed, or kept for `adopt_grace`: the coordinator the node joins next
/// adopts it (`adopt`), and once it said it adopted all it will
/// (`adopt_end`), the rest are killed.
node_agent_actor spawn_node_agent(caf::actor_system& sys,
                                  node_agent_options opts);

/// `w` as it goes to a worker node, which runs it with its `runtime`: the
/// one mapping between the two, both ways.
remote_attempt to_remote(worker_options w, std::string runtime);

/// The container worker's options for `ra` on this node, with `rt`.
worker_options from_remote(remote_attempt ra,
                           std::shared_ptr<runtime::container_runtime> rt);

/// The attempt's directory on a worker node: `<root>/<task>/attempt-<n>`,
/// with a `.<k>` suffix when one from an earlier run of the same task id is
/// there. Empty when the task id is not a plain name (untrusted input).
std::string remote_attempt_dir(const std::string& root,
                               const std::string& task_id, int attempt);

// -- serialization ------------------------------------------------------

namespace detail {

template<>
struct enum_size<output_format>
  : std::integral_constant<
      std::size_t, static_cast<std::size_t>(output_format::gemini_json) + 1> {};

} // namespace detail

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_offer& x) {
  return f(caf::meta::type_name("node_offer"), x.name, x.max_concurrent,
           detail::bounded(x.runtimes, "node_offer.runtimes"),
           detail::bounded(x.labels, "node_offer.labels"),
           detail::finite(x.lease_s, "node_offer.lease_s"),
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.name, wire::max_id_bytes, "node_offer.name"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  return f(caf::meta::type_name("node_info"), x.offer, x.running, x.joined_s);
}

namespace runtime {

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, mount& x) {
  return f(
    caf::meta::type_name("mount"), x.host_path, x.container_path, x.read_only,
    caf::meta::load_callback([&]() -> caf::error {
      return detail::check_sizes(
        {{x.host_path, wire::max_text_bytes, "mount.host_path"},
         {x.container_path, wire::max_text_bytes, "mount.container_path"}});
    }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_spec& x) {
  return f(caf::meta::type_name("attempt_spec"), x.task_id, x.attempt,
           x.agent_id, detail::bounded(x.argv, "attempt.argv"),
           detail::bounded(x.env, "attempt.env"), x.feedback, x.attempt_dir,
           x.workdir, detail::bounded(x.mounts, "attempt.mounts"), x.config_dir,
           detail::opt(x.memory_limit_mb), x.image,
           detail::bounded(x.labels, "attempt.labels"), x.trace_id, x.span_id,
           caf::meta::load_callback([&]() -> caf::error {
             // They become the agent's environment (TRACEPARENT).
             if (auto err = detail::check_hex({{x.trace_id, "attempt.trace_id"},
                                               {x.span_id, "attempt.span_id"}}))
               return err;
             return detail::check_sizes(
               {{x.task_id, wire::max_id_bytes, "attempt.task_id"},
                {x.trace_id, wire::max_id_bytes, "attempt.trace_id"},
                {x.span_id, wire::max_id_bytes, "attempt.span_id"},
                {x.agent_id, wire::max_id_bytes, "attempt.agent_id"},
                {x.attempt_dir, wire::max_text_bytes, "attempt.attempt_dir"},
                {x.workdir, wire::max_text_bytes, "attempt.workdir"},
                {x.feedback, wire::max_text_bytes, "attempt.feedback"},
                {x.config_dir, wire::max_text_bytes, "attempt.config_dir"},
                {x.image, wire::max_text_bytes, "attempt.image"}});
           }));
}

} // namespace runtime

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_options& x) {
  return f(
    caf::meta::type_name("attempt_options"), x.spec, x.trace_id, x.span_id,
    x.agent_cli, x.max_log_events,
    detail::checked(x.output, "attempt_options.output"), x.idle_timeout_s,
    detail::bounded(x.idle_noise, "attempt_options.idle_noise"),
    x.idle_stop_grace_ms,
    detail::bounded(x.env_passthrough, "attempt_options.env_passthrough"),
    detail::opt(x.adopt_id), x.report_runtime_id, x.keep,
    caf::meta::load_callback([&]() -> caf::error {
      if (x.max_log_events < 0 || x.max_log_events > 1000000 ||
          !(x.idle_timeout_s >= 0 && x.idle_timeout_s <= 7 * 86400.0) ||
          x.idle_stop_grace_ms < 0 || x.idle_stop_grace_ms > 3600 * 1000)
        return detail::wire_error("attempt_options", "a limit out of range");
      return detail::check_sizes(
        {{x.trace_id, wire::max_id_bytes, "attempt_options.trace_id"},
         {x.span_id, wire::max_id_bytes, "attempt_options.span_id"},
         {x.agent_cli, wire::max_text_bytes, "attempt_options.agent_cli"},
         {x.adopt_id ? *x.adopt_id : std::string{}, wire::max_text_bytes,
          "attempt_options.adopt_id"}});
    }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, remote_attempt& x) {
  return f(caf::meta::type_name("remote_attempt"), x.attempt, x.runtime,
           x.epoch, caf::meta::load_callback([&]() -> caf::error {
             if (x.epoch < 0)
               return detail::wire_error("remote_attempt.epoch",
                                         std::to_string(x.epoch));
             return detail::check_sizes(
               {{x.runtime, wire::max_id_bytes, "remote_attempt.runtime"}});
           }));
}

} // namespace tasksup

#pragma once

// The docker runtime's parts (docker_runtime.cpp: the runtime, adoption by
// labels, reaping; docker_attempt.cpp: one attempt's life on the engine):
// the state they share and how the runtime starts an attempt. Private to
// the runtime.

#include "docker_engine_client.hpp"
#include "docker_memory_watch.hpp"
#include "tasksup/runtime/docker_runtime.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>

namespace tasksup::runtime::detail {

namespace asio = boost::asio;
using boost::beast::http::verb;
using detail::engine_response;

using clock_type = std::chrono::steady_clock;

/// The engine endpoint `options` name.
engine_endpoint endpoint_of(const docker_runtime_options& options);

/// The container id, shared by an attempt and its handle so that `id()`
/// works from any thread and after the attempt ended.
struct id_box {
  mutable std::mutex mtx;
  std::string id;

  void set(std::string value) {
    std::lock_guard<std::mutex> guard{mtx};
    id = std::move(value);
  }

  std::string get() const {
    std::lock_guard<std::mutex> guard{mtx};
    return id;
  }
};

class docker_attempt;

/// Runs one request to completion on a private io_context.
engine_response sync_request(const docker_runtime_options& options,
                             std::string target, verb method = verb::get);

/// Where containers keep their memory limits (none: in their own cgroup,
/// reported by the engine), or why not.
expected<docker_memory_home>
memory_home_of(const docker_runtime_options& options);

/// State shared by the runtime object, its I/O thread, its attempts and
/// their handles. Everything but `io` and `container_name` (locked; called
/// by `start` on the caller's thread) is touched on the I/O thread only.
class docker_core {
public:
  explicit docker_core(docker_runtime_options opts)
    : options(std::move(opts)), endpoint(endpoint_of(options)),
      guard(asio::make_work_guard(io)), shutdown_timer(io),
      rng(std::random_device{}()) {}

  /// Serves every attempt until shutdown finished.
  void run() {
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception&) {
        // A throwing user callback must not take every other attempt down.
      }
    }
  }

  void begin_shutdown();

  void attempt_finished(docker_attempt* attempt);

  /// Where containers keep their memory limits; looked for once, when first
  /// needed (any thread).
  const detail::docker_memory_home* memory_home() {
    std::call_once(memory_home_once, [this] {
      if (auto home = memory_home_of(options))
        memory_home_.emplace(std::move(*home));
    });
    return memory_home_ ? &*memory_home_ : nullptr;
  }

  std::string container_name(const attempt_spec& spec) {
    std::lock_guard<std::mutex> guard{rng_mtx};
    std::string name = "tasksup-";
    for (char c : spec.task_id.substr(0, 40)) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
      name += ok ? c : '-';
    }
    name += "-" + std::to_string(spec.attempt) + "-";
    static constexpr char hex[] = "0123456789abcdef";
    auto bits = rng();
    for (int i = 0; i < 12; ++i, bits >>= 4)
      name += hex[bits & 0xf];
    return name;
  }

  asio::io_context io;
  docker_runtime_options options;
  detail::engine_endpoint endpoint;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  asio::steady_timer shutdown_timer;
  std::mutex rng_mtx;
  std::mt19937_64 rng;
  std::unordered_map<docker_attempt*, std::shared_ptr<docker_attempt>> live;
  bool shutting_down = false;

private:
  std::once_flag memory_home_once;
  std::optional<detail::docker_memory_home> memory_home_;
};

/// Makes an attempt of `spec` on `core`'s I/O thread and returns its handle:
/// started afresh, or, with `adopt_container`, re-attached to that container
/// (its name or id) after a restart.
std::shared_ptr<attempt_handle>
launch_docker_attempt(std::shared_ptr<docker_core> core, attempt_spec spec,
                      attempt_callbacks cb, std::shared_ptr<id_box> id,
                      std::optional<std::string> adopt_container);

} // namespace tasksup::runtime::detail

#pragma once

// One docker attempt (private to the docker runtime): its life on the
// engine is in docker_attempt.cpp, the adoption of a container another
// instance started in docker_adopt.cpp.

#include "docker_core.hpp"

#include "tasksup/runtime/detail/docker_log_demux.hpp"
#include "tasksup/runtime/output_capture.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::runtime::detail {

/// One attempt: create, start, stream logs, wait, inspect, collect
/// artifacts, remove — a chain of asynchronous engine requests on the
/// core's I/O thread. Every path ends in `complete`, which calls on_exit
/// exactly once.
class docker_attempt : public std::enable_shared_from_this<docker_attempt> {
public:
  docker_attempt(std::shared_ptr<docker_core> core, attempt_spec spec,
                 attempt_callbacks cb, std::shared_ptr<id_box> id)
    : core_(std::move(core)), spec_(std::move(spec)), cb_(std::move(cb)),
      id_(std::move(id)), drain_timer_(core_->io) {}

  void begin();

  /// The attempt's memory limit on a cgroup of its own, when the engine
  /// allows it (else the container's own limit holds).
  void watch_memory();

  /// Takes over container `id`, started by another instance of the runtime.
  void begin_adopt(std::string id);

  void request_stop(std::chrono::milliseconds grace);

  /// The receiver of lines caught up.
  void resume_output();

  void request_kill();

  /// The runtime is being destroyed: kill and remove the container.
  void shut_down();

  /// Gives up at once, leaving whatever the engine still holds.
  void abandon(const std::string& why);

private:
  enum class phase {
    idle,
    creating,
    starting,
    running,
    collecting,
    removing,
    done
  };

  enum class user_request { none, stop, kill };

  void make_demux();

  void not_adopted(std::string why);

  void on_adopt_inspected(engine_response resp);

  /// The container runs (or ran, when adopted after its end): wait for it.
  void running();

  using step_handler = void (*)(docker_attempt&, engine_response);

  /// Sends one request whose answer goes to `handler` unless the attempt is
  /// done by then.
  std::shared_ptr<engine_exchange> request(verb method, std::string target,
                                           std::string body,
                                           std::chrono::milliseconds timeout,
                                           step_handler handler);

  /// Records the first infrastructure failure; later ones are consequences.
  void fail(std::string text);

  std::string engine_text(const engine_response& resp) const;

  std::string container_path() const;

  void on_created(engine_response resp);

  /// Stopped or killed before it ran: it is never started.
  void end_unstarted();

  /// Attaches to the container's output (`/attach?<query>`), which then
  /// goes to `on_output_bytes`; the attempt is starting.
  void attach(const std::string& query);

  void on_attached();

  void on_started(engine_response resp);

  void send_stop();

  void send_kill();

  void on_output_bytes(std::string_view bytes);

  void on_output_end(engine_response resp);

  void end_output();

  void on_waited(engine_response resp);

  void maybe_collect();

  void inspect();

  void on_inspected(engine_response resp);

  void collect_artifacts();

  void remove();

  void complete();

  void complete_now();

  std::shared_ptr<docker_core> core_;
  /// The attempt cannot succeed by starting it again (image missing).
  bool retry_futile_ = false;
  attempt_spec spec_;
  attempt_callbacks cb_;
  std::shared_ptr<id_box> id_;
  asio::steady_timer drain_timer_;
  std::optional<output_capture> capture_;
  std::optional<detail::docker_log_demux> demux_;
  phase phase_ = phase::idle;
  user_request requested_ = user_request::none;
  std::chrono::milliseconds grace_{0};
  std::string name_;
  std::string container_id_;
  std::shared_ptr<engine_exchange> step_;
  std::shared_ptr<engine_exchange> wait_;
  std::shared_ptr<engine_exchange> output_;
  std::vector<std::shared_ptr<engine_exchange>> controls_;
  bool attached_ = false;
  bool wait_done_ = false;
  bool output_done_ = false;
  std::string start_error_;
  int exit_code_ = 0;
  int signal_ = 0;
  bool oom_killed_ = false;
  std::optional<detail::docker_memory_watch> memory_watch_;
  std::optional<clock_type::time_point> started_at_;
  std::optional<clock_type::time_point> settle_until_;
  /// Adopted from another instance: found, not created.
  bool adopting_ = false;
  /// Bytes of output the log already held at adoption, and bytes read.
  std::uint64_t replay_bytes_ = 0;
  std::uint64_t replayed_ = 0;
  bool replaying_ = false;
  std::optional<clock_type::time_point> ended_at_;
  std::vector<std::string> artifacts_;
  std::string infra_error_;
};

} // namespace tasksup::runtime::detail

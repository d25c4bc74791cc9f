#pragma once

// The process runtime's reactor: one thread per runtime that runs the
// attempts' lives -- their start, the serving shim's report and end, stops
// and kills, the drain of their output and the wait for their group, and
// their report -- over the parts it is built from: the I/O loop
// (`attempt_io`), the shims (`shim_pool`), reaping (`attempt_reaper`),
// launching (`attempt_launch`) and adoption (`attempt_adoption`). Private
// to the runtime.

#include "attempt.hpp"
#include "attempt_io.hpp"
#include "attempt_launch.hpp"
#include "attempt_reaper.hpp"
#include "shim_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tasksup::runtime::detail {

class reactor : public std::enable_shared_from_this<reactor> {
public:
  explicit reactor(process_runtime_options options);
  ~reactor() = default;

  /// Sets up descriptors and starts the thread; on failure every attempt
  /// reports `init_error_`.
  void init();

  /// Asks the thread to kill what runs, report it and end; joins unless
  /// called from the reactor thread itself.
  void shutdown();

  std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                        attempt_callbacks cb);

  std::shared_ptr<attempt_handle> adopt(adopt_spec spec, attempt_callbacks cb);

  reap_report reap(const reap_spec& spec) { return reaper_.reap(spec); }

  void post_stop(std::uint64_t id, std::chrono::milliseconds grace) {
    post(command{command::stop, id, grace, nullptr});
  }

  void post_kill(std::uint64_t id) {
    post(command{command::kill, id, {}, nullptr});
  }

  void post_resume(std::uint64_t id) {
    post(command{command::resume, id, {}, nullptr});
  }

private:
  struct command {
    enum kind_t { add, stop, kill, resume } kind;
    std::uint64_t id;
    std::chrono::milliseconds grace;
    attempt_ptr item;
  };

  // ---- taking attempts in (process_reactor.cpp) ---------------------------

  /// Returns false when the reactor no longer accepts work.
  bool post(command cmd);
  /// Hands an attempt to the reactor thread, which reports it exactly once
  /// (or reports it here when the reactor is gone).
  std::shared_ptr<attempt_handle> submit(attempt_ptr item);
  std::shared_ptr<attempt_handle> finish_unposted(attempt_ptr item);
  /// Lines of `a` to `cb.on_line`, on the reactor thread.
  output_capture::line_callback line_sink(attempt& a);
  void deliver_sync(attempt_callbacks& cb, attempt_outcome out);
  void run();
  void handle_commands();
  void add_attempt(attempt_ptr a);
  /// Gives up on an attempt that cannot be watched: what runs is killed.
  void abandon(attempt& a, std::string error);

  // ---- an attempt's end (attempt_end.cpp) -----------------------------------

  void on_leader_exit(attempt& a);
  void read_output(attempt& a, output_stream stream);
  /// Moves an attempt on when something it waits for came or is due: its
  /// report, its stop's kill, its drain, its group; reports it once over.
  void advance(attempt& a);
  /// Reports the attempt (`cb.on_exit`) and forgets it: `a` is gone.
  void finalize(attempt& a);
  void signal_group(attempt& a, int sig);

  // ---- an attempt a serving shim runs (served_attempt.cpp) ------------------

  /// Where a serving shim's report stands (`take_report`).
  enum class report_state { pending, taken, failed };
  /// The rest of start() for an attempt a serving shim runs.
  std::shared_ptr<attempt_handle> start_served(attempt_ptr a,
                                               shim_request request);
  /// Reads a pending report from the shim's socket: `taken` once it came
  /// (the pid announced; what follows it stays on the socket), `pending`
  /// while it has not (or its shim is being ended, `ending_shim`), `failed`
  /// when the shim hung up or said something else: the attempt has then
  /// been reported and is gone.
  report_state take_report(attempt& a);
  /// Ends an attempt whose shim did not report the agent's start, with the
  /// agent it may have started, and reports it (false: the attempt is gone)
  /// -- unless the shim was a task's idle one that hung up: then a fresh
  /// shim is asked (true: the report is pending again); or unless the shim
  /// is still there: then it is being ended (`ending_shim`, true) and the
  /// attempt is reported once it is gone.
  bool report_failed(attempt& a, std::string error, bool hung_up = false);
  /// Asks a fresh shim to run the attempt that `a.retry_request` describes;
  /// false when none could be started or asked.
  bool ask_fresh_shim(attempt& a);
  /// Tells the handle and `cb.on_started` the attempt's runtime id.
  void announce(attempt& a, std::string id);
  /// What `stop_unreported_shim` does, without waiting: false when it
  /// cannot be watched (no pidfd), and `a` is left as it was.
  bool end_unreported_shim_later(attempt& a, std::string error);
  /// The shim `end_unreported_shim_later` asked to end has: the agent of
  /// its record is killed and the attempt reported (`a` is gone).
  void unreported_shim_ended(attempt& a);
  /// Back to the pool after a served attempt, or retired.
  void release_shim(attempt& a);

  bool closing() {
    std::lock_guard<std::mutex> guard{mtx_};
    return closing_;
  }

  process_runtime_options options_;
  warning_sink warn_;
  shim_launcher program_;
  attempt_reaper reaper_;
  attempt_io io_;
  /// Ids of attempts and of retired shims (their epoll keys).
  std::atomic<std::uint64_t> next_id_{1};
  shim_pool pool_;
  attempt_launcher launcher_;
  /// Why no attempt can run (no tasksup-shim, no epoll); empty when they
  /// can.
  std::string init_error_;
  std::thread thread_;

  std::mutex mtx_;
  bool closing_ = false;
  bool thread_running_ = false;
  std::vector<command> commands_;
  /// The wake-up descriptor was written for commands the reactor has not
  /// taken yet: posting more needs no other write.
  bool wake_pending_ = false;

  // Reactor thread only.
  std::unordered_map<std::uint64_t, attempt_ptr> attempts_;
  std::optional<clock_type::time_point> shutdown_deadline_;
};

class process_handle : public attempt_handle {
public:
  process_handle(std::weak_ptr<reactor> r, std::uint64_t id, std::string pid)
    : reactor_(std::move(r)), id_(id), pid_(std::move(pid)) {}

  /// An attempt whose pid comes later (`set_id`); `id()` waits for it at
  /// most `patience`.
  process_handle(std::weak_ptr<reactor> r, std::uint64_t id,
                 std::chrono::milliseconds patience)
    : reactor_(std::move(r)), id_(id), later_(true), known_(false),
      patience_(patience) {}

  // After the attempt was reported there is nothing to stop, and asking
  // the reactor would wake it for nothing (a container worker kills its
  // attempt whenever it ends).
  void stop(std::chrono::milliseconds grace) override {
    if (ended_.load(std::memory_order_acquire))
      return;
    if (auto r = reactor_.lock())
      r->post_stop(id_, grace);
  }

  void kill() override {
    if (ended_.load(std::memory_order_acquire))
      return;
    if (auto r = reactor_.lock())
      r->post_kill(id_);
  }

  void resume_output() override {
    if (ended_.load(std::memory_order_acquire))
      return;
    if (auto r = reactor_.lock())
      r->post_resume(id_);
  }

  std::string id() const override {
    std::unique_lock<std::mutex> guard{id_mtx_};
    if (!known_)
      id_cv_.wait_for(guard, patience_, [this] { return known_; });
    return pid_;
  }

  bool id_later() const override { return later_; }

  void set_id(std::string pid) {
    {
      std::lock_guard<std::mutex> guard{id_mtx_};
      pid_ = std::move(pid);
      known_ = true;
    }
    id_cv_.notify_all();
  }

  /// The attempt has been reported: stop() and kill() do nothing from now.
  void mark_ended() { ended_.store(true, std::memory_order_release); }

private:
  std::weak_ptr<reactor> reactor_;
  std::uint64_t id_;
  bool later_ = false;
  mutable std::mutex id_mtx_;
  mutable std::condition_variable id_cv_;
  bool known_ = true;
  std::chrono::milliseconds patience_{0};
  std::string pid_;
  std::atomic<bool> ended_{false};
};

} // namespace tasksup::runtime::detail

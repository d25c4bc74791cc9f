#pragma once

// The process runtime's reactor: one thread per runtime, epoll over the
// attempts' pidfds and output pipes, timers for stop grace periods and
// drains. Private to the runtime.

#include "memory_cgroup.hpp"
#include "process_spawn.hpp"
#include "tasksup/runtime/detail/shim_record.hpp"
#include "tasksup/runtime/output_capture.hpp"
#include "tasksup/runtime/process_runtime.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cstdlib>
#include <cstring>

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

extern char** environ;

namespace tasksup::runtime::detail {

using clock_type = std::chrono::steady_clock;

/// At most this many artifact paths are reported per attempt.
inline constexpr std::size_t max_artifacts = 10000;

/// Bytes read from one pipe per reactor turn, so one chatty attempt cannot
/// starve the others.
inline constexpr std::size_t max_read_per_turn = 1024 * 1024;

/// How often to look again for a killed process group or cgroup to vanish.
inline constexpr std::chrono::milliseconds poll_interval{10};

// Epoll keys: attempt id << 2 | kind. Id 0 is the wake-up eventfd.
inline constexpr std::uint64_t kind_wake = 0;
inline constexpr std::uint64_t kind_exit = 1;
inline constexpr std::uint64_t kind_output = 2;
inline constexpr std::uint64_t kind_error = 3;

inline std::uint64_t key(std::uint64_t id, std::uint64_t kind) {
  return id << 2 | kind;
}

// ---- a task's serving shim --------------------------------------------------

/// A `tasksup-shim --serve` process (our child): it runs the attempts of
/// the task whose attempt directories are in `dir`, one at a time, asked
/// through `sock`.
struct served_shim {
  pid_t pid = -1;
  int pidfd = -1;
  int sock = -1;
  std::string dir;
  clock_type::time_point idle_since;
};

// ---- one attempt ----------------------------------------------------------

class process_handle;

struct attempt {
  std::uint64_t id = 0;
  std::string argv0;
  std::string attempt_dir;
  std::string artifacts_dir;
  attempt_callbacks cb;
  /// The handle start() returned, told when the attempt has been reported.
  std::weak_ptr<process_handle> handle;
  clock_type::time_point started;
  clock_type::time_point ended;

  /// The shim's pid (our child, or for an adopted attempt another node's)
  /// and the pidfd through which it is watched and signalled.
  pid_t pid = -1;
  int pidfd = -1;
  /// The agent's pid, as the shim reported it.
  pid_t agent_pid = -1;
  /// orphan_policy::kill: our end of the shim's stdin; closing it (or our
  /// death) makes the shim kill the agent. A served attempt: the serving
  /// shim's socket (watched for its `end`), whatever the policy.
  int control_fd = -1;
  /// Run by a serving shim (whose pid, pidfd and socket are `pid`, `pidfd`
  /// and `control_fd` until the attempt ends); `shim_ok` once the shim said
  /// `end` (it can serve the task's next attempt).
  bool served = false;
  bool shim_ok = false;
  /// What the serving shim has said after its report of the agent's start:
  /// its end and the exit record that comes with it.
  std::string end_bytes;
  /// start() did not wait for the serving shim's report of the agent's
  /// start: the reactor reads it (by `report_due`), then tells the handle
  /// and `cb.on_started` the agent's pid (`id_later`, until `announced`).
  /// Signals asked for before it came wait in `deferred_signal`, since the
  /// shim drops those that reach it before it reads its request.
  bool id_later = false;
  bool announced = false;
  bool report_pending = false;
  clock_type::time_point report_due;
  int deferred_signal = 0;
  /// The serving shim neither reported nor hung up in time: it was asked to
  /// end (SIGUSR1; SIGKILL at `kill_at`), and the attempt is reported as
  /// failed with `infrastructure_error` once its pidfd says it is gone and
  /// the agent its record names is killed. The reactor waits for none of it.
  bool ending_shim = false;
  /// Sent to a task's idle shim, which may have died since its last
  /// attempt: the request and the write ends of the output pipes, kept
  /// until the report came, to ask a fresh shim should that one hang up.
  std::string retry_request;
  int retry_out = -1;
  int retry_err = -1;

  /// The report came, or no fresh shim will be asked: the request and the
  /// pipes' write ends kept for one are let go.
  void forget_retry() {
    retry_request.clear();
    close_fd(retry_out);
    close_fd(retry_err);
  }
  std::string serve_dir;
  /// output.log, written by the shim.
  std::string log_path;
  /// Delivery of lines to `cb.on_line`; off while an adopted attempt's log
  /// is read up to where it was at adoption.
  bool delivering = true;
  /// How the agent ended, as the shim recorded it.
  std::optional<exit_record> record;

  // An adopted attempt: its shim is not our child; its output is read from
  // output.log as output.streams describes it.
  bool adopted = false;
  int log_fd = -1;
  int index_fd = -1;
  stream_index_reader index;
  std::deque<log_segment> segments;
  std::uint64_t log_offset = 0;
  std::string cgroup_path;
  /// Read ends of the agent's stdout and stderr pipes.
  int output_fd = -1;
  int error_fd = -1;
  /// Set while the receiver of its lines is full: its pipes are not read.
  bool paused = false;
  std::optional<output_capture> capture;
  std::optional<detail::memory_cgroup> cgroup;

  /// Set when the attempt never ran: the outcome is known at start.
  bool spawn_failed = false;
  int preset_exit_code = 0;
  std::string failure_line;
  std::string infrastructure_error;

  /// The attempt did not run, or how it ran cannot be known: it is reported
  /// as exit 1 with `error`, ended now.
  void never_ran(std::string error) {
    spawn_failed = true;
    preset_exit_code = 1;
    infrastructure_error = std::move(error);
    ended = clock_type::now();
  }

  bool exited = false;
  int wait_status = 0;
  /// Set when, after the leader was reaped, a signal to the process group
  /// found no process in it (not even a zombie): none is left to reap or
  /// wait for, and none can join it.
  bool group_empty = false;
  bool eof = false;
  std::optional<clock_type::time_point> kill_at;
  std::optional<clock_type::time_point> drain_until;
  std::optional<clock_type::time_point> group_until;

  ~attempt() {
    forget_retry();
    close_fd(pidfd);
    close_fd(output_fd);
    close_fd(error_fd);
    close_fd(control_fd);
    close_fd(log_fd);
    close_fd(index_fd);
  }
};

using attempt_ptr = std::unique_ptr<attempt>;

// ---- the reactor ----------------------------------------------------------

class reactor : public std::enable_shared_from_this<reactor> {
public:
  explicit reactor(process_runtime_options options)
    : options_(std::move(options)) {
    // The report is waited for, however short the wait: a zero timeout
    // would mean none at all on the shim's socket.
    options_.shim_report_timeout =
      std::max(options_.shim_report_timeout, std::chrono::milliseconds{1});
  }

  ~reactor() {
    close_fd(epoll_fd_);
    close_fd(wake_fd_);
    close_fd(devnull_fd_);
  }

  /// Sets up descriptors and starts the thread; on failure every attempt
  /// reports `init_error_`.
  void init() {
    raise_fd_limit();
    std::string looked;
    shim_path_ = find_shim(options_.shim_path, looked);
    if (shim_path_.empty()) {
      init_error_ = "process runtime: cannot find the tasksup-shim program "
                    "(looked at " +
                    looked +
                    "); set process_runtime_options::shim_path or "
                    "TASKSUP_SHIM";
      return;
    }
    if (options_.child_subreaper) {
      if (::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0)
        subreaper_ = true;
      else
        warn("process runtime: cannot become a child subreaper (" +
             errno_text(errno) +
             "); orphans of agents are left to init to reap");
    }
    for (auto& name : options_.inherited_env)
      if (auto* value = std::getenv(name.c_str()))
        base_env_.emplace(name, value);
    for (char** e = environ; e != nullptr && *e != nullptr; ++e)
      if (std::strncmp(*e, "LC_", 3) == 0)
        if (auto* eq = std::strchr(*e, '='))
          base_env_.emplace(std::string(*e, eq), std::string(eq + 1));
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    devnull_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (epoll_fd_ < 0 || wake_fd_ < 0 || devnull_fd_ < 0 ||
        !raise_fd(devnull_fd_)) {
      init_error_ =
        "process runtime: cannot set up its reactor: " + errno_text(errno);
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = key(0, kind_wake);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
      init_error_ = "process runtime: cannot watch its wake-up descriptor: " +
                    errno_text(errno);
      return;
    }
    read_buf_.resize(64 * 1024);
    thread_running_ = true;
    thread_ = std::thread{[self = shared_from_this()] { self->run(); }};
  }

  /// Asks the thread to kill what runs, report it and end; joins unless
  /// called from the reactor thread itself.
  void shutdown() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      closing_ = true;
    }
    wake();
    if (!thread_.joinable())
      return;
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else
      thread_.join();
  }

  std::shared_ptr<attempt_handle> start(attempt_spec spec,
                                        attempt_callbacks cb);

  std::shared_ptr<attempt_handle> adopt(adopt_spec spec, attempt_callbacks cb);

  reap_report reap(const reap_spec& spec);

  void post_stop(std::uint64_t id, std::chrono::milliseconds grace) {
    post(command{command::stop, id, grace, nullptr});
  }

  void post_kill(std::uint64_t id) {
    post(command{command::kill, id, {}, nullptr});
  }

  void post_resume(std::uint64_t id) {
    post(command{command::resume, id, {}, nullptr});
  }

  void warn(std::string_view message) {
    std::lock_guard<std::mutex> guard{warn_mtx_};
    if (options_.on_warning) {
      try {
        options_.on_warning(message);
      } catch (...) {
        // A failing warning sink must not take the reactor down.
      }
    }
  }

private:
  struct command {
    enum kind_t { add, stop, kill, resume } kind;
    std::uint64_t id;
    std::chrono::milliseconds grace;
    attempt_ptr item;
  };

  using deadline = std::pair<clock_type::time_point, std::uint64_t>;

  void raise_fd_limit() {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0)
      return;
    if (lim.rlim_cur < lim.rlim_max) {
      auto wanted = lim;
      wanted.rlim_cur = lim.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &wanted) == 0)
        lim = wanted;
      else
        warn("process runtime: cannot raise the open file limit to " +
             std::to_string(lim.rlim_max) + ": " + errno_text(errno));
    }
    max_fd_ = lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > 1 << 20
                ? 1 << 20
                : static_cast<int>(lim.rlim_cur);
  }

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
  }

  // Returns false when the reactor no longer accepts work.
  bool post(command cmd) {
    bool wake_needed = false;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (closing_ || !thread_running_)
        return false;
      commands_.push_back(std::move(cmd));
      wake_needed = !std::exchange(wake_pending_, true);
    }
    if (wake_needed)
      wake();
    return true;
  }

  std::shared_ptr<attempt_handle> submit(attempt_ptr item);
  std::shared_ptr<attempt_handle> finish_unposted(attempt_ptr item);
  /// Where a serving shim's report stands (`take_report`).
  enum class report_state { pending, taken, failed };
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
  /// The rest of start() for an attempt a serving shim runs.
  std::shared_ptr<attempt_handle> start_served(attempt_ptr a,
                                               shim_request request);
  /// Starts `tasksup-shim --serve dir`; `error` says why not.
  std::optional<served_shim> spawn_served_shim(const std::string& dir,
                                               std::string& error);
  /// The idle shim serving `dir`, taken out of the pool.
  std::optional<served_shim> take_idle_shim(const std::string& dir);
  /// Kills and reaps a shim that runs nothing (any thread).
  void discard_shim(served_shim& s);
  /// Reactor thread: back to the pool after a served attempt, or retired.
  void release_shim(attempt& a);
  /// Reactor thread: closes its socket (it exits) and reaps it once it has.
  void retire_shim(served_shim s);
  /// Reactor thread: retires the shims idle for longer than allowed (all of
  /// them when `all`).
  void expire_idle_shims(bool all);
  int watch(attempt& a);

  const detail::memory_controller* memory_controller() {
    std::lock_guard<std::mutex> guard{cgroup_mtx_};
    if (!cgroup_probed_) {
      cgroup_probed_ = true;
      auto ctrl = detail::find_memory_controller(options_.cgroup_name);
      if (ctrl)
        controller_ = *ctrl;
      else
        warn("process runtime: memory limits are not enforced and OOM kills "
             "are not detected: " +
             ctrl.error().to_string());
    }
    return controller_ ? &*controller_ : nullptr;
  }

  void deliver_sync(attempt_callbacks& cb, attempt_outcome out) {
    if (cb.on_exit) {
      try {
        cb.on_exit(std::move(out));
      } catch (...) {
        warn("process runtime: an on_exit callback threw");
      }
    }
  }

  void run();
  void handle_commands();
  void add_attempt(attempt_ptr a);
  void abandon(attempt& a, std::string error);
  void on_leader_exit(attempt& a);
  /// Ends a shim (`pid`, watched through `pidfd`) that did not report the
  /// start of the agent of `attempt_dir`'s attempt, and that agent with it.
  void stop_unreported_shim(pid_t pid, int pidfd,
                            const std::string& attempt_dir);
  /// What `stop_unreported_shim` does, without waiting: false when it
  /// cannot be watched (no pidfd), and `a` is left as it was.
  bool end_unreported_shim_later(attempt& a, std::string error);
  /// The shim `end_unreported_shim_later` asked to end has: the agent of
  /// its record is killed and the attempt reported (`a` is gone).
  void unreported_shim_ended(attempt& a);
  std::string not_reported_text() const;
  /// Reads what a serving shim said: true once it said the attempt's end
  /// (`shim_ok`, and `record` when the record it sent is sound) or hung up;
  /// false while more is to come.
  bool take_end(attempt& a);
  void read_output(attempt& a, output_stream stream);
  void close_output(attempt& a);
  void close_stream(int& fd);
  /// After a serving shim's end: reads what the pipes hold (all the agent
  /// wrote is in them) and closes them. False when the receiver filled up
  /// first (the attempt is paused; resuming reads on).
  bool drain_after_end(attempt& a);
  void set_paused(attempt& a, bool paused);
  bool group_gone(attempt& a);
  void advance(attempt& a);
  void finalize(attempt& a);
  void signal_group(attempt& a, int sig);
  void schedule(clock_type::time_point at, std::uint64_t id) {
    deadlines_.emplace(at, id);
  }
  void retry_cgroup_removals(bool final_pass);
  void read_exit_record(attempt& a);
  /// Reads what output.streams says was appended to an adopted attempt's
  /// log into its capture; true when all of it was read.
  bool follow_log(attempt& a, std::vector<char>& buffer);
  /// The memory cgroup named in a shim record, when it is one this runtime
  /// would have made (`name`: the attempt's, empty when not known).
  std::optional<detail::memory_cgroup> recorded_cgroup(const std::string& path,
                                                       const std::string& name);
  output_capture::line_callback line_sink(attempt& a);

  process_runtime_options options_;
  /// The tasksup-shim program, empty when none was found (`init_error_`).
  std::string shim_path_;
  std::map<std::string, std::string> base_env_;
  std::string init_error_;
  bool subreaper_ = false;
  int max_fd_ = 1024;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int devnull_fd_ = -1;
  std::thread thread_;
  std::atomic<std::uint64_t> next_id_{1};

  std::mutex mtx_;
  bool closing_ = false;
  bool thread_running_ = false;
  std::vector<command> commands_;
  /// The wake-up descriptor was written for commands the reactor has not
  /// taken yet: posting more needs no other write.
  bool wake_pending_ = false;

  child_stack_pool stacks_;
  std::mutex warn_mtx_;
  std::mutex cgroup_mtx_;
  bool cgroup_probed_ = false;
  std::optional<detail::memory_controller> controller_;

  // Reactor thread only.
  std::unordered_map<std::uint64_t, attempt_ptr> attempts_;
  std::priority_queue<deadline, std::vector<deadline>, std::greater<>>
    deadlines_;
  std::vector<std::pair<detail::memory_cgroup, clock_type::time_point>>
    stale_cgroups_;
  std::vector<char> read_buf_;
  std::optional<clock_type::time_point> shutdown_deadline_;
  /// Retired serving shims until they are reaped, by epoll id.
  std::unordered_map<std::uint64_t, served_shim> retiring_;
  /// When to look for serving shims idle for too long.
  std::optional<clock_type::time_point> idle_check_at_;

  /// Idle serving shims by the directory they serve (start() takes them on
  /// any thread; the reactor thread puts them back).
  std::mutex shims_mtx_;
  std::unordered_map<std::string, served_shim> idle_shims_;
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

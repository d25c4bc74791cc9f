#pragma once

#include <atomic>
#include <csignal>
#include <functional>
#include <initializer_list>
#include <thread>

namespace tasksup::app {

/// Delivers SIGINT/SIGTERM (or any given signals) to a callback on a thread
/// of its own, never in a signal handler: the constructor blocks the signals
/// in the calling thread (threads started later inherit the mask, so create
/// the watch before the actor system) and a thread sleeps in poll() on a
/// signalfd for them, so a signal wakes it at once. The callback may
/// therefore send actor messages. Destruction wakes the thread through an
/// eventfd (no polling interval, no delay at exit), joins it and restores the
/// previous signal mask. Throws std::system_error when the descriptors
/// cannot be made.
class signal_watch {
public:
  /// Called with the signal number and how many watched signals arrived so
  /// far (1 for the first), on the watch thread.
  using handler = std::function<void(int signo, int count)>;

  signal_watch(std::initializer_list<int> signals, handler on_signal);

  ~signal_watch();

  signal_watch(const signal_watch&) = delete;
  signal_watch& operator=(const signal_watch&) = delete;

  /// Watched signals received so far.
  int count() const noexcept { return count_.load(); }

private:
  void run();

  sigset_t set_;
  sigset_t previous_;
  handler on_signal_;
  int signal_fd_ = -1;
  int stop_fd_ = -1;
  std::atomic<int> count_{0};
  std::thread thread_;
};

} // namespace tasksup::app

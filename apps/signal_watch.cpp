#include "signal_watch.hpp"

#include <pthread.h>

#include <cerrno>
#include <ctime>
#include <utility>

namespace tasksup::app {

signal_watch::signal_watch(std::initializer_list<int> signals,
                           handler on_signal)
  : on_signal_(std::move(on_signal)) {
  sigemptyset(&set_);
  for (int sig : signals)
    sigaddset(&set_, sig);
  ::pthread_sigmask(SIG_BLOCK, &set_, &previous_);
  thread_ = std::thread{[this] { run(); }};
}

signal_watch::~signal_watch() {
  done_ = true;
  thread_.join();
  // A signal that arrived after the thread stopped waiting stays pending;
  // drop it rather than letting it kill the process on unblocking.
  timespec zero{0, 0};
  while (::sigtimedwait(&set_, nullptr, &zero) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

void signal_watch::run() {
  // Polling with a short timeout lets the destructor end the thread without
  // sending it a signal of its own.
  timespec tick{0, 100'000'000};
  while (!done_) {
    int sig = ::sigtimedwait(&set_, nullptr, &tick);
    if (sig > 0) {
      auto n = ++count_;
      if (on_signal_)
        on_signal_(sig, n);
    }
  }
}

} // namespace tasksup::app

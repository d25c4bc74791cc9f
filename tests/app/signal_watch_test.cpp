#include "signal_watch.hpp"

#include <catch2/catch.hpp>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

using tasksup::app::signal_watch;

namespace {

bool blocked(int sig) {
  sigset_t now;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

} // namespace

TEST_CASE("signal_watch hands each signal to its callback, in order",
          "[signal_watch]") {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::pair<int, int>> seen;
  {
    signal_watch watch{{SIGUSR1, SIGUSR2}, [&](int sig, int count) {
                         std::lock_guard<std::mutex> guard{mtx};
                         seen.emplace_back(sig, count);
                         cv.notify_all();
                       }};
    CHECK(blocked(SIGUSR1));
    auto wait_for = [&](std::size_t n) {
      std::unique_lock<std::mutex> lock{mtx};
      // The bound only keeps a broken watch from hanging the suite.
      return cv.wait_for(lock, std::chrono::seconds{30},
                         [&] { return seen.size() >= n; });
    };
    REQUIRE(::kill(::getpid(), SIGUSR1) == 0);
    REQUIRE(wait_for(1));
    REQUIRE(::kill(::getpid(), SIGUSR2) == 0);
    REQUIRE(wait_for(2));
    CHECK(watch.count() == 2);
  }
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == std::pair{SIGUSR1, 1});
  CHECK(seen[1] == std::pair{SIGUSR2, 2});
  // Destruction gives the thread back its previous mask.
  CHECK_FALSE(blocked(SIGUSR1));
  CHECK_FALSE(blocked(SIGUSR2));
}

TEST_CASE("signal_watch stops without a signal and drops late ones",
          "[signal_watch]") {
  int calls = 0;
  {
    signal_watch watch{{SIGUSR1}, [&](int, int) { ++calls; }};
    // Nothing arrives: destruction must still end the watch thread (it is
    // woken by its own descriptor, not by a signal or a timeout).
  }
  CHECK(calls == 0);
  CHECK_FALSE(blocked(SIGUSR1));
  // A signal raised while the watch is being torn down stays pending only
  // until the destructor drains it; it must not terminate the process.
  {
    signal_watch watch{{SIGUSR1}, nullptr};
    ::pthread_kill(::pthread_self(), SIGUSR1);
  }
  CHECK_FALSE(blocked(SIGUSR1));
}

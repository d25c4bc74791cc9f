#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace tasksup {

/// Restart intensity as in OTP's supervisor: remembers restart times and
/// answers whether one more restart stays within `max_restarts` per `period_s`.
/// Time is passed in (seconds on any monotonic scale), never read.
class restart_window {
public:
  /// A window allowing `max_restarts` restarts per `period_s` seconds.
  restart_window(int max_restarts = 10, double period_s = 3600.0);

  /// Records a restart at `now_s` and returns true if it is allowed, i.e. at
  /// most `max_restarts` restarts (this one included) fall within the last
  /// `period_s` seconds, both ends inclusive (OTP's rule); returns false (and
  /// records nothing) otherwise. `now_s` must not go backwards.
  bool try_restart(double now_s);

  /// Restarts counted within the period ending at `now_s`.
  std::size_t count(double now_s) const;

  /// Whether a restart at `now_s` would be allowed, without recording it.
  bool allows(double now_s) const;

  int max_restarts() const noexcept { return max_restarts_; }

  double period_s() const noexcept { return period_s_; }

  /// The restart times still recorded, oldest first (what a journal keeps).
  std::vector<double> recorded() const {
    return {times_.begin() + static_cast<std::ptrdiff_t>(head_), times_.end()};
  }

  /// Replaces the recorded times with `times` (as `recorded` returned them).
  void restore(std::vector<double> times) {
    times_ = std::move(times);
    head_ = 0;
  }

private:
  int max_restarts_;
  double period_s_;
  /// Recorded restart times, oldest first, from `head_` on; entries before
  /// `head_` have left the window. A vector (24 bytes, no allocation while
  /// empty) where a std::deque allocated ~576 bytes per window up front.
  std::vector<double> times_;
  std::size_t head_ = 0;
};

} // namespace tasksup

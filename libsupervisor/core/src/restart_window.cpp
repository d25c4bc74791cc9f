#include "tasksup/supervisor/restart_window.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace tasksup {

// As in OTP's supervisor, a restart exactly `period_s` ago still counts: the
// window is [now - period, now]. Only allowed restarts are recorded, so the
// window never holds more than `max_restarts` live entries. Expired entries
// are skipped by advancing `head_` and compacted away once they are at least
// half of the vector, so each restart costs amortized constant time.

restart_window::restart_window(int max_restarts, double period_s)
  : max_restarts_(std::max(max_restarts, 0)),
    period_s_(std::isnan(period_s) ? 0.0 : std::max(period_s, 0.0)) {}

bool restart_window::try_restart(double now_s) {
  auto threshold = now_s - period_s_;
  while (head_ < times_.size() && times_[head_] < threshold)
    ++head_;
  if (head_ == times_.size()) {
    times_.clear();
    head_ = 0;
  } else if (head_ > 0 && head_ * 2 >= times_.size()) {
    times_.erase(times_.begin(),
                 times_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  if (times_.size() - head_ >= static_cast<std::size_t>(max_restarts_))
    return false;
  times_.push_back(now_s);
  return true;
}

bool restart_window::allows(double now_s) const {
  return count(now_s) < static_cast<std::size_t>(max_restarts_);
}

std::size_t restart_window::count(double now_s) const {
  auto threshold = now_s - period_s_;
  return static_cast<std::size_t>(std::count_if(
    times_.begin() + static_cast<std::ptrdiff_t>(head_), times_.end(),
    [threshold](double t) { return t >= threshold; }));
}

} // namespace tasksup

#include "supervisor/restart_window.hpp"

#include <algorithm>
#include <cmath>

namespace tasksup {

// As in OTP's supervisor, a restart exactly `period_s` ago still counts: the
// window is [now - period, now]. Only allowed restarts are recorded, so the
// deque never holds more than `max_restarts` entries.

restart_window::restart_window(int max_restarts, double period_s)
  : max_restarts_(std::max(max_restarts, 0)),
    period_s_(std::isnan(period_s) ? 0.0 : std::max(period_s, 0.0)) {}

bool restart_window::try_restart(double now_s) {
  auto threshold = now_s - period_s_;
  while (!times_.empty() && times_.front() < threshold)
    times_.pop_front();
  if (times_.size() >= static_cast<std::size_t>(max_restarts_))
    return false;
  times_.push_back(now_s);
  return true;
}

void restart_window::undo_last() {
  if (!times_.empty())
    times_.pop_back();
}

std::size_t restart_window::count(double now_s) const {
  auto threshold = now_s - period_s_;
  return static_cast<std::size_t>(
    std::count_if(times_.begin(), times_.end(),
                  [threshold](double t) { return t >= threshold; }));
}

} // namespace tasksup

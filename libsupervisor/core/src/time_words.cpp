#include "tasksup/supervisor/time_words.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace tasksup {

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    seconds = 0;
  // Beyond any wait a node schedules (a quota resets within days): shown
  // in hours rather than overflowing the conversions below.
  seconds = std::min(seconds, 1e9);
  char buf[32];
  if (seconds < 1.0 && seconds > 0) {
    std::snprintf(buf, sizeof(buf), "%.0fms", seconds * 1000);
  } else if (seconds < 10 && seconds != std::floor(seconds)) {
    std::snprintf(buf, sizeof(buf), "%.1fs", seconds);
  } else if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%.0fs", std::round(seconds));
  } else if (seconds < 3600) {
    auto s = static_cast<long long>(std::llround(seconds));
    if (s % 60 == 0)
      std::snprintf(buf, sizeof(buf), "%lldm", s / 60);
    else
      std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else {
    auto m = static_cast<long long>(std::llround(seconds / 60));
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", m / 60, m % 60);
  }
  return buf;
}

std::string clock_time(double at_s, double now_s) {
  if (!std::isfinite(at_s))
    return "?";
  auto t = static_cast<std::time_t>(std::llround(std::clamp(at_s, 0.0, 1e11)));
  std::tm tm{};
  if (localtime_r(&t, &tm) == nullptr)
    return "?";
  char buf[32];
  auto far = !std::isfinite(now_s) || std::fabs(at_s - now_s) >= 86400;
  std::strftime(buf, sizeof buf, far ? "%b %d %H:%M" : "%H:%M", &tm);
  return buf;
}

std::string reset_time_text(double at_s, double now_s) {
  if (!(at_s > now_s))
    return "now";
  return "at " + clock_time(at_s, now_s) + " (in " +
         human_duration(std::ceil(at_s - now_s)) + ")";
}

std::string restart_words(std::size_t restart, double ran_s, bool stable) {
  return "restart " + std::to_string(restart) + ", ran " +
         human_duration(ran_s) + (stable ? " stably" : "");
}

} // namespace tasksup

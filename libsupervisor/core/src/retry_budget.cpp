#include "tasksup/supervisor/retry_budget.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace tasksup {

namespace {

double non_negative(double x) {
  return std::isnan(x) || x < 0 ? 0.0 : x;
}

} // namespace

retry_budget::retry_budget(double capacity, double refill_per_s)
  : capacity_(
      std::min(non_negative(capacity), std::numeric_limits<double>::max())),
    refill_per_s_(
      std::min(non_negative(refill_per_s), std::numeric_limits<double>::max())),
    tokens_(*capacity_) {}

double retry_budget::available(double now_s) const {
  if (!capacity_)
    return std::numeric_limits<double>::infinity();
  if (!started_)
    return tokens_;
  // Time going backwards refills nothing.
  auto elapsed = std::max(now_s - last_s_, 0.0);
  if (std::isnan(elapsed))
    return tokens_;
  return std::min(*capacity_, tokens_ + elapsed * refill_per_s_);
}

void retry_budget::refill(double now_s) {
  tokens_ = available(now_s);
  if (!started_ || now_s > last_s_)
    last_s_ = now_s;
  started_ = true;
}

bool retry_budget::try_take(double now_s) {
  if (!capacity_)
    return true;
  refill(now_s);
  if (tokens_ < 1)
    return false;
  tokens_ -= 1;
  return true;
}

std::string retry_budget::save() const {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.17g %.17g %d", tokens_, last_s_,
                started_ ? 1 : 0);
  return buf;
}

void retry_budget::restore(std::string_view text) {
  double tokens = 0;
  double last = 0;
  int started = 0;
  if (std::sscanf(std::string{text}.c_str(), "%lf %lf %d", &tokens, &last,
                  &started) != 3 ||
      !(tokens >= 0))
    return;
  tokens_ = capacity_ ? std::min(tokens, *capacity_) : tokens;
  last_s_ = last;
  started_ = started != 0;
}

} // namespace tasksup

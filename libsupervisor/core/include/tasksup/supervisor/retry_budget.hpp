#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tasksup {

/// A pool of retry tokens shared by all tasks of a node: each retry
/// takes one; tokens refill at `refill_per_s` up to `capacity`. When empty,
/// failures are not retried (they fall back or fail), so a burst of failures
/// cannot become a retry storm. Unlimited when constructed without capacity.
class retry_budget {
public:
  /// Unlimited budget.
  retry_budget() = default;

  /// A budget starting full with `capacity` tokens, refilling at
  /// `refill_per_s` tokens per second (negative or NaN values count as 0).
  retry_budget(double capacity, double refill_per_s);

  /// Takes one token at `now_s`; false when none is left.
  bool try_take(double now_s);

  /// Tokens available at `now_s` (capacity when unlimited is infinite).
  double available(double now_s) const;

  /// True when constructed without a capacity.
  bool unlimited() const noexcept { return !capacity_.has_value(); }

  /// The tokens and the time they were counted at, as text (what a node
  /// journals).
  std::string save() const;

  /// Takes back what `save` wrote (the capacity and rate stay this
  /// budget's own); malformed text changes nothing.
  void restore(std::string_view text);

private:
  void refill(double now_s);
  std::optional<double> capacity_;
  double refill_per_s_ = 0;
  double tokens_ = 0;
  double last_s_ = 0;
  /// False until the first `try_take`; the budget starts full whenever that is.
  bool started_ = false;
};

} // namespace tasksup

#include "tasksup/supervisor/supervision_policy.hpp"

#include "tasksup/supervisor/time_words.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace tasksup {

namespace {

/// Output lines are untrusted and only bounded by the runtime; a reason
/// quotes at most this much of one.
constexpr std::size_t max_quoted_line = 200;

/// Seconds or counts as people write them: 3600, 0.5, 1e+06.
std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

std::string num(int x) {
  return std::to_string(x);
}

/// `<class> failure (rule "<rule>", line "<line>")`, leaving out what is
/// unknown.
std::string describe_failure(const decision& d) {
  std::string out{to_string(d.cls)};
  out += " failure";
  if (!d.classified)
    return out;
  auto& c = *d.classified;
  out += " (rule \"";
  out += c.rule;
  out += '"';
  if (!c.line.empty()) {
    out += ", line \"";
    if (c.line.size() > max_quoted_line) {
      out.append(c.line, 0, max_quoted_line);
      out += "...";
    } else {
      out += c.line;
    }
    out += '"';
  }
  out += ')';
  return out;
}

/// What the decision answers, in words.
std::string describe_cause(const decision& d) {
  switch (d.cause) {
    case decision_cause::succeeded:
      return d.rule == decision_rule::restart ? "permanent task exited 0"
                                              : "attempt succeeded (exit 0)";
    case decision_cause::failed:
      return describe_failure(d);
    case decision_cause::retry_budget_exhausted:
      return "retry budget exhausted";
    case decision_cause::breaker_open:
      return "circuit breaker open for " + d.agent_id;
    case decision_cause::user_fallback:
      return "fallback forced by user";
    case decision_cause::quota_closed:
      return "quota of " + d.agent_id + " used up";
  }
  return "unknown";
}

} // namespace

int retries_of(const supervision_state& st, error_class cls) noexcept {
  auto c = static_cast<std::size_t>(cls);
  return c < st.retries_by_class.size() ? st.retries_by_class[c] : 0;
}

std::string_view to_string(next_step x) noexcept {
  switch (x) {
    case next_step::succeed:
      return "succeed";
    case next_step::retry:
      return "retry";
    case next_step::switch_agent:
      return "switch_agent";
    case next_step::fail:
      return "fail";
    case next_step::wait_quota:
      return "wait_quota";
    case next_step::wait_not_now:
      return "wait_not_now";
  }
  return "unknown";
}

std::string describe(const decision& d, const supervisor_config& cfg) {
  auto out = describe_cause(d);
  switch (d.rule) {
    case decision_rule::success:
    case decision_rule::skip:
    case decision_rule::retry:
    case decision_rule::restart:
      break;
    case decision_rule::temporary_task:
      return out + ": temporary task, not restarted";
    case decision_rule::action_fail:
      return out + ": action fail, no retry and no fallback";
    case decision_rule::fatal_provider:
      out += ": provider " + d.agent_id + " refused, skipping its agents";
      break;
    case decision_rule::action_fallback:
      out += ": action fallback";
      break;
    case decision_rule::crash_restarts_exhausted:
      out += ": container crash restarts exhausted (" + num(d.count) + "/" +
             num(d.count_max) + ")";
      break;
    case decision_rule::retries_exhausted:
      out +=
        ": retries exhausted (" + num(d.count) + "/" + num(d.count_max) + ")";
      break;
    case decision_rule::quota_wait:
      return out + ": waiting for quota reset " +
             reset_time_text(d.resume_at_s, d.at_s);
    case decision_rule::quota_fallback:
      out += ": quota resets " + reset_time_text(d.resume_at_s, d.at_s);
      break;
    case decision_rule::not_now:
      return out + ": not now, trying again in " +
             human_duration(d.resume_at_s - d.at_s) + " (" + num(d.count) +
             " in a row; no retry spent)";
  }
  switch (d.limit) {
    case decision_limit::fallback_disabled:
      return out + "; fallback is disabled";
    case decision_limit::no_agent_left:
      return out + "; no agent left to fall back to";
    case decision_limit::chain_end:
      return out + "; no agent left in the chain";
    case decision_limit::max_total_attempts:
      return out + "; max_total_attempts (" + num(cfg.max_total_attempts) +
             ") reached";
    case decision_limit::restart_intensity:
      return out + "; restart intensity exceeded (" +
             num(cfg.intensity.max_restarts) + " restarts in " +
             num(cfg.intensity.period_s) + " s)";
    case decision_limit::none:
      break;
  }
  switch (d.step) {
    case next_step::switch_agent:
      return out + "; switching to agent " + std::to_string(d.agent_index + 1) +
             " of " + std::to_string(d.chain_size);
    case next_step::retry:
      if (d.rule == decision_rule::restart)
        return out + ": restarting (" +
               restart_words(d.restarts, d.ran_s, d.reset_retries) + ")";
      return out + ": retrying (" + num(d.retry_count) + "/" +
             num(cfg.max_retries_per_agent) + ")";
    case next_step::succeed:
    case next_step::fail:
    case next_step::wait_quota:
    case next_step::wait_not_now:
      break;
  }
  return out;
}

supervision_policy::supervision_policy(supervisor_config cfg)
  : cfg_(std::make_shared<const supervisor_config>(std::move(cfg))) {}

supervision_policy::supervision_policy(
  std::shared_ptr<const supervisor_config> cfg)
  : cfg_(std::move(cfg)) {}

supervision_state
supervision_policy::initial_state(std::size_t chain_size) const {
  supervision_state st;
  st.chain_size = std::max<std::size_t>(chain_size, 1);
  st.restarts =
    restart_window{cfg_->intensity.max_restarts, cfg_->intensity.period_s};
  return st;
}

bool supervision_policy::may_start(const supervision_state& st) const noexcept {
  return st.total_attempts < cfg_->max_total_attempts;
}

std::string supervision_policy::attempts_exhausted_reason() const {
  return "max_total_attempts (" + num(cfg_->max_total_attempts) + ") reached";
}

void supervision_policy::count_attempt(supervision_state& st) const noexcept {
  ++st.total_attempts;
}

decision supervision_policy::make(const supervision_state& st,
                                  decision_cause cause, double now_s) const {
  decision d;
  d.cause = cause;
  d.agent_index = st.agent_index;
  d.chain_size = st.chain_size;
  d.retry_count = st.retry_count;
  d.at_s = now_s;
  return d;
}

decision supervision_policy::on_exit(
  const supervision_state& st, const attempt_outcome& outcome,
  const std::optional<classification>& cls, double now_s,
  const std::vector<std::string>& providers) const {
  auto permanent = cfg_->restart == restart_type::permanent;
  auto d = make(st,
                outcome.succeeded() ? decision_cause::succeeded
                                    : decision_cause::failed,
                now_s);
  // A task that ran stably starts its backoff over (OTP: a child's old
  // restarts stop counting). A temporary task is never restarted.
  d.reset_retries = cfg_->restart != restart_type::temporary &&
                    outcome.duration_s >= cfg_->intensity.reset_after_s;
  auto retries = d.reset_retries ? 0 : st.retry_count;
  d.retry_count = retries;
  d.ran_s = outcome.duration_s;
  if (outcome.succeeded()) {
    if (!permanent) {
      d.step = next_step::succeed;
      d.rule = decision_rule::success;
      return d;
    }
    d.rule = decision_rule::restart;
    return retry(st, std::move(d), std::nullopt);
  }
  // A failed outcome comes with its classification; should a caller omit
  // it, judge the failure by the broadest class that still matches it.
  d.cls =
    cls ? cls->cls
        : (outcome.infrastructure_error.empty() ? error_class::retryable
                                                : error_class::infrastructure);
  d.classified = cls;
  auto act = default_action(d.cls);
  if (auto i = cfg_->actions.find(d.cls); i != cfg_->actions.end())
    act = i->second;
  if (d.cls == error_class::not_now && act == action::retry) {
    // Nothing ran, or nothing could: not a failure to retry or restart,
    // whatever the restart type. The task machine says when to try again.
    d.step = next_step::wait_not_now;
    d.rule = decision_rule::not_now;
    return d;
  }
  if (cfg_->restart == restart_type::temporary) {
    d.step = next_step::fail;
    d.rule = decision_rule::temporary_task;
    return d;
  }
  if (d.cls == error_class::quota_exhausted && act != action::fail) {
    // The agent said when its quota resets (capped), else the policy's
    // guess; either way the wait or the fallback spends no retry.
    auto wait = cls && cls->retry_after_s && std::isfinite(*cls->retry_after_s)
                  ? std::clamp(*cls->retry_after_s, 0.0, max_quota_wait_s)
                  : cfg_->quota_wait_s;
    auto out = on_quota(st, decision_cause::failed, now_s + wait, now_s);
    out.cls = d.cls;
    out.classified = std::move(d.classified);
    out.reset_retries = d.reset_retries;
    out.retry_count = d.retry_count;
    return out;
  }
  switch (act) {
    case action::fail:
      if (d.cls == error_class::fatal && cfg_->fatal == fatal_scope::provider) {
        // A bad key of one provider says nothing about another's: move to
        // the next agent whose provider is known and different.
        auto i = st.agent_index;
        if (i < providers.size() && !providers[i].empty() &&
            cfg_->enable_fallback) {
          for (auto j = i + 1; j < std::min(providers.size(), st.chain_size);
               ++j) {
            if (providers[j].empty() || providers[j] == providers[i])
              continue;
            d.rule = decision_rule::fatal_provider;
            d.agent_id = providers[i];
            if (!may_start(st)) {
              d.step = next_step::fail;
              d.limit = decision_limit::max_total_attempts;
              return d;
            }
            d.step = next_step::switch_agent;
            d.agent_index = j;
            d.retry_count = 0;
            return d;
          }
        }
      }
      d.step = next_step::fail;
      d.rule = decision_rule::action_fail;
      return d;
    case action::fallback:
      d.rule = decision_rule::action_fallback;
      return fall_back(st, std::move(d));
    case action::retry:
      break;
  }
  if (d.cls == error_class::container_crash &&
      st.crash_restarts >= cfg_->max_crash_restarts) {
    d.rule = decision_rule::crash_restarts_exhausted;
    d.count = st.crash_restarts;
    d.count_max = cfg_->max_crash_restarts;
    return fall_back(st, std::move(d));
  }
  if (retries >= cfg_->max_retries_per_agent) {
    d.rule = decision_rule::retries_exhausted;
    d.count = retries;
    d.count_max = cfg_->max_retries_per_agent;
    return fall_back(st, std::move(d));
  }
  d.rule = decision_rule::retry;
  auto c = d.cls;
  return retry(st, std::move(d), c);
}

decision supervision_policy::on_quota(const supervision_state& st,
                                      decision_cause cause, double resume_at_s,
                                      double now_s, std::string account) const {
  auto d = make(st, cause, now_s);
  d.cls = error_class::quota_exhausted;
  d.agent_id = std::move(account);
  d.resume_at_s = resume_at_s;
  if (waits_for_quota(st)) {
    d.rule = decision_rule::quota_wait;
    d.step = next_step::wait_quota;
    return d;
  }
  d.rule = decision_rule::quota_fallback;
  return fall_back(st, std::move(d));
}

bool supervision_policy::waits_for_quota(
  const supervision_state& st) const noexcept {
  if (cfg_->on_quota)
    return *cfg_->on_quota == quota_action::wait;
  return !(cfg_->enable_fallback && has_next_agent(st));
}

decision
supervision_policy::on_retry_denied(const supervision_state& st) const {
  auto d = make(st, decision_cause::retry_budget_exhausted, 0);
  d.rule = decision_rule::skip;
  return fall_back(st, std::move(d));
}

decision supervision_policy::skip_agent(const supervision_state& st,
                                        decision_cause cause,
                                        std::string agent_id) const {
  auto d = make(st, cause, 0);
  d.rule = decision_rule::skip;
  d.agent_id = std::move(agent_id);
  if (!has_next_agent(st)) {
    d.step = next_step::fail;
    d.limit = decision_limit::chain_end;
    return d;
  }
  return switch_to_next(st, std::move(d));
}

decision supervision_policy::fall_back(const supervision_state& st,
                                       decision d) const {
  d.step = next_step::fail;
  if (!cfg_->enable_fallback) {
    d.limit = decision_limit::fallback_disabled;
    return d;
  }
  if (!has_next_agent(st)) {
    d.limit = decision_limit::no_agent_left;
    return d;
  }
  return switch_to_next(st, std::move(d));
}

decision supervision_policy::switch_to_next(const supervision_state& st,
                                            decision d) const {
  if (!may_start(st)) {
    d.step = next_step::fail;
    d.limit = decision_limit::max_total_attempts;
    return d;
  }
  d.step = next_step::switch_agent;
  d.agent_index = st.agent_index + 1;
  d.retry_count = 0;
  return d;
}

decision supervision_policy::retry(const supervision_state& st, decision d,
                                   std::optional<error_class> cls) const {
  if (!may_start(st)) {
    d.step = next_step::fail;
    d.limit = decision_limit::max_total_attempts;
    return d;
  }
  if (cfg_->restart == restart_type::permanent) {
    if (!st.restarts.allows(d.at_s)) {
      d.step = next_step::fail;
      d.limit = decision_limit::restart_intensity;
      return d;
    }
    d.restarts = st.restarts.count(d.at_s) + 1;
  }
  d.step = next_step::retry;
  d.backoff_class = cls;
  if (cls)
    ++d.retry_count;
  return d;
}

void supervision_policy::apply(supervision_state& st, const decision& d) const {
  switch (d.step) {
    case next_step::succeed:
    case next_step::fail:
    case next_step::wait_quota:
    case next_step::wait_not_now:
      return;
    case next_step::switch_agent:
      st.agent_index = d.agent_index;
      ++st.fallback_count;
      st.retry_count = 0;
      st.retries_by_class.clear();
      return;
    case next_step::retry:
      st.retry_count = d.retry_count;
      if (d.reset_retries)
        st.retries_by_class.clear();
      if (d.backoff_class) {
        auto c = static_cast<std::size_t>(*d.backoff_class);
        if (st.retries_by_class.size() <= c)
          st.retries_by_class.resize(std::max(all_error_classes.size(), c + 1));
        ++st.retries_by_class[c];
        ++st.total_retries;
        if (st.retries_by_agent.size() < st.chain_size)
          st.retries_by_agent.resize(st.chain_size);
        ++st.retries_by_agent[st.agent_index];
        if (*d.backoff_class == error_class::container_crash)
          ++st.crash_restarts;
      }
      if (cfg_->restart == restart_type::permanent)
        st.restarts.try_restart(d.at_s);
      return;
  }
}

} // namespace tasksup

#include "tasksup/supervisor/supervision_policy.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>

namespace tasksup {

namespace {

constexpr std::string_view step_names[] = {"succeed", "retry", "switch_agent",
                                           "fail"};

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
std::string describe(error_class cls, const std::optional<classification>& c) {
  std::string out{to_string(cls)};
  out += " failure";
  if (!c)
    return out;
  out += " (rule \"";
  out += c->rule;
  out += '"';
  if (!c->line.empty()) {
    out += ", line \"";
    if (c->line.size() > max_quoted_line) {
      out.append(c->line, 0, max_quoted_line);
      out += "...";
    } else {
      out += c->line;
    }
    out += '"';
  }
  out += ')';
  return out;
}

decision make(next_step step, std::string reason, std::size_t agent_index) {
  decision d;
  d.step = step;
  d.reason = std::move(reason);
  d.agent_index = agent_index;
  return d;
}

} // namespace

std::string_view to_string(next_step x) noexcept {
  // A value outside the enum (a corrupt message) must not index past the
  // table.
  auto i = static_cast<std::size_t>(x);
  return i < std::size(step_names) ? step_names[i]
                                   : std::string_view{"unknown"};
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

std::optional<std::string>
supervision_policy::start_attempt(supervision_state& st) const {
  if (st.total_attempts >= cfg_->max_total_attempts)
    return "max_total_attempts (" + num(cfg_->max_total_attempts) + ") reached";
  ++st.total_attempts;
  // The retry (if any) is happening now; it can no longer be taken back.
  st.pending.reset();
  return std::nullopt;
}

decision supervision_policy::on_exit(supervision_state& st,
                                     const attempt_outcome& outcome,
                                     const std::optional<classification>& cls,
                                     double now_s) const {
  st.pending.reset();
  auto permanent = cfg_->restart == restart_type::permanent;
  // A permanent task that ran stably starts its backoff over.
  if (permanent && outcome.duration_s >= cfg_->intensity.reset_after_s)
    st.retry_count = 0;
  if (outcome.succeeded()) {
    if (!permanent)
      return make(next_step::succeed, "attempt succeeded (exit 0)",
                  st.agent_index);
    return retry(st, std::nullopt, "permanent task exited 0", now_s);
  }
  // A failed outcome comes with its classification; should a caller omit
  // it, judge the failure by the broadest class that still matches it.
  auto c =
    cls ? cls->cls
        : (outcome.infrastructure_error.empty() ? error_class::retryable
                                                : error_class::infrastructure);
  auto what = describe(c, cls);
  if (cfg_->restart == restart_type::temporary)
    return make(next_step::fail, what + ": temporary task, not restarted",
                st.agent_index);
  auto act = default_action(c);
  if (auto i = cfg_->actions.find(c); i != cfg_->actions.end())
    act = i->second;
  switch (act) {
    case action::fail:
      return make(next_step::fail,
                  what + ": action fail, no retry and no fallback",
                  st.agent_index);
    case action::fallback:
      return fall_back(st, what + ": action fallback");
    case action::retry:
      break;
  }
  if (c == error_class::container_crash &&
      st.crash_restarts >= cfg_->max_crash_restarts)
    return fall_back(st, what + ": container crash restarts exhausted (" +
                           num(st.crash_restarts) + "/" +
                           num(cfg_->max_crash_restarts) + ")");
  if (st.retry_count >= cfg_->max_retries_per_agent)
    return fall_back(st, what + ": retries exhausted (" + num(st.retry_count) +
                           "/" + num(cfg_->max_retries_per_agent) + ")");
  return retry(st, c, what, now_s);
}

decision supervision_policy::on_retry_denied(supervision_state& st) const {
  undo_pending(st);
  return fall_back(st, "retry budget exhausted");
}

decision supervision_policy::skip_agent(supervision_state& st,
                                        std::string_view reason) const {
  undo_pending(st);
  std::string why{reason};
  if (st.agent_index + 1 >= st.chain_size)
    return make(next_step::fail, why + "; no agent left in the chain",
                st.agent_index);
  return switch_to_next(st, std::move(why));
}

decision supervision_policy::fall_back(supervision_state& st,
                                       std::string why) const {
  if (!cfg_->enable_fallback)
    return make(next_step::fail, why + "; fallback is disabled",
                st.agent_index);
  if (st.agent_index + 1 >= st.chain_size)
    return make(next_step::fail, why + "; no agent left to fall back to",
                st.agent_index);
  return switch_to_next(st, std::move(why));
}

decision supervision_policy::switch_to_next(supervision_state& st,
                                            std::string why) const {
  if (auto fail = attempts_exhausted(st, why))
    return std::move(*fail);
  ++st.agent_index;
  ++st.fallback_count;
  st.retry_count = 0;
  return make(next_step::switch_agent,
              why + "; switching to agent " +
                std::to_string(st.agent_index + 1) + " of " +
                std::to_string(st.chain_size),
              st.agent_index);
}

decision supervision_policy::retry(supervision_state& st,
                                   std::optional<error_class> cls,
                                   std::string why, double now_s) const {
  if (auto fail = attempts_exhausted(st, why))
    return std::move(*fail);
  supervision_state::pending_retry pending;
  if (cfg_->restart == restart_type::permanent) {
    if (!st.restarts.try_restart(now_s))
      return make(next_step::fail,
                  why + "; restart intensity exceeded (" +
                    num(st.restarts.max_restarts()) + " restarts in " +
                    num(st.restarts.period_s()) + " s)",
                  st.agent_index);
    pending.restart_recorded = true;
  }
  decision d;
  d.step = next_step::retry;
  d.agent_index = st.agent_index;
  d.backoff_class = cls;
  if (cls) {
    ++st.retry_count;
    ++st.total_retries;
    pending.counted = true;
    if (*cls == error_class::container_crash) {
      ++st.crash_restarts;
      pending.crash = true;
    }
    d.reason = why + ": retrying (" + num(st.retry_count) + "/" +
               num(cfg_->max_retries_per_agent) + ")";
  } else {
    d.reason = why + ": restarting (restart " +
               std::to_string(st.restarts.count(now_s)) + "/" +
               num(st.restarts.max_restarts()) + " within " +
               num(st.restarts.period_s()) + " s)";
  }
  d.retry_count = st.retry_count;
  st.pending = pending;
  return d;
}

std::optional<decision>
supervision_policy::attempts_exhausted(const supervision_state& st,
                                       std::string_view why) const {
  if (st.total_attempts < cfg_->max_total_attempts)
    return std::nullopt;
  std::string reason{why};
  reason += "; max_total_attempts (";
  reason += num(cfg_->max_total_attempts);
  reason += ") reached";
  return make(next_step::fail, std::move(reason), st.agent_index);
}

void supervision_policy::undo_pending(supervision_state& st) {
  if (!st.pending)
    return;
  if (st.pending->counted) {
    --st.retry_count;
    --st.total_retries;
  }
  if (st.pending->crash)
    --st.crash_restarts;
  if (st.pending->restart_recorded)
    st.restarts.undo_last();
  st.pending.reset();
}

} // namespace tasksup

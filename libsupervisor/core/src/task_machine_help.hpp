#pragma once

// Small helpers the task machine's files share (task_machine.cpp: the
// inputs; task_machine_steps.cpp: the steps they take). Private to the core.

#include "tasksup/supervisor/task_machine.hpp"

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace tasksup::detail::machine {

inline std::string seconds_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

inline std::string_view stop_name(stop_request mode) {
  return mode == stop_request::kill ? "kill" : "cancel";
}

/// How an attempt ended, without what it printed or left behind: what its
/// event and its judging need.
inline attempt_outcome exit_facts(const attempt_outcome& o) {
  attempt_outcome out;
  out.exit_code = o.exit_code;
  out.signal = o.signal;
  out.oom_killed = o.oom_killed;
  out.duration_s = o.duration_s;
  out.infrastructure_error = o.infrastructure_error;
  out.started = o.started;
  out.retry_futile = o.retry_futile;
  // What the attempt used, for its `attempt_exited` event.
  if (o.structured && (o.structured->usage || o.structured->cost_usd)) {
    structured_result used;
    used.usage = o.structured->usage;
    used.cost_usd = o.structured->cost_usd;
    out.structured = std::move(used);
  }
  return out;
}

inline std::string_view request_name(request_kind x) {
  switch (x) {
    case request_kind::permission:
      return "no attempt slot";
    case request_kind::classify:
      return "classifier unavailable";
    case request_kind::delay:
      return "backoff unavailable";
    case request_kind::rules:
      return "invalid classifier rules";
  }
  return "request failed";
}

/// Gives the task's slot back, or takes it out of the queue when `queued`
/// (its permission is still pending): one release either way.
inline void give_back_slot(task_machine_state& st, bool queued,
                           machine_effects& out) {
  if (st.holds_slot || queued)
    out.emplace_back(effect::release_slot{});
  st.holds_slot = false;
}

} // namespace tasksup::detail::machine

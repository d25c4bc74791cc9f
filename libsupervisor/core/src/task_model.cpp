#include "tasksup/supervisor/task_model.hpp"

namespace tasksup {

// Each switch names every enumerator and has no default, so the compiler
// names each place a new value must be handled; a value outside the enum
// (loading from the wire rejects those) reads "unknown".

std::string_view to_string(stop_mode x) noexcept {
  switch (x) {
    case stop_mode::cancel:
      return "cancel";
    case stop_mode::kill:
      return "kill";
  }
  return "unknown";
}

std::optional<stop_mode> parse_stop_mode(std::string_view str) noexcept {
  for (auto x : {stop_mode::cancel, stop_mode::kill})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

std::string_view to_string(task_state x) noexcept {
  switch (x) {
    case task_state::queued:
      return "queued";
    case task_state::running:
      return "running";
    case task_state::backoff:
      return "backoff";
    case task_state::done:
      return "done";
    case task_state::paused:
      return "paused";
    case task_state::quota_wait:
      return "quota_wait";
    case task_state::not_now:
      return "not_now";
  }
  return "unknown";
}

std::string_view to_string(task_outcome x) noexcept {
  switch (x) {
    case task_outcome::succeeded:
      return "succeeded";
    case task_outcome::failed:
      return "failed";
    case task_outcome::stopped:
      return "stopped";
  }
  return "unknown";
}

std::string_view to_string(event_kind x) noexcept {
  switch (x) {
    case event_kind::task_submitted:
      return "task_submitted";
    case event_kind::attempt_started:
      return "attempt_started";
    case event_kind::log:
      return "log";
    case event_kind::attempt_exited:
      return "attempt_exited";
    case event_kind::classified:
      return "classified";
    case event_kind::retry_scheduled:
      return "retry_scheduled";
    case event_kind::agent_switched:
      return "agent_switched";
    case event_kind::user_stop:
      return "user_stop";
    case event_kind::task_done:
      return "task_done";
    case event_kind::escalated:
      return "escalated";
    case event_kind::warning:
      return "warning";
    case event_kind::step:
      return "step";
    case event_kind::group:
      return "group";
  }
  return "unknown";
}

std::string_view to_string(end_reason x) noexcept {
  switch (x) {
    case end_reason::unknown:
      return "unknown";
    case end_reason::succeeded:
      return "succeeded";
    case end_reason::policy_failed:
      return "policy_failed";
    case end_reason::attempts_exhausted:
      return "attempts_exhausted";
    case end_reason::user_stop:
      return "user_stop";
    case end_reason::deadline:
      return "deadline";
    case end_reason::request_failed:
      return "request_failed";
    case end_reason::start_refused:
      return "start_refused";
    case end_reason::voluntary:
      return "voluntary";
    case end_reason::delivery_failed:
      return "delivery_failed";
    case end_reason::node_lost:
      return "node_lost";
    case end_reason::supervisor_died:
      return "supervisor_died";
    case end_reason::runtime_missing:
      return "runtime_missing";
  }
  return "unknown";
}

} // namespace tasksup

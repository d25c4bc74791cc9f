#include "tasksup/actors/protocol.hpp"

#include <caf/message.hpp>

#include <cstddef>
#include <utility>

namespace tasksup {

namespace {

constexpr std::string_view stop_mode_names[] = {"cancel", "kill"};

constexpr std::string_view task_state_names[] = {"queued", "running", "backoff",
                                                 "done"};

constexpr std::string_view task_outcome_names[] = {"succeeded", "failed",
                                                   "stopped"};

constexpr std::string_view event_kind_names[] = {
  "task_submitted", "attempt_started", "log",
  "attempt_exited", "classified",      "retry_scheduled",
  "agent_switched", "user_stop",       "task_done",
  "escalated",      "warning",
};

constexpr std::string_view protocol_error_names[] = {
  "none",         "invalid_task",    "duplicate_task",
  "unknown_task", "unknown_runtime", "invalid_rules",
};

} // namespace

std::string_view to_string(stop_mode x) noexcept {
  return stop_mode_names[static_cast<std::size_t>(x)];
}

std::optional<stop_mode> parse_stop_mode(std::string_view str) noexcept {
  for (auto x : {stop_mode::cancel, stop_mode::kill})
    if (to_string(x) == str)
      return x;
  return std::nullopt;
}

std::string_view to_string(task_state x) noexcept {
  return task_state_names[static_cast<std::size_t>(x)];
}

std::string_view to_string(task_outcome x) noexcept {
  return task_outcome_names[static_cast<std::size_t>(x)];
}

std::string_view to_string(event_kind x) noexcept {
  return event_kind_names[static_cast<std::size_t>(x)];
}

std::string_view to_string(protocol_error x) noexcept {
  auto i = static_cast<std::size_t>(x);
  return i < std::size(protocol_error_names) ? protocol_error_names[i]
                                             : "unknown";
}

caf::error make_error(protocol_error code, std::string what) {
  return caf::error{static_cast<std::uint8_t>(code), protocol_error_category,
                    caf::make_message(std::move(what))};
}

std::string error_text(const caf::error& err) {
  if (err.category() == protocol_error_category) {
    auto& ctx = err.context();
    if (ctx.match_elements<std::string>())
      return ctx.get_as<std::string>(0);
    return std::string{to_string(static_cast<protocol_error>(err.code()))};
  }
  return caf::to_string(err);
}

void register_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<agent_spec>("tasksup::agent_spec")
    .add_message_type<task_spec>("tasksup::task_spec")
    .add_message_type<classifier_rule>("tasksup::classifier_rule")
    .add_message_type<classification>("tasksup::classification")
    .add_message_type<attempt_outcome>("tasksup::attempt_outcome")
    .add_message_type<stop_mode>("tasksup::stop_mode")
    .add_message_type<task_result>("tasksup::task_result")
    .add_message_type<task_status>("tasksup::task_status")
    .add_message_type<std::vector<task_status>>(
      "std::vector<tasksup::task_status>")
    .add_message_type<std::vector<classifier_rule>>(
      "std::vector<tasksup::classifier_rule>")
    .add_message_type<event>("tasksup::event")
    .add_message_type<std::vector<event>>("std::vector<tasksup::event>")
    .add_message_type<attempt_report>("tasksup::attempt_report")
    .add_message_type<classify_request>("tasksup::classify_request")
    .add_message_type<delay_request>("tasksup::delay_request")
    .add_message_type<delay_decision>("tasksup::delay_decision")
    .add_message_type<permit_request>("tasksup::permit_request")
    .add_message_type<permit_reply>("tasksup::permit_reply");
  cfg.add_error_category(
    protocol_error_category,
    [](std::uint8_t code, caf::atom_value, const caf::message& ctx) {
      std::string out = "tasksup::";
      out += to_string(static_cast<protocol_error>(code));
      if (ctx.match_elements<std::string>()) {
        out += ": ";
        out += ctx.get_as<std::string>(0);
      }
      return out;
    });
}

} // namespace tasksup

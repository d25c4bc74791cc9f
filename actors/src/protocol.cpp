#include "tasksup/actors/protocol.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/schedule_actor.hpp"

#include <caf/deserializer.hpp>
#include <caf/detail/type_erased_value_impl.hpp>
#include <caf/message.hpp>

#include <cstddef>
#include <typeindex>
#include <utility>

namespace tasksup {

namespace {

constexpr std::string_view protocol_error_names[] = {
  "none",           "invalid_task",    "duplicate_task",
  "unknown_task",   "unknown_runtime", "invalid_rules",
  "journal_failed", "limit_reached",   "await_timeout",
  "not_leader",
};

/// A message element of enum type `E` whose load rejects values outside
/// the enum: CAF loads a top-level enum element (e.g. the `stop_mode` of
/// `(stop, task_id, stop_mode)`) with its plain integer conversion, which
/// no `inspect` overload can intercept, so the node registers this value
/// type for it instead.
template<class E>
class checked_enum_value : public caf::detail::type_erased_value_impl<E> {
public:
  using super = caf::detail::type_erased_value_impl<E>;

  using super::super;

  caf::error load(caf::deserializer& source) override {
    auto& x = *static_cast<E*>(this->get_mutable());
    auto wrapped = detail::checked(x, "message element");
    return source(wrapped);
  }

  caf::type_erased_value_ptr copy() const override {
    return caf::type_erased_value_ptr{
      new checked_enum_value(*static_cast<const E*>(this->get()))};
  }
};

/// Registers `E` under `name` with a checked load.
template<class E>
void add_checked_enum(caf::actor_system_config& cfg, const std::string& name) {
  cfg.add_message_type<E>(name);
  auto factory = []() -> caf::type_erased_value_ptr {
    return caf::type_erased_value_ptr{new checked_enum_value<E>()};
  };
  cfg.value_factories_by_name[name] = factory;
  cfg.value_factories_by_rtti[std::type_index(typeid(E))] = factory;
}

// The wire's bounds (protocol.hpp) cover every enumerator of the model's
// enums (task_model.hpp): the last one is the bound minus one.
static_assert(detail::enum_size<stop_mode>::value ==
              static_cast<std::size_t>(stop_mode::kill) + 1);
static_assert(detail::enum_size<task_state>::value ==
              static_cast<std::size_t>(task_state::not_now) + 1);
static_assert(detail::enum_size<task_outcome>::value ==
              static_cast<std::size_t>(task_outcome::stopped) + 1);
static_assert(detail::enum_size<event_kind>::value ==
              static_cast<std::size_t>(event_kind::group) + 1);
static_assert(detail::enum_size<member_phase>::value ==
              static_cast<std::size_t>(member_phase::skipped) + 1);
static_assert(detail::enum_size<member_end>::value ==
              static_cast<std::size_t>(member_end::stopped) + 1);
static_assert(detail::enum_size<group_strategy>::value ==
              static_cast<std::size_t>(group_strategy::race) + 1);
static_assert(detail::enum_size<schedule_op>::value ==
              static_cast<std::size_t>(schedule_op::remove) + 1);
static_assert(detail::enum_size<end_reason>::value ==
              static_cast<std::size_t>(end_reason::runtime_missing) + 1);

constexpr std::string_view task_control_names[] = {
  "stop", "kill", "retry-now", "fallback-now", "forget", "pause", "resume",
};

static_assert(std::size(task_control_names) ==
              detail::enum_size<task_control>::value);
static_assert(detail::enum_size<task_control>::value ==
              static_cast<std::size_t>(task_control::resume) + 1);

} // namespace

std::string_view to_string(task_control x) noexcept {
  auto i = static_cast<std::size_t>(x);
  return i < std::size(task_control_names) ? task_control_names[i] : "unknown";
}

std::optional<task_control> task_control_named(std::string_view name) {
  for (std::size_t i = 0; i < std::size(task_control_names); ++i)
    if (name == task_control_names[i])
      return static_cast<task_control>(i);
  return std::nullopt;
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
    .add_message_type<task_result>("tasksup::task_result")
    .add_message_type<task_status>("tasksup::task_status")
    .add_message_type<std::vector<task_status>>(
      "std::vector<tasksup::task_status>")
    .add_message_type<status_query>("tasksup::status_query")
    .add_message_type<status_page>("tasksup::status_page")
    .add_message_type<std::vector<classifier_rule>>(
      "std::vector<tasksup::classifier_rule>")
    .add_message_type<event>("tasksup::event")
    .add_message_type<std::vector<event>>("std::vector<tasksup::event>")
    .add_message_type<attempt_report>("tasksup::attempt_report")
    .add_message_type<classify_request>("tasksup::classify_request")
    .add_message_type<delay_request>("tasksup::delay_request")
    .add_message_type<delay_decision>("tasksup::delay_decision")
    .add_message_type<permit_request>("tasksup::permit_request")
    .add_message_type<permit_reply>("tasksup::permit_reply")
    .add_message_type<node_health>("tasksup::node_health")
    .add_message_type<node_offer>("tasksup::node_offer")
    .add_message_type<node_info>("tasksup::node_info")
    .add_message_type<std::vector<node_info>>("std::vector<tasksup::node_info>")
    .add_message_type<schedule_request>("tasksup::schedule_request")
    .add_message_type<schedule_info>("tasksup::schedule_info")
    .add_message_type<std::vector<schedule_info>>(
      "std::vector<tasksup::schedule_info>")
    .add_message_type<attempt_options>("tasksup::attempt_options")
    .add_message_type<remote_attempt>("tasksup::remote_attempt")
    .add_message_type<control_request>("tasksup::control_request")
    // The handles that cross to other nodes, by interface.
    .add_message_type<node_agent_actor>("tasksup::node_agent_actor")
    .add_message_type<subscriber_actor>("tasksup::subscriber_actor")
    .add_message_type<attempt_owner_actor>("tasksup::attempt_owner_actor")
    .add_message_type<container_worker_actor>(
      "tasksup::container_worker_actor");
  add_checked_enum<stop_mode>(cfg, "tasksup::stop_mode");
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

namespace tasksup {

bool status_query::admits(const task_status& s) const {
  if (states != 0 && (states & (1u << static_cast<unsigned>(s.state))) == 0)
    return false;
  if (outcomes != 0 &&
      (!s.result ||
       (outcomes & (1u << static_cast<unsigned>(s.result->outcome))) == 0))
    return false;
  return agent.empty() || s.agent_id == agent;
}

bool status_query::admits_unfinished() const {
  auto done = 1u << static_cast<unsigned>(task_state::done);
  return outcomes == 0 && (states == 0 || (states & ~done) != 0);
}

bool status_query::needs_unfinished_status() const {
  return admits_unfinished() && (states != 0 || !agent.empty());
}

} // namespace tasksup

// libFuzzer harness for the wire protocol: the first input byte picks a
// message type, the rest is loaded with CAF's binary deserializer exactly as
// a node loads a remote message. A load must either fail or produce a value
// inside every wire limit (enums in range, lists and strings bounded), and a
// loaded task then goes through the task validator. Invariants are checked
// with abort() so the fuzzer reports them as crashes.

#include "tasksup/actors/protocol.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/wire_limits.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/message.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

using namespace tasksup;

namespace {

void require(bool condition) {
  if (!condition)
    std::abort();
}

/// The harness's actor system, never destroyed: libFuzzer ends the process
/// with exit(), and CAF 0.17's actor system cannot be torn down from an
/// exit handler (its destructor then touches state already gone).
caf::actor_system& fuzz_system() {
  static auto* sys = [] {
    auto* cfg = new caf::actor_system_config;
    register_protocol(*cfg);
    return new caf::actor_system{*cfg};
  }();
  return *sys;
}

template<class E>
void require_enum(E x) {
  require(detail::valid_enum_value(x));
}

void require_backoff(const backoff_spec& x) {
  require_enum(x.kind);
  require_enum(x.jit);
  require(x.table_s.size() <= wire::max_list_entries);
}

void require_supervisor(const supervisor_config& x) {
  require_enum(x.restart);
  for (auto& [cls, act] : x.actions) {
    require_enum(cls);
    require_enum(act);
  }
  for (auto& [cls, spec] : x.backoff) {
    require_enum(cls);
    require_backoff(spec);
  }
}

void require_overrides(const supervisor_overrides& x) {
  if (x.restart)
    require_enum(*x.restart);
  if (x.fatal)
    require_enum(*x.fatal);
  for (auto& [cls, act] : x.actions) {
    require_enum(cls);
    require_enum(act);
  }
  for (auto& [cls, spec] : x.backoff) {
    require_enum(cls);
    require_backoff(spec);
  }
  if (x.restart_backoff)
    require_backoff(*x.restart_backoff);
}

void require_task(const task_spec& t) {
  require(t.id.size() <= wire::max_id_bytes);
  require(t.prompt.size() <= wire::max_prompt_bytes);
  require(t.env.size() <= wire::max_list_entries);
  require(t.mounts.size() <= wire::max_list_entries);
  require_overrides(t.supervisor);
  require_supervisor(t.settings);
  if (t.selection) {
    require_enum(t.selection->mode);
    require(t.selection->agents.size() <= wire::max_list_entries);
  }
  if (t.classifier_rules) {
    require(t.classifier_rules->size() <= wire::max_list_entries);
    for (auto& r : *t.classifier_rules)
      require_enum(r.cls);
  }
  // The validator must judge any loaded task without crashing; its verdict
  // is free.
  (void)validate_task(t, "fuzz input");
}

template<class T, class Check>
void load(const std::uint8_t* data, std::size_t size, Check check) {
  T x;
  caf::binary_deserializer source{fuzz_system(),
                                  reinterpret_cast<const char*>(data), size};
  if (!source(x))
    check(x);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0)
    return 0;
  auto kind = data[0];
  ++data;
  --size;
  switch (kind % 13) {
    case 0:
      load<task_spec>(data, size, require_task);
      break;
    case 1:
      load<task_status>(data, size, [](const task_status& x) {
        require_enum(x.state);
        if (x.result)
          require_enum(x.result->outcome);
      });
      break;
    case 2:
      load<task_result>(data, size,
                        [](const task_result& x) { require_enum(x.outcome); });
      break;
    case 3:
      load<event>(data, size, [](const event& x) { require_enum(x.kind); });
      break;
    case 4:
      load<attempt_report>(data, size, [](const attempt_report& x) {
        require(x.outcome.tail.size() <= wire::max_list_entries);
      });
      break;
    case 5:
      load<classify_request>(data, size, [](const classify_request& x) {
        require(x.task_id.size() <= wire::max_id_bytes);
      });
      break;
    case 6:
      load<delay_request>(
        data, size, [](const delay_request& x) { require_backoff(x.spec); });
      break;
    case 9:
      load<delay_decision>(
        data, size, [](const delay_decision& x) { require_enum(x.source); });
      break;
    case 10:
      load<permit_request>(data, size, [](const permit_request& x) {
        require(x.task_id.size() <= wire::max_id_bytes);
        require(x.agent_id.size() <= wire::max_id_bytes);
      });
      break;
    case 11:
      load<schedule_request>(data, size, [](const schedule_request& x) {
        require_enum(x.op);
        require(x.name.size() <= wire::max_id_bytes);
        require(x.document.size() <= wire::max_task_json_bytes);
      });
      break;
    case 12:
      load<schedule_info>(data, size, [](const schedule_info& x) {
        require(x.name.size() <= wire::max_id_bytes);
        require(x.running.size() <= wire::max_id_bytes);
        require(std::isfinite(x.next_s) && std::isfinite(x.last_s));
      });
      break;
    case 7:
      load<classification>(
        data, size, [](const classification& x) { require_enum(x.cls); });
      break;
    case 8:
      // A whole message, as the node's middleman loads one: type names,
      // then each element through the registered types.
      load<caf::message>(data, size, [](const caf::message& msg) {
        if (msg.match_elements<caf::atom_value, std::string, stop_mode>())
          require_enum(msg.get_as<stop_mode>(2));
        if (msg.match_elements<caf::atom_value, task_spec>())
          require_task(msg.get_as<task_spec>(1));
        if (msg.match_elements<caf::atom_value, schedule_request>())
          require_enum(msg.get_as<schedule_request>(1).op);
      });
      break;
  }
  return 0;
}

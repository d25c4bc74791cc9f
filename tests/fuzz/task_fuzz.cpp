// libFuzzer harness for task and config parsing: arbitrary bytes go through
// the JSON reader (duplicate keys, depth, syntax) and, when they are JSON,
// through every config parser and the one way in for tasks. Invariants a
// user relies on are checked with abort() so the fuzzer reports them as
// crashes:
// - a task that parses and resolves passes validate_task, and resolving it
//   again changes nothing (the node resolves what `run` already resolved);
// - every error names its source and stays short enough to read;
// - a group that parses has unique ids, only significant members OTP
//   allows, and its machine, driven through starts, failures and a stop,
//   ends with every member stopped and hands out a bounded number of
//   operations.

#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/group_spec.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

using namespace tasksup;

namespace {

void require(bool condition) {
  if (!condition)
    std::abort();
}

/// A node config with a `team` environment and a `default` one, so that
/// tasks exercise every merge rule.
const config_set& fuzz_config() {
  static const config_set instance = [] {
    auto cfg = builtin_config();
    auto team_doc = parse_json_text(R"({
      "agents": [{"agent_id": "e1", "agent_cli": "codex"},
                 {"agent_id": "e2", "agent_cli": "claude"}],
      "agent_fallbacks": {"e1": "e2"},
      "selection_mode": "round-robin",
      "supervisor": {"max_total_attempts": 7, "deadline_s": 600,
                     "actions": {"fatal": "fallback"}},
      "classifier": {"rules": [{"id": "r", "class": "fatal",
                                "exit_codes": [3]}]}})",
                                    "team");
    require(team_doc.has_value());
    auto team = parse_environment(*team_doc, "team.json", "team");
    require(team.has_value());
    cfg.environments.emplace("team", std::move(*team));
    auto def_doc = parse_json_text(
      R"({"agents": [{"agent_id": "d", "agent_cli": "gemini"}]})", "default");
    require(def_doc.has_value());
    auto def = parse_environment(*def_doc, "default.json", "default");
    require(def.has_value());
    cfg.environments.emplace("default", std::move(*def));
    return cfg;
  }();
  return instance;
}

/// Errors name where they come from and fit a terminal line or three.
template<class T>
void check_error(const expected<T>& res) {
  if (res)
    return;
  require(res.error().where == "fuzz.json");
  require(res.error().to_string().size() < 2000);
}

bool same(const task_spec& a, const task_spec& b) {
  bool selection =
    a.selection.has_value() == b.selection.has_value() &&
    (!a.selection ||
     (a.selection->agents == b.selection->agents &&
      a.selection->agent_fallbacks == b.selection->agent_fallbacks &&
      a.selection->mode == b.selection->mode));
  return a.id == b.id && a.prompt == b.prompt &&
         a.environment == b.environment && selection &&
         same_overrides(a.supervisor, b.supervisor) &&
         same_settings(a.settings, b.settings) &&
         a.classifier_rules.has_value() == b.classifier_rules.has_value() &&
         a.runtime == b.runtime && a.image == b.image && a.env == b.env &&
         a.mounts.size() == b.mounts.size() && a.workdir == b.workdir &&
         a.memory_limit_mb == b.memory_limit_mb;
}

/// Checks what a parsed group promises, and drives its machine.
void check_group(const group_spec& g) {
  auto ids = tree_ids(g);
  require(std::set<std::string>(ids.begin(), ids.end()).size() == ids.size());
  for (const auto& m : g.members) {
    require(m.task.has_value() != (m.group != nullptr));
    if (m.significant)
      require(g.shutdown != auto_shutdown::never &&
              m.restart != restart_type::permanent);
    if (m.task)
      require(validate_task(*m.task, "fuzz.json").has_value());
    if (m.group)
      check_group(*m.group);
  }
  group_machine machine{g.shape()};
  double now = 0;
  std::size_t ops = 0;
  auto drain = [&] {
    while (auto op = machine.next()) {
      require(++ops < 100 * (machine.size() + 1));
      if (op->kind == group_op::start)
        machine.started(op->member, now);
      else
        machine.ended(op->member, member_end::stopped, now);
    }
  };
  machine.start(now);
  drain();
  for (std::size_t i = 0; i < machine.size() && !machine.done(); ++i) {
    now += 1;
    machine.ended(i, i % 2 == 0 ? member_end::failed : member_end::normal, now);
    drain();
  }
  machine.stop(now);
  drain();
  require(machine.done());
  for (std::size_t i = 0; i < machine.size(); ++i) {
    auto p = machine.phase(i);
    require(p != member_phase::running && p != member_phase::starting &&
            p != member_phase::stopping);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  std::string_view text{reinterpret_cast<const char*>(data), size};
  auto doc = parse_json_text(text, "fuzz.json");
  check_error(doc);
  if (!doc)
    return 0;
  const auto& cfg = fuzz_config();
  auto task = parse_task(*doc, "fuzz.json", cfg);
  check_error(task);
  if (task) {
    require(validate_task(*task, "fuzz.json").has_value());
    auto again = resolve_task(*task, cfg, "fuzz.json");
    require(again.has_value());
    require(same(*task, *again));
  }
  auto group = parse_group(*doc, "fuzz.json", cfg);
  check_error(group);
  if (group)
    check_group(*group);
  check_error(parse_supervisor_config(*doc, "fuzz.json", cfg.supervisor));
  check_error(parse_classifier_rules(*doc, "fuzz.json"));
  check_error(parse_node_config(*doc, "fuzz.json"));
  check_error(parse_environment(*doc, "fuzz.json", "fuzzed"));
  return 0;
}

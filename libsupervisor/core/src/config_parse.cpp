#include "config_parse.hpp"

#include "tasksup/supervisor/agent_profile.hpp"

#include "tasksup/supervisor/shlex.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <utility>

namespace tasksup::detail {

namespace {

/// The names of `all_error_classes`, in their order.
const std::vector<std::string_view>& class_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (auto cls : all_error_classes)
      out.push_back(to_string(cls));
    return out;
  }();
  return names;
}

error_class class_value(const reader& r, const json::value& v,
                        const std::string& path) {
  return enum_value<error_class>(r, v, path, parse_error_class, class_names());
}

/// An object key naming an error class.
error_class class_key(const reader& r, std::string_view key,
                      const std::string& path) {
  if (auto cls = parse_error_class(key))
    return *cls;
  r.fail(child(path, key), "unknown error class " + quote(key) +
                             " (expected one of " + join_quoted(class_names()) +
                             ")");
}

/// Expands a leading `~` or `~/` with $HOME; other paths are returned as
/// they are (`~user` is not expanded).
std::string expand_home(const reader& r, std::string path,
                        const std::string& ptr) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/'))
    return path;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0')
    r.fail(ptr, "cannot expand " + quote(path) + ": HOME is not set");
  return std::string{home} + path.substr(1);
}

// -- supervisor settings ------------------------------------------------------

void read_backoff_spec(const reader& r, const json::value& v,
                       const std::string& path, backoff_spec& spec) {
  const auto& obj = r.object(v, path);
  r.check_keys(
    obj, path,
    {"kind", "table_s", "initial_s", "multiplier", "max_s", "jitter"});
  if (const auto* x = obj.if_contains("kind")) {
    auto str = r.string(*x, child(path, "kind"));
    if (str == "table")
      spec.kind = backoff_spec::kind_t::table;
    else if (str == "exponential")
      spec.kind = backoff_spec::kind_t::exponential;
    else
      r.fail(child(path, "kind"),
             "expected one of \"table\", \"exponential\", got " + quote(str));
  }
  if (const auto* x = obj.if_contains("table_s")) {
    auto ptr = child(path, "table_s");
    const auto& arr = r.array(*x, ptr);
    constexpr std::size_t max_entries = 1000;
    if (arr.size() > max_entries)
      r.fail(ptr,
             "expected at most " + std::to_string(max_entries) + " entries");
    spec.table_s.clear();
    for (std::size_t i = 0; i < arr.size(); ++i)
      spec.table_s.push_back(r.seconds(arr[i], child(ptr, i)));
  }
  if (const auto* x = obj.if_contains("initial_s"))
    spec.initial_s = r.seconds(*x, child(path, "initial_s"));
  if (const auto* x = obj.if_contains("multiplier"))
    spec.multiplier =
      r.number(*x, child(path, "multiplier"), 1.0, false, 100.0);
  if (const auto* x = obj.if_contains("max_s"))
    spec.max_s = r.seconds(*x, child(path, "max_s"));
  else if (spec.kind == backoff_spec::kind_t::table && !spec.table_s.empty() &&
           obj.if_contains("table_s") != nullptr)
    // A table without an explicit cap is capped by its largest entry.
    spec.max_s = *std::max_element(spec.table_s.begin(), spec.table_s.end());
  if (const auto* x = obj.if_contains("jitter"))
    spec.jit = enum_value<jitter>(
      r, *x, child(path, "jitter"), parse_jitter,
      {"none", "full", "equal", "decorrelated", "additive", "proportional"});
  if (spec.kind == backoff_spec::kind_t::table && spec.table_s.empty())
    r.fail(path, "a \"table\" schedule needs a non-empty \"table_s\"");
  if (spec.kind == backoff_spec::kind_t::exponential &&
      spec.max_s < spec.initial_s)
    r.fail(path, "\"max_s\" must be at least \"initial_s\" for an "
                 "\"exponential\" schedule");
}

} // namespace

supervisor_overrides read_overrides(const reader& r, const json::value& v,
                                    const std::string& path,
                                    const supervisor_config* base) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"max_retries_per_agent", "enable_fallback",
                "backoff_base_seconds", "rate_limit_backoff_base",
                "max_total_attempts", "max_crash_restarts", "actions",
                "restart", "intensity", "backoff", "deadline_s", "stop_grace_s",
                "fatal_scope", "attempt_timeout_s", "done_exit_code",
                "restart_backoff", "on_quota", "quota_wait_s"});
  supervisor_overrides out;
  if (const auto* x = obj.if_contains("max_retries_per_agent"))
    out.max_retries_per_agent =
      r.int_value(*x, child(path, "max_retries_per_agent"), 0);
  if (const auto* x = obj.if_contains("enable_fallback"))
    out.enable_fallback = r.boolean(*x, child(path, "enable_fallback"));
  if (const auto* x = obj.if_contains("backoff_base_seconds"))
    out.backoff_base_seconds =
      r.seconds(*x, child(path, "backoff_base_seconds"));
  if (const auto* x = obj.if_contains("rate_limit_backoff_base"))
    out.rate_limit_backoff_base =
      r.seconds(*x, child(path, "rate_limit_backoff_base"));
  if (const auto* x = obj.if_contains("max_total_attempts"))
    out.max_total_attempts =
      r.int_value(*x, child(path, "max_total_attempts"), 1);
  if (const auto* x = obj.if_contains("max_crash_restarts"))
    out.max_crash_restarts =
      r.int_value(*x, child(path, "max_crash_restarts"), 0);
  if (const auto* x = obj.if_contains("actions")) {
    auto ptr = child(path, "actions");
    for (const auto& kv : r.object(*x, ptr)) {
      std::string_view key{kv.key().data(), kv.key().size()};
      auto cls = class_key(r, key, ptr);
      out.actions[cls] =
        enum_value<action>(r, kv.value(), child(ptr, key), parse_action,
                           {"retry", "fallback", "fail"});
    }
  }
  if (const auto* x = obj.if_contains("restart"))
    out.restart = enum_value<restart_type>(
      r, *x, child(path, "restart"), parse_restart_type,
      {"transient", "permanent", "temporary"});
  if (const auto* x = obj.if_contains("intensity")) {
    auto ptr = child(path, "intensity");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr, {"max_restarts", "period_s", "reset_after_s"});
    if (const auto* y = sub.if_contains("max_restarts"))
      out.intensity.max_restarts =
        r.int_value(*y, child(ptr, "max_restarts"), 0);
    if (const auto* y = sub.if_contains("period_s"))
      out.intensity.period_s = r.seconds(*y, child(ptr, "period_s"), true);
    if (const auto* y = sub.if_contains("reset_after_s"))
      out.intensity.reset_after_s = r.seconds(*y, child(ptr, "reset_after_s"));
  }
  if (const auto* x = obj.if_contains("backoff")) {
    auto ptr = child(path, "backoff");
    for (const auto& kv : r.object(*x, ptr)) {
      std::string_view key{kv.key().data(), kv.key().size()};
      auto cls = class_key(r, key, ptr);
      // A class already overridden in `base` keeps the fields this object
      // does not name.
      backoff_spec spec;
      if (base != nullptr)
        if (auto i = base->backoff.find(cls); i != base->backoff.end())
          spec = i->second;
      read_backoff_spec(r, kv.value(), child(ptr, key), spec);
      out.backoff[cls] = std::move(spec);
    }
  }
  // `null` clears an optional setting, whatever the layer below said.
  auto clearable_seconds = [&](const char* key, clearable<double>& field) {
    if (const auto* x = obj.if_contains(key)) {
      if (x->is_null())
        field.emplace();
      else
        field = r.seconds(*x, child(path, key), true);
    }
  };
  clearable_seconds("deadline_s", out.deadline_s);
  if (const auto* x = obj.if_contains("stop_grace_s"))
    out.stop_grace_s = r.seconds(*x, child(path, "stop_grace_s"));
  if (const auto* x = obj.if_contains("fatal_scope"))
    out.fatal =
      enum_value<fatal_scope>(r, *x, child(path, "fatal_scope"),
                              parse_fatal_scope, {"provider", "task"});
  clearable_seconds("attempt_timeout_s", out.attempt_timeout_s);
  if (const auto* x = obj.if_contains("done_exit_code")) {
    if (x->is_null())
      out.done_exit_code.emplace();
    else
      out.done_exit_code =
        r.int_value(*x, child(path, "done_exit_code"), 1, 255);
  }
  if (const auto* x = obj.if_contains("restart_backoff")) {
    auto spec =
      base != nullptr ? base->restart_backoff : default_restart_backoff();
    read_backoff_spec(r, *x, child(path, "restart_backoff"), spec);
    out.restart_backoff = std::move(spec);
  }
  if (const auto* x = obj.if_contains("on_quota")) {
    // `null` goes back to the default: fall back while another agent is left.
    if (x->is_null())
      out.on_quota.emplace();
    else
      out.on_quota =
        enum_value<quota_action>(r, *x, child(path, "on_quota"),
                                 parse_quota_action, {"wait", "fallback"});
  }
  if (const auto* x = obj.if_contains("quota_wait_s"))
    out.quota_wait_s = r.seconds(*x, child(path, "quota_wait_s"), true);
  return out;
}

void read_supervisor(const reader& r, const json::value& v,
                     const std::string& path, supervisor_config& cfg) {
  apply_overrides(cfg, read_overrides(r, v, path, &cfg));
}

namespace {

// -- classifier rules ---------------------------------------------------------

classifier_rule read_rule(const reader& r, const json::value& v,
                          const std::string& path) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"id", "class", "exit_codes", "oom_killed", "signals",
                "patterns", "window_lines", "match_all"});
  classifier_rule rule;
  rule.id =
    r.identifier(r.required(obj, path, "id"), child(path, "id"), "a rule id");
  rule.cls =
    class_value(r, r.required(obj, path, "class"), child(path, "class"));
  if (const auto* x = obj.if_contains("exit_codes")) {
    auto ptr = child(path, "exit_codes");
    const auto& arr = r.array(*x, ptr);
    for (std::size_t i = 0; i < arr.size(); ++i)
      rule.exit_codes.push_back(r.int_value(arr[i], child(ptr, i), 0, 255));
  }
  if (const auto* x = obj.if_contains("oom_killed"))
    rule.oom_killed = r.boolean(*x, child(path, "oom_killed"));
  if (const auto* x = obj.if_contains("signals")) {
    auto ptr = child(path, "signals");
    const auto& arr = r.array(*x, ptr);
    for (std::size_t i = 0; i < arr.size(); ++i)
      rule.signals.push_back(r.int_value(arr[i], child(ptr, i), 1, 64));
  }
  if (const auto* x = obj.if_contains("window_lines"))
    rule.window_lines = static_cast<std::size_t>(
      r.integer(*x, child(path, "window_lines"), 0, 1'000'000));
  if (const auto* x = obj.if_contains("match_all"))
    rule.match_all = r.boolean(*x, child(path, "match_all"));
  if (const auto* x = obj.if_contains("patterns")) {
    auto ptr = child(path, "patterns");
    const auto& arr = r.array(*x, ptr);
    for (std::size_t i = 0; i < arr.size(); ++i)
      rule.patterns.push_back(r.nonempty_string(arr[i], child(ptr, i)));
  }
  if (rule.exit_codes.empty() && !rule.oom_killed && rule.signals.empty() &&
      rule.patterns.empty())
    r.fail(path, "a rule needs at least one of \"exit_codes\", "
                 "\"oom_killed\", \"signals\", \"patterns\"");
  return rule;
}

} // namespace

std::vector<classifier_rule> read_rules(const reader& r, const json::value& v,
                                        const std::string& path) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path, {"rules"});
  auto ptr = child(path, "rules");
  const auto& arr = r.array(r.required(obj, path, "rules"), ptr);
  std::vector<classifier_rule> rules;
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    auto rule = read_rule(r, arr[i], child(ptr, i));
    auto [it, added] = seen.emplace(rule.id, i);
    if (!added)
      r.fail(child(child(ptr, i), "id"), "duplicate rule id " + quote(rule.id) +
                                           " (first at " +
                                           child(ptr, it->second) + ")");
    rules.push_back(std::move(rule));
  }
  // The classifier compiles the patterns exactly as it will use them; its
  // error path is relative to the rule array.
  if (auto compiled = classifier::make(rules); !compiled)
    r.fail(ptr + compiled.error().path, compiled.error().what);
  return rules;
}

// -- agents -------------------------------------------------------------------

agent_spec read_agent(const reader& r, const json::value& v,
                      const std::string& path) {
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"agent_id", "agent_cli", "cli_flags", "config_dir",
                "prompt_as_argument", "profile", "env_passthrough",
                "idle_timeout_s", "account"});
  agent_spec agent;
  agent.agent_id = r.identifier(r.required(obj, path, "agent_id"),
                                child(path, "agent_id"), "an agent id");
  // An agent may name a profile (agent_profile.hpp) instead of its command.
  const agent_profile* profile = nullptr;
  if (const auto* x = obj.if_contains("profile")) {
    auto name = r.nonempty_string(*x, child(path, "profile"));
    profile = find_agent_profile(name, r.profiles());
    if (profile == nullptr)
      r.fail(child(path, "profile"),
             "unknown agent profile " + quote(name) +
               " (known: " + known_agent_profiles(r.profiles()) +
               "; a profile is a file profiles/<name>.json in the config "
               "directory)");
  }
  if (profile == nullptr || obj.contains("agent_cli"))
    agent.agent_cli = r.nonempty_string(r.required(obj, path, "agent_cli"),
                                        child(path, "agent_cli"));
  if (agent.agent_cli.find('\0') != std::string::npos)
    r.fail(child(path, "agent_cli"), "expected a command without NUL bytes");
  if (const auto* x = obj.if_contains("cli_flags")) {
    auto ptr = child(path, "cli_flags");
    agent.cli_flags = r.string(*x, ptr);
    auto args = shlex_split(agent.cli_flags);
    if (!args)
      r.fail(ptr, "agent " + quote(agent.agent_id) + ": " + args.error().what);
    for (const auto& arg : *args)
      if (arg.find('\0') != std::string::npos)
        r.fail(ptr, "agent " + quote(agent.agent_id) +
                      ": arguments cannot contain NUL bytes");
    agent.args = std::move(*args);
  }
  if (const auto* x = obj.if_contains("config_dir")) {
    auto ptr = child(path, "config_dir");
    agent.config_dir = expand_home(r, r.string(*x, ptr), ptr);
  }
  if (const auto* x = obj.if_contains("prompt_as_argument"))
    agent.prompt_as_argument = r.boolean(*x, child(path, "prompt_as_argument"));
  if (const auto* x = obj.if_contains("env_passthrough")) {
    auto ptr = child(path, "env_passthrough");
    const auto& names = r.array(*x, ptr);
    if (names.size() > max_env_passthrough)
      r.fail(ptr, "at most " + std::to_string(max_env_passthrough) + " names");
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto name = r.string(names[i], child(ptr, i));
      if (!valid_env_name(name))
        r.fail(child(ptr, i), "expected an environment variable name "
                              "([A-Za-z_][A-Za-z0-9_]*), got " +
                                quote(name));
      agent.env_passthrough.push_back(std::move(name));
    }
  }
  if (const auto* x = obj.if_contains("idle_timeout_s"))
    agent.idle_timeout_s =
      r.number(*x, child(path, "idle_timeout_s"), 0, false, max_idle_timeout_s);
  if (const auto* x = obj.if_contains("account"))
    agent.account = r.identifier(*x, child(path, "account"), "an account name");
  if (profile != nullptr)
    apply_agent_profile(agent, *profile, obj.contains("idle_timeout_s"),
                        obj.contains("prompt_as_argument"));
  return agent;
}

namespace {

selection_mode read_selection_mode(const reader& r, const json::value& v,
                                   const std::string& path) {
  auto str = r.string(v, path);
  if (str == "fallback")
    return selection_mode::fallback;
  if (str == "round-robin")
    return selection_mode::round_robin;
  r.fail(path,
         "expected one of \"fallback\", \"round-robin\", got " + quote(str));
}

/// Reads `agents`, `agent_fallbacks` and `selection_mode` of `obj` (the keys
/// were checked by the caller). References to unknown agents are kept: the
/// chain builder reports them as warnings (docs/BEHAVIOUR.md, Agent chain).
agent_selection read_selection(const reader& r, const json::object& obj,
                               const std::string& path) {
  agent_selection sel;
  if (const auto* x = obj.if_contains("agents")) {
    auto ptr = child(path, "agents");
    const auto& arr = r.array(*x, ptr);
    std::map<std::string, std::size_t> seen;
    for (std::size_t i = 0; i < arr.size(); ++i) {
      auto agent = read_agent(r, arr[i], child(ptr, i));
      auto [it, added] = seen.emplace(agent.agent_id, i);
      if (!added)
        r.fail(child(child(ptr, i), "agent_id"),
               "duplicate agent_id " + quote(agent.agent_id) + " (first at " +
                 child(ptr, it->second) + ")");
      sel.agents.push_back(std::move(agent));
    }
  }
  if (const auto* x = obj.if_contains("agent_fallbacks")) {
    auto ptr = child(path, "agent_fallbacks");
    for (const auto& kv : r.object(*x, ptr)) {
      std::string key{kv.key().data(), kv.key().size()};
      auto target = r.nonempty_string(kv.value(), child(ptr, key));
      sel.agent_fallbacks.emplace(std::move(key), std::move(target));
    }
  }
  if (const auto* x = obj.if_contains("selection_mode"))
    sel.mode = read_selection_mode(r, *x, child(path, "selection_mode"));
  return sel;
}

// -- environments, node, tasks ------------------------------------------------

} // namespace

environment_config read_environment(const reader& r, const json::value& v,
                                    std::string name,
                                    const supervisor_config& base) {
  const std::string path;
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"agents", "agent_fallbacks", "selection_mode", "supervisor",
                "classifier"});
  environment_config env;
  env.name = std::move(name);
  env.selection = read_selection(r, obj, path);
  if (const auto* x = obj.if_contains("supervisor")) {
    // Validated now, over the settings it will be merged onto, so that a bad
    // value is reported at load time; kept as written for merging per task.
    auto probe = base;
    read_supervisor(r, *x, child(path, "supervisor"), probe);
    env.supervisor_overrides = x->get_object();
  }
  if (const auto* x = obj.if_contains("classifier"))
    env.classifier_rules = read_rules(r, *x, child(path, "classifier"));
  return env;
}

node_config read_node(const reader& r, const json::value& v) {
  const std::string path;
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"max_concurrent", "circuit_breaker", "retry_budget",
                "default_agent", "default_runtime", "output", "allowed_paths",
                "process"});
  node_config node;
  if (const auto* x = obj.if_contains("process")) {
    auto ptr = child(path, "process");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr, {"shim_idle_timeout_s", "shim_report_timeout_s"});
    if (const auto* y = sub.if_contains("shim_idle_timeout_s"))
      node.process_shim_idle_timeout_s =
        r.seconds(*y, child(ptr, "shim_idle_timeout_s"));
    if (const auto* y = sub.if_contains("shim_report_timeout_s"))
      node.process_shim_report_timeout_s =
        r.seconds(*y, child(ptr, "shim_report_timeout_s"), true);
  }
  if (const auto* x = obj.if_contains("allowed_paths")) {
    auto ptr = child(path, "allowed_paths");
    const auto& arr = r.array(*x, ptr);
    if (arr.size() > 1000)
      r.fail(ptr, "expected at most 1000 paths");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      auto p = r.nonempty_string(arr[i], child(ptr, i));
      if (p[0] != '/' || p.find('\0') != std::string::npos)
        r.fail(child(ptr, i), "expected an absolute path, got " + quote(p));
      node.allowed_paths.push_back(std::move(p));
    }
  }
  if (const auto* x = obj.if_contains("output")) {
    auto ptr = child(path, "output");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr,
                 {"log_max_bytes", "line_max_bytes", "attempt_max_bytes"});
    auto bytes = [&](const char* key, std::uint64_t& field) {
      if (const auto* y = sub.if_contains(key))
        field = static_cast<std::uint64_t>(
          r.integer(*y, child(ptr, key), 1, std::int64_t{1} << 40));
    };
    bytes("log_max_bytes", node.output_log_max_bytes);
    bytes("line_max_bytes", node.output_line_max_bytes);
    bytes("attempt_max_bytes", node.output_attempt_max_bytes);
  }
  if (const auto* x = obj.if_contains("max_concurrent"))
    node.max_concurrent = r.int_value(*x, child(path, "max_concurrent"), 1);
  if (const auto* x = obj.if_contains("circuit_breaker")) {
    auto ptr = child(path, "circuit_breaker");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr,
                 {"max_failures", "reset_timeout_s", "stale_after_s"});
    if (const auto* y = sub.if_contains("max_failures"))
      node.breaker.max_failures =
        r.int_value(*y, child(ptr, "max_failures"), 1);
    if (const auto* y = sub.if_contains("reset_timeout_s"))
      node.breaker.reset_timeout_s =
        r.seconds(*y, child(ptr, "reset_timeout_s"));
    if (const auto* y = sub.if_contains("stale_after_s"))
      node.breaker.stale_after_s =
        r.seconds(*y, child(ptr, "stale_after_s"), true);
  }
  if (const auto* x = obj.if_contains("retry_budget")) {
    auto ptr = child(path, "retry_budget");
    const auto& sub = r.object(*x, ptr);
    r.check_keys(sub, ptr, {"capacity", "refill_per_s"});
    if (const auto* y = sub.if_contains("capacity")) {
      if (y->is_null())
        node.retry_budget_capacity.reset();
      else
        node.retry_budget_capacity =
          r.number(*y, child(ptr, "capacity"), 0.0, false, 1e9);
    }
    if (const auto* y = sub.if_contains("refill_per_s"))
      node.retry_budget_refill_per_s =
        r.number(*y, child(ptr, "refill_per_s"), 0.0, false, 1e9);
  }
  if (const auto* x = obj.if_contains("default_agent"))
    node.default_agent = read_agent(r, *x, child(path, "default_agent"));
  if (const auto* x = obj.if_contains("default_runtime"))
    node.default_runtime = r.string(*x, child(path, "default_runtime"));
  if (!known_runtime(node.default_runtime))
    r.fail(child(path, "default_runtime"), "expected one of " +
                                             runtime_name_list() + ", got " +
                                             quote(node.default_runtime));
  return node;
}

namespace {

/// An absolute path (after `~` expansion).
std::string absolute_path(const reader& r, const json::value& v,
                          const std::string& path) {
  auto str = expand_home(r, r.nonempty_string(v, path), path);
  if (str[0] != '/')
    r.fail(path, "expected an absolute path, got " + quote(str));
  if (str.find('\0') != std::string::npos)
    r.fail(path, "expected a path without NUL bytes");
  return str;
}

/// Most gates a task may have.
constexpr std::size_t max_gates = 32;

} // namespace

/// A command: a string split like `cli_flags`, an argv array, or an object
/// `{"name", "command", "timeout_s"}` whose `command` is either.
command_spec read_command(const reader& r, const json::value& v,
                          const std::string& path, double default_timeout_s) {
  command_spec cmd;
  cmd.timeout_s = default_timeout_s;
  const json::value* argv = &v;
  std::string argv_path = path;
  if (v.is_object()) {
    const auto& obj = v.get_object();
    r.check_keys(obj, path, {"name", "command", "timeout_s"});
    argv = &r.required(obj, path, "command");
    argv_path = child(path, "command");
    if (const auto* x = obj.if_contains("name"))
      cmd.name = r.identifier(*x, child(path, "name"), "a command name");
    if (const auto* x = obj.if_contains("timeout_s"))
      cmd.timeout_s =
        r.number(*x, child(path, "timeout_s"), 0, true, max_command_timeout_s);
  }
  if (argv->is_string()) {
    auto words = shlex_split(r.string(*argv, argv_path));
    if (!words)
      r.fail(argv_path, words.error().what);
    cmd.argv = std::move(*words);
  } else if (argv->is_array()) {
    const auto& arr = argv->get_array();
    for (std::size_t i = 0; i < arr.size(); ++i)
      cmd.argv.push_back(r.string(arr[i], child(argv_path, i)));
  } else {
    r.fail(argv_path, "expected a command: a string (split like cli_flags, "
                      "never run through a shell) or an array of arguments");
  }
  if (cmd.argv.empty() || cmd.argv[0].empty())
    r.fail(argv_path, "expected a non-empty command");
  for (std::size_t i = 0; i < cmd.argv.size(); ++i)
    if (cmd.argv[i].find('\0') != std::string::npos)
      r.fail(argv_path, "arguments cannot contain NUL bytes");
  if (cmd.name.empty()) {
    auto slash = cmd.argv[0].rfind('/');
    cmd.name =
      slash == std::string::npos ? cmd.argv[0] : cmd.argv[0].substr(slash + 1);
    if (cmd.name.size() > 64)
      cmd.name.resize(64);
  }
  return cmd;
}

namespace {

/// The repository keys of a task: `repo`, `keep_failed`, `gates`,
/// `gate_timeout_s`, `deliver`, `feedback`, `preflight`, `admit`.
void read_repo_keys(const reader& r, const json::object& obj, task_spec& task) {
  if (const auto* x = obj.if_contains("repo")) {
    repo_spec repo;
    if (x->is_string()) {
      repo.path = absolute_path(r, *x, "/repo");
    } else {
      const auto& sub = r.object(*x, "/repo");
      r.check_keys(sub, "/repo", {"path", "base"});
      repo.path =
        absolute_path(r, r.required(sub, "/repo", "path"), "/repo/path");
      if (const auto* y = sub.if_contains("base")) {
        repo.base = r.nonempty_string(*y, "/repo/base");
        // A base is handed to git as one argument: no option, no NUL.
        if (repo.base[0] == '-' || repo.base.find('\0') != std::string::npos)
          r.fail("/repo/base",
                 "expected a branch, tag or commit, got " + quote(repo.base));
      }
    }
    task.repo = std::move(repo);
  }
  if (const auto* x = obj.if_contains("keep_failed"))
    task.keep_failed = r.boolean(*x, "/keep_failed");
  double gate_timeout = 600.0;
  if (const auto* x = obj.if_contains("gate_timeout_s"))
    gate_timeout =
      r.number(*x, "/gate_timeout_s", 0, true, max_command_timeout_s);
  if (const auto* x = obj.if_contains("gates")) {
    const auto& arr = r.array(*x, "/gates");
    if (arr.size() > max_gates)
      r.fail("/gates",
             "expected at most " + std::to_string(max_gates) + " gates");
    for (std::size_t i = 0; i < arr.size(); ++i)
      task.gates.push_back(
        read_command(r, arr[i], child("/gates", i), gate_timeout));
  }
  if (const auto* x = obj.if_contains("deliver"))
    task.deliver = enum_value<delivery_mode>(
      r, *x, "/deliver", parse_delivery_mode, {"branch", "apply", "patch"});
  // Feedback is on by default for repository tasks, and for tasks whose
  // answer is checked (a role's schema turns it on in apply_role).
  if (const auto* x = obj.if_contains("answer_schema"))
    task.answer_schema = read_schema(r, *x, "/answer_schema");
  task.feedback.enabled = task.repo.has_value() || !task.answer_schema.empty();
  if (const auto* x = obj.if_contains("feedback")) {
    task.feedback.enabled = true;
    if (x->is_bool()) {
      task.feedback.enabled = x->get_bool();
    } else if (x->is_string()) {
      task.feedback.template_text = r.nonempty_string(*x, "/feedback");
    } else {
      const auto& sub = r.object(*x, "/feedback");
      r.check_keys(sub, "/feedback", {"enabled", "template", "lines"});
      if (const auto* y = sub.if_contains("enabled"))
        task.feedback.enabled = r.boolean(*y, "/feedback/enabled");
      if (const auto* y = sub.if_contains("template"))
        task.feedback.template_text =
          r.nonempty_string(*y, "/feedback/template");
      if (const auto* y = sub.if_contains("lines"))
        task.feedback.lines = r.int_value(*y, "/feedback/lines", 0, 1000);
    }
  }
  if (const auto* x = obj.if_contains("preflight"))
    task.preflight = read_command(r, *x, "/preflight", 60.0);
  if (const auto* x = obj.if_contains("admit"))
    task.admit = read_command(r, *x, "/admit", 60.0);
  if (!task.repo) {
    for (auto key : {"gates", "deliver", "keep_failed"})
      if (obj.contains(key))
        r.fail(child("", key), "\"" + std::string{key} +
                                 "\" needs a repository task (\"repo\")");
  }
}

} // namespace

task_spec read_task(const reader& r, const json::value& v) {
  const std::string path;
  const auto& obj = r.object(v, path);
  r.check_keys(obj, path,
               {"id",
                "prompt",
                "environment",
                "agent_selection",
                "supervisor",
                "runtime",
                "image",
                "env",
                "memory_limit_mb",
                "classifier",
                "mounts",
                "workdir",
                "repo",
                "keep_failed",
                "gates",
                "gate_timeout_s",
                "deliver",
                "feedback",
                "preflight",
                "admit",
                "placement",
                "answer_schema",
                "role",
                "target_files",
                "extra_context",
                "context_max_bytes"});
  task_spec task;
  if (const auto* x = obj.if_contains("id"))
    task.id = r.identifier(*x, "/id", "a task id");
  task.prompt = r.nonempty_string(r.required(obj, path, "prompt"), "/prompt");
  if (const auto* x = obj.if_contains("environment"))
    task.environment = r.nonempty_string(*x, "/environment");
  // The settings the task names, as a typed task carries them;
  // resolve_task puts them over the environment's.
  if (const auto* x = obj.if_contains("supervisor"))
    task.supervisor = read_overrides(r, *x, "/supervisor", nullptr);
  if (const auto* x = obj.if_contains("agent_selection")) {
    const auto& sub = r.object(*x, "/agent_selection");
    r.check_keys(sub, "/agent_selection",
                 {"agents", "agent_fallbacks", "selection_mode"});
    task.selection = read_selection(r, sub, "/agent_selection");
  }
  if (const auto* x = obj.if_contains("classifier"))
    task.classifier_rules = read_rules(r, *x, "/classifier");
  if (const auto* x = obj.if_contains("runtime")) {
    task.runtime = r.string(*x, "/runtime");
    if (!known_runtime(task.runtime))
      r.fail("/runtime", "expected one of " + runtime_name_list() + ", got " +
                           quote(task.runtime));
  }
  if (const auto* x = obj.if_contains("image"))
    task.image = r.nonempty_string(*x, "/image");
  if (const auto* x = obj.if_contains("env")) {
    for (const auto& kv : r.object(*x, "/env")) {
      std::string key{kv.key().data(), kv.key().size()};
      auto ptr = child("/env", key);
      if (key.empty() || key.find('=') != std::string::npos ||
          key.find('\0') != std::string::npos)
        r.fail(ptr, "invalid environment variable name " + quote(key) +
                      " (must be non-empty, without '=' or NUL)");
      auto value = r.string(kv.value(), ptr);
      if (value.find('\0') != std::string::npos)
        r.fail(ptr, "expected a string without NUL bytes");
      task.env.emplace(std::move(key), std::move(value));
    }
  }
  if (const auto* x = obj.if_contains("memory_limit_mb"))
    task.memory_limit_mb = static_cast<std::uint64_t>(
      r.integer(*x, "/memory_limit_mb", 1, max_memory_limit_mb));
  if (const auto* x = obj.if_contains("mounts")) {
    const auto& arr = r.array(*x, "/mounts");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      auto ptr = child("/mounts", i);
      const auto& sub = r.object(arr[i], ptr);
      r.check_keys(sub, ptr, {"host_path", "container_path", "read_only"});
      mount_spec m;
      m.host_path = absolute_path(r, r.required(sub, ptr, "host_path"),
                                  child(ptr, "host_path"));
      m.container_path =
        absolute_path(r, r.required(sub, ptr, "container_path"),
                      child(ptr, "container_path"));
      if (const auto* y = sub.if_contains("read_only"))
        m.read_only = r.boolean(*y, child(ptr, "read_only"));
      task.mounts.push_back(std::move(m));
    }
  }
  if (const auto* x = obj.if_contains("workdir"))
    task.workdir = absolute_path(r, *x, "/workdir");
  read_repo_keys(r, obj, task);
  if (const auto* x = obj.if_contains("placement")) {
    const auto& sub = r.object(*x, "/placement");
    r.check_keys(sub, "/placement", {"labels"});
    if (const auto* y = sub.if_contains("labels"))
      for (const auto& kv : r.object(*y, "/placement/labels")) {
        std::string key{kv.key().data(), kv.key().size()};
        auto ptr = child("/placement/labels", key);
        task.placement.labels.emplace(std::move(key),
                                      r.string(kv.value(), ptr));
      }
  }
  if (task.repo && !task.workdir.empty())
    r.fail("/workdir", "a repository task works in a fresh worktree per "
                       "attempt; \"workdir\" cannot be set with \"repo\"");
  // The machine asks for the steps the task has.
  task.settings.steps.preflight = task.preflight.has_value();
  task.settings.steps.gates = !task.gates.empty();
  task.settings.steps.deliver = task.repo.has_value();
  task.settings.steps.answer = !task.answer_schema.empty();
  return task;
}

} // namespace tasksup::detail

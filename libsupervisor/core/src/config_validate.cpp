#include "tasksup/supervisor/config.hpp"

#include "config_parse.hpp"

#include "tasksup/supervisor/agent_profile.hpp"
#include "tasksup/supervisor/text.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

// The one task validator: every check a task must pass to run, on the
// resolved task, whichever way it arrived. The JSON readers check types and
// keys; everything about values is checked here, once, so a task file, a
// JSON submit and a typed submit get the same verdict and the same message.

namespace tasksup {

using namespace detail;

namespace {

/// Enumerators past the last one a reader can produce are out of range: a
/// typed task is a value from the network or another program.
template<class Enum>
bool in_range(Enum x, Enum last) noexcept {
  return static_cast<std::uint64_t>(x) <= static_cast<std::uint64_t>(last);
}

void check_text(const reader& r, const std::string& str,
                const std::string& path, bool nonempty,
                std::size_t max_bytes = max_file_bytes) {
  if (nonempty && str.empty())
    r.fail(path, "expected a non-empty string");
  if (str.size() > max_bytes)
    r.fail(path, "expected at most " + std::to_string(max_bytes) +
                   " bytes, got " + std::to_string(str.size()));
  if (str.find('\0') != std::string::npos)
    r.fail(path, "expected a string without NUL bytes");
  if (auto at = first_invalid_utf8(str); at != std::string::npos)
    r.fail(path,
           "expected UTF-8 text, invalid byte at offset " + std::to_string(at));
}

void check_id(const reader& r, const std::string& str, const std::string& path,
              std::string_view what) {
  r.identifier(json::value(json::string_view{str}), path, what);
}

void check_seconds(const reader& r, double x, const std::string& path,
                   bool positive = false) {
  r.seconds(json::value(x), path, positive);
}

void check_int(const reader& r, int x, const std::string& path, int lo,
               int hi = max_int) {
  r.int_value(json::value(std::int64_t{x}), path, lo, hi);
}

void check_absolute(const reader& r, const std::string& str,
                    const std::string& path) {
  check_text(r, str, path, true);
  if (str[0] != '/')
    r.fail(path, "expected an absolute path, got " + quote(str));
}

std::string class_ptr(const std::string& path, error_class cls) {
  return child(path, std::to_string(static_cast<unsigned>(cls)));
}

void check_class(const reader& r, error_class cls, const std::string& path) {
  if (!in_range(cls, all_error_classes.back()))
    r.fail(path,
           "unknown error class " + std::to_string(static_cast<unsigned>(cls)));
}

void check_backoff_spec(const reader& r, const backoff_spec& spec,
                        const std::string& bp) {
  if (!in_range(spec.kind, backoff_spec::kind_t::exponential))
    r.fail(child(bp, "kind"),
           "unknown schedule kind " +
             std::to_string(static_cast<unsigned>(spec.kind)));
  if (!in_range(spec.jit, jitter::proportional))
    r.fail(child(bp, "jitter"),
           "unknown jitter " + std::to_string(static_cast<unsigned>(spec.jit)));
  constexpr std::size_t max_entries = 1000;
  if (spec.table_s.size() > max_entries)
    r.fail(child(bp, "table_s"),
           "expected at most " + std::to_string(max_entries) + " entries");
  for (std::size_t i = 0; i < spec.table_s.size(); ++i)
    check_seconds(r, spec.table_s[i], child(child(bp, "table_s"), i));
  check_seconds(r, spec.initial_s, child(bp, "initial_s"));
  r.number(json::value(spec.multiplier), child(bp, "multiplier"), 1.0, false,
           100.0);
  check_seconds(r, spec.max_s, child(bp, "max_s"));
  if (spec.kind == backoff_spec::kind_t::table && spec.table_s.empty())
    r.fail(bp, "a \"table\" schedule needs a non-empty \"table_s\"");
  if (spec.kind == backoff_spec::kind_t::exponential &&
      spec.max_s < spec.initial_s)
    r.fail(bp, "\"max_s\" must be at least \"initial_s\" for an "
               "\"exponential\" schedule");
}

void check_supervisor(const reader& r, const supervisor_config& cfg,
                      const std::string& path) {
  check_int(r, cfg.max_retries_per_agent, child(path, "max_retries_per_agent"),
            0);
  check_seconds(r, cfg.backoff_base_seconds,
                child(path, "backoff_base_seconds"));
  check_seconds(r, cfg.rate_limit_backoff_base,
                child(path, "rate_limit_backoff_base"));
  check_int(r, cfg.max_total_attempts, child(path, "max_total_attempts"), 1);
  check_int(r, cfg.max_crash_restarts, child(path, "max_crash_restarts"), 0);
  for (const auto& [cls, act] : cfg.actions) {
    check_class(r, cls, class_ptr(child(path, "actions"), cls));
    if (!in_range(act, action::fail))
      r.fail(child(child(path, "actions"), to_string(cls)),
             "unknown action " + std::to_string(static_cast<unsigned>(act)));
  }
  if (!in_range(cfg.restart, restart_type::temporary))
    r.fail(child(path, "restart"),
           "unknown restart type " +
             std::to_string(static_cast<unsigned>(cfg.restart)));
  auto ptr = child(path, "intensity");
  check_int(r, cfg.intensity.max_restarts, child(ptr, "max_restarts"), 0);
  check_seconds(r, cfg.intensity.period_s, child(ptr, "period_s"), true);
  check_seconds(r, cfg.intensity.reset_after_s, child(ptr, "reset_after_s"));
  for (const auto& [cls, spec] : cfg.backoff) {
    check_class(r, cls, class_ptr(child(path, "backoff"), cls));
    check_backoff_spec(r, spec, child(child(path, "backoff"), to_string(cls)));
  }
  if (cfg.deadline_s)
    check_seconds(r, *cfg.deadline_s, child(path, "deadline_s"), true);
  check_seconds(r, cfg.stop_grace_s, child(path, "stop_grace_s"));
  if (cfg.attempt_timeout_s)
    check_seconds(r, *cfg.attempt_timeout_s, child(path, "attempt_timeout_s"),
                  true);
  if (cfg.done_exit_code)
    check_int(r, *cfg.done_exit_code, child(path, "done_exit_code"), 1, 255);
  check_backoff_spec(r, cfg.restart_backoff, child(path, "restart_backoff"));
  if (cfg.on_quota && !in_range(*cfg.on_quota, quota_action::fallback))
    r.fail(child(path, "on_quota"),
           "unknown quota action " +
             std::to_string(static_cast<unsigned>(*cfg.on_quota)));
  check_seconds(r, cfg.quota_wait_s, child(path, "quota_wait_s"), true);
}

/// Longest argv of a gate, preflight or admit command (arguments).
constexpr std::size_t max_command_args = 1024;

void check_command(const reader& r, const command_spec& cmd,
                   const std::string& path) {
  if (!cmd.name.empty())
    check_text(r, cmd.name, child(path, "name"), true, 64);
  if (cmd.argv.empty() || cmd.argv[0].empty())
    r.fail(child(path, "command"), "expected a non-empty command");
  if (cmd.argv.size() > max_command_args)
    r.fail(child(path, "command"), "expected at most " +
                                     std::to_string(max_command_args) +
                                     " arguments");
  for (std::size_t i = 0; i < cmd.argv.size(); ++i)
    check_text(r, cmd.argv[i], child(child(path, "command"), i), true,
               max_argument_bytes);
  r.number(json::value(cmd.timeout_s), child(path, "timeout_s"), 0, true,
           max_command_timeout_s);
}

/// The bytes the agent's command line takes in `execve`.
std::size_t command_bytes(const agent_spec& agent) {
  auto n = agent.agent_cli.size() + 1;
  for (const auto& arg : agent.args)
    n += arg.size() + 1;
  return n;
}

void check_agent(const reader& r, const agent_spec& agent,
                 const std::string& path) {
  check_id(r, agent.agent_id, child(path, "agent_id"), "an agent id");
  check_text(r, agent.agent_cli, child(path, "agent_cli"), true,
             max_argument_bytes);
  check_text(r, agent.cli_flags, child(path, "cli_flags"), false);
  for (const auto& arg : agent.args)
    check_text(r, arg, child(path, "cli_flags"), false, max_argument_bytes);
  check_text(r, agent.config_dir, child(path, "config_dir"), false);
  for (std::size_t i = 0; i < agent.env_passthrough.size(); ++i)
    if (!valid_env_name(agent.env_passthrough[i]))
      r.fail(child(child(path, "env_passthrough"), i),
             "expected an environment variable name");
  if (agent.env_passthrough.size() > max_env_passthrough)
    r.fail(child(path, "env_passthrough"), "too many names");
  r.number(json::value(agent.idle_timeout_s), child(path, "idle_timeout_s"), 0,
           false, max_idle_timeout_s);
  if (auto bad = check_idle_noise(agent.idle_noise))
    r.fail(bad->first < agent.idle_noise.size()
             ? child(child(path, "idle_noise"), bad->first)
             : child(path, "idle_noise"),
           bad->second);
}

void check_rules(const reader& r, const std::vector<classifier_rule>& rules,
                 const std::string& path, bool compile) {
  auto ptr = child(path, "rules");
  std::map<std::string_view, std::size_t> seen;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& rule = rules[i];
    auto rp = child(ptr, i);
    check_id(r, rule.id, child(rp, "id"), "a rule id");
    if (auto [it, added] = seen.emplace(rule.id, i); !added)
      r.fail(child(rp, "id"), "duplicate rule id " + quote(rule.id) +
                                " (first at " + child(ptr, it->second) + ")");
    check_class(r, rule.cls, child(rp, "class"));
    for (std::size_t k = 0; k < rule.exit_codes.size(); ++k)
      check_int(r, rule.exit_codes[k], child(child(rp, "exit_codes"), k), 0,
                255);
    for (std::size_t k = 0; k < rule.signals.size(); ++k)
      check_int(r, rule.signals[k], child(child(rp, "signals"), k), 1, 64);
    for (std::size_t k = 0; k < rule.patterns.size(); ++k)
      check_text(r, rule.patterns[k], child(child(rp, "patterns"), k), true);
    if (rule.window_lines > 1'000'000)
      r.fail(child(rp, "window_lines"),
             "expected an integer from 0 to 1000000");
    if (rule.exit_codes.empty() && !rule.oom_killed && rule.signals.empty() &&
        rule.patterns.empty())
      r.fail(rp, "a rule needs at least one of \"exit_codes\", "
                 "\"oom_killed\", \"signals\", \"patterns\"");
  }
  // The classifier compiles the patterns exactly as it will use them; its
  // error path is relative to the rule array.
  if (!compile)
    return;
  if (auto compiled = classifier::make(rules); !compiled)
    r.fail(ptr + compiled.error().path, compiled.error().what);
}

} // namespace

expected<bool> detail::check_task(const task_spec& task, std::string_view where,
                                  bool compile_rules) {
  return guarded([&] {
    reader r{where};
    if (!task.id.empty())
      check_id(r, task.id, "/id", "a task id");
    if (task.prompt.size() > max_prompt_bytes)
      r.fail("/prompt",
             "the prompt is " + std::to_string(task.prompt.size()) +
               " bytes; at most " + std::to_string(max_prompt_bytes) +
               " fit in one command-line argument or environment variable "
               "(Linux's 128 KiB MAX_ARG_STRLEN): put long instructions in "
               "a file the agent reads and name it in the prompt");
    check_text(r, task.prompt, "/prompt", true);
    if (!task.environment.empty())
      check_id(r, task.environment, "/environment", "an environment name");
    // What every attempt passes to execve besides the agent's command line.
    std::size_t exec_bytes = task.prompt.size() + 1;
    for (const auto& [key, value] : task.env) {
      auto ptr = child("/env", key);
      if (key.empty() || key.find('=') != std::string::npos ||
          key.find('\0') != std::string::npos)
        r.fail(ptr, "invalid environment variable name " + quote(key) +
                      " (must be non-empty, without '=' or NUL)");
      check_text(r, key, ptr, true);
      check_text(r, value, ptr, false);
      auto entry = key.size() + 1 + value.size();
      if (entry > max_argument_bytes)
        r.fail(ptr, "KEY=value is " + std::to_string(entry) +
                      " bytes; at most " + std::to_string(max_argument_bytes) +
                      " fit in one environment variable");
      exec_bytes += entry + 1;
    }
    if (task.selection) {
      const std::string sp = "/agent_selection";
      if (!in_range(task.selection->mode, selection_mode::round_robin))
        r.fail(child(sp, "selection_mode"),
               "unknown selection mode " +
                 std::to_string(static_cast<unsigned>(task.selection->mode)));
      std::map<std::string_view, std::size_t> seen;
      for (std::size_t i = 0; i < task.selection->agents.size(); ++i) {
        const auto& agent = task.selection->agents[i];
        auto ptr = child(child(sp, "agents"), i);
        check_agent(r, agent, ptr);
        auto [it, added] = seen.emplace(agent.agent_id, i);
        if (!added)
          r.fail(child(ptr, "agent_id"),
                 "duplicate agent_id " + quote(agent.agent_id) + " (first at " +
                   child(child(sp, "agents"), it->second) + ")");
        if (exec_bytes + command_bytes(agent) > max_command_bytes)
          r.fail(ptr, "the prompt, env and this agent's command line take " +
                        std::to_string(exec_bytes + command_bytes(agent)) +
                        " bytes; at most " + std::to_string(max_command_bytes) +
                        " fit in an attempt's command line");
      }
      for (const auto& [from, to] : task.selection->agent_fallbacks) {
        auto ptr = child(child(sp, "agent_fallbacks"), from);
        check_text(r, from, ptr, true);
        check_text(r, to, ptr, true);
      }
    }
    if (exec_bytes > max_command_bytes)
      r.fail("/env", "the prompt and env take " + std::to_string(exec_bytes) +
                       " bytes; at most " + std::to_string(max_command_bytes) +
                       " fit in an attempt's command line");
    // What the task runs under: its own settings over the resolved ones, so
    // a bad value the task names is reported at its own key.
    check_supervisor(r, effective_settings(task), "/supervisor");
    if (task.classifier_rules)
      check_rules(r, *task.classifier_rules, "/classifier", compile_rules);
    if (!task.runtime.empty() && !known_runtime(task.runtime))
      r.fail("/runtime", "expected one of " + runtime_name_list() + ", got " +
                           quote(task.runtime));
    check_text(r, task.image, "/image", false);
    if (task.runtime == "docker" && task.image.empty())
      r.fail("/image", "a task with \"runtime\": \"docker\" needs an "
                       "\"image\" to run its attempts in");
    if (task.memory_limit_mb &&
        (*task.memory_limit_mb < 1 ||
         *task.memory_limit_mb >
           static_cast<std::uint64_t>(max_memory_limit_mb)))
      r.fail("/memory_limit_mb", "expected an integer from 1 to " +
                                   std::to_string(max_memory_limit_mb));
    for (std::size_t i = 0; i < task.mounts.size(); ++i) {
      auto ptr = child("/mounts", i);
      check_absolute(r, task.mounts[i].host_path, child(ptr, "host_path"));
      check_absolute(r, task.mounts[i].container_path,
                     child(ptr, "container_path"));
    }
    if (!task.workdir.empty())
      check_absolute(r, task.workdir, "/workdir");
    if (task.repo) {
      check_absolute(r, task.repo->path, "/repo/path");
      check_text(r, task.repo->base, "/repo/base", true, 256);
      if (task.repo->base.empty() || task.repo->base[0] == '-')
        r.fail("/repo/base", "expected a branch, tag or commit, got " +
                               quote(task.repo->base));
      if (!task.workdir.empty())
        r.fail("/workdir", "a repository task works in a fresh worktree per "
                           "attempt; \"workdir\" cannot be set with \"repo\"");
    } else if (!task.gates.empty() || task.keep_failed) {
      r.fail(task.gates.empty() ? "/keep_failed" : "/gates",
             "needs a repository task (\"repo\")");
    }
    if (task.gates.size() > 32)
      r.fail("/gates", "expected at most 32 gates");
    for (std::size_t i = 0; i < task.gates.size(); ++i)
      check_command(r, task.gates[i], child("/gates", i));
    if (!in_range(task.deliver, delivery_mode::patch))
      r.fail("/deliver", "unknown delivery mode " +
                           std::to_string(static_cast<unsigned>(task.deliver)));
    check_text(r, task.feedback.template_text, "/feedback/template", false);
    if (task.feedback.lines < 0 || task.feedback.lines > 1000)
      r.fail("/feedback/lines", "expected an integer from 0 to 1000");
    if (task.preflight)
      check_command(r, *task.preflight, "/preflight");
    if (task.admit)
      check_command(r, *task.admit, "/admit");
    if (task.placement.labels.size() > max_labels)
      r.fail("/placement/labels",
             "expected at most " + std::to_string(max_labels) + " labels");
    for (auto& [key, value] : task.placement.labels)
      if (auto ok = check_label(key, value, "a label"); !ok)
        r.fail(child("/placement/labels", key), ok.error().what);
    return true;
  });
}

expected<bool> validate_task(const task_spec& task, std::string_view where) {
  return check_task(task, where, true);
}

std::vector<std::string> task_warnings(const task_spec& task) {
  std::vector<std::string> out;
  // A retry then starts in what the failed attempt left behind.
  if (!task.workdir.empty())
    out.push_back("/workdir: every attempt of this task (retries and other "
                  "agents alike) works in the same directory " +
                  quote(task.workdir) +
                  ", with what earlier attempts left there; use \"repo\" for "
                  "a fresh worktree per attempt");
  return out;
}

} // namespace tasksup

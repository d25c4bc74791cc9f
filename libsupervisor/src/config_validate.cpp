#include "tasksup/supervisor/config.hpp"

#include "config_reader.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

// The checks a task that arrived already built gets: the limits the JSON
// readers enforce, applied to the values.

namespace tasksup {

using namespace detail;

namespace {

/// The checks `read_task` makes on JSON, made on a task that arrived already
/// built; each value goes through the same reader so the errors read alike.
void check_text(const reader& r, const std::string& str,
                const std::string& path, bool nonempty) {
  if (nonempty && str.empty())
    r.fail(path, "expected a non-empty string");
  if (str.size() > max_file_bytes)
    r.fail(path,
           "expected at most " + std::to_string(max_file_bytes) + " bytes");
  if (str.find('\0') != std::string::npos)
    r.fail(path, "expected a string without NUL bytes");
}

void check_id(const reader& r, const std::string& str, const std::string& path,
              std::string_view what) {
  r.identifier(json::value(json::string_view{str}), path, what);
}

void check_seconds(const reader& r, double x, const std::string& path,
                   bool positive = false) {
  r.seconds(json::value(x), path, positive);
}

void check_int(const reader& r, int x, const std::string& path, int lo) {
  r.int_value(json::value(std::int64_t{x}), path, lo);
}

void check_absolute(const reader& r, const std::string& str,
                    const std::string& path) {
  check_text(r, str, path, true);
  if (str[0] != '/')
    r.fail(path, "expected an absolute path, got " + quote(str));
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
  auto ptr = child(path, "intensity");
  check_int(r, cfg.intensity.max_restarts, child(ptr, "max_restarts"), 0);
  check_seconds(r, cfg.intensity.period_s, child(ptr, "period_s"), true);
  check_seconds(r, cfg.intensity.reset_after_s, child(ptr, "reset_after_s"));
  for (const auto& [cls, spec] : cfg.backoff) {
    auto bp = child(child(path, "backoff"), to_string(cls));
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
  if (cfg.deadline_s)
    check_seconds(r, *cfg.deadline_s, child(path, "deadline_s"), true);
  check_seconds(r, cfg.stop_grace_s, child(path, "stop_grace_s"));
}

void check_agent(const reader& r, const agent_spec& agent,
                 const std::string& path) {
  check_id(r, agent.agent_id, child(path, "agent_id"), "an agent id");
  check_text(r, agent.agent_cli, child(path, "agent_cli"), true);
  check_text(r, agent.cli_flags, child(path, "cli_flags"), false);
  for (const auto& arg : agent.args)
    check_text(r, arg, child(path, "cli_flags"), false);
  check_text(r, agent.config_dir, child(path, "config_dir"), false);
}

} // namespace

expected<bool> validate_task(const task_spec& task, std::string_view where) {
  return guarded([&] {
    reader r{where};
    if (!task.id.empty())
      check_id(r, task.id, "/id", "a task id");
    check_text(r, task.prompt, "/prompt", true);
    if (!task.environment.empty())
      check_id(r, task.environment, "/environment", "an environment name");
    if (task.selection) {
      const std::string sp = "/agent_selection";
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
      }
      for (const auto& [from, to] : task.selection->agent_fallbacks) {
        auto ptr = child(child(sp, "agent_fallbacks"), from);
        check_text(r, from, ptr, true);
        check_text(r, to, ptr, true);
      }
    }
    check_supervisor(r, task.supervisor, "/supervisor");
    if (task.classifier_rules) {
      auto compiled = classifier::make(*task.classifier_rules);
      if (!compiled)
        r.fail("/classifier", compiled.error().to_string());
    }
    if (!task.runtime.empty() && task.runtime != "process" &&
        task.runtime != "docker")
      r.fail("/runtime", "expected one of \"process\", \"docker\", got " +
                           quote(task.runtime));
    check_text(r, task.image, "/image", false);
    for (const auto& [key, value] : task.env) {
      auto ptr = child("/env", key);
      if (key.empty() || key.find('=') != std::string::npos ||
          key.find('\0') != std::string::npos)
        r.fail(ptr, "invalid environment variable name " + quote(key) +
                      " (must be non-empty, without '=' or NUL)");
      check_text(r, value, ptr, false);
    }
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
    return true;
  });
}

} // namespace tasksup

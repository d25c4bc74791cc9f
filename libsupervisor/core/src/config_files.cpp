#include "tasksup/supervisor/config.hpp"

#include "config_parse.hpp"
#include "trigger_check.hpp"

#include <boost/json/parser.hpp>
#include <boost/json/stream_parser.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

// Config and task files: reading JSON text and files, loading a config
// directory and a task file.

namespace tasksup {

using namespace detail;
namespace fs = std::filesystem;

namespace {

std::string join_path(const std::string& dir, const std::string& name) {
  return (fs::path{dir} / name).string();
}

} // namespace

void resolve_agent_paths(std::vector<agent_spec>& agents,
                         const std::string& file) {
  auto dir = fs::path{file}.parent_path();
  for (auto& agent : agents) {
    const auto& cli = agent.agent_cli;
    if (cli.empty() || cli[0] == '/' || cli.find('/') == std::string::npos)
      continue;
    std::error_code ec;
    auto full = fs::absolute(dir / cli, ec);
    if (!ec)
      agent.agent_cli = full.lexically_normal().string();
  }
}

expected<json::value> parse_json_text(std::string_view text,
                                      std::string_view where) {
  json::parse_options opts;
  opts.max_depth = max_json_depth;
  json::stream_parser parser{json::storage_ptr{}, opts};
  boost::system::error_code ec;
  auto consumed = parser.write(text.data(), text.size(), ec);
  if (!ec)
    parser.finish(ec);
  if (ec) {
    // The parser stops at the offending byte; count lines up to it.
    auto offset = std::min(consumed, text.size());
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return error{std::string{where}, std::string{},
                 "invalid JSON at line " + std::to_string(line) + ", column " +
                   std::to_string(offset - line_start + 1) + ": " +
                   ec.message()};
  }
  if (auto dup = find_duplicate_key(text))
    return error{std::string{where}, shown_pointer(dup->pointer),
                 "duplicate key " + quote(dup->key) +
                   " (a key may appear only once in an object)"};
  return parser.release();
}

expected<json::value> read_json_file(const std::string& path) {
  // Opened without blocking and checked before reading: a FIFO, socket or
  // device given as a task file must not hang `validate` or `run`.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return error{path, "", std::string{"cannot open: "} + std::strerror(errno)};
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return error{path, "", std::string{"cannot read: "} + std::strerror(errno)};
  if (S_ISDIR(st.st_mode))
    return error{path, "", "is a directory, expected a JSON file"};
  if (!S_ISREG(st.st_mode))
    return error{path, "", "not a regular file, expected a JSON file"};
  if (static_cast<std::uint64_t>(st.st_size) > max_file_bytes)
    return error{path, "",
                 "file is larger than " + std::to_string(max_file_bytes) +
                   " bytes"};
  std::string text;
  char buf[65536];
  for (;;) {
    auto n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return error{path, "",
                   std::string{"cannot read: "} + std::strerror(errno)};
    }
    if (n == 0)
      break;
    // The file may grow while it is read.
    if (text.size() + static_cast<std::size_t>(n) > max_file_bytes)
      return error{path, "",
                   "file is larger than " + std::to_string(max_file_bytes) +
                     " bytes"};
    text.append(buf, static_cast<std::size_t>(n));
  }
  return parse_json_text(text, path);
}

namespace {

/// Reads `path` when it exists, else nullopt; a file that exists but
/// cannot be read or parsed is an error.
expected<std::optional<json::value>> read_optional(const std::string& path) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found)
    return std::optional<json::value>{};
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  return std::optional<json::value>{std::move(*doc)};
}

/// Reads `dir/name` when it exists and sets `target` to what
/// `parse(document, path)` makes of it; an absent file leaves `target` as it
/// is. The error names the file (and, from `parse`, the field).
template<class T, class Parse>
std::optional<error> read_config_file(const std::string& dir, const char* name,
                                      T& target, Parse parse) {
  auto path = join_path(dir, name);
  auto doc = read_optional(path);
  if (!doc)
    return doc.error();
  if (*doc) {
    auto parsed = parse(**doc, path);
    if (!parsed)
      return parsed.error();
    target = std::move(*parsed);
  }
  return std::nullopt;
}

/// Reads every `.json` file directly in `dir` (none when `dir` is not a
/// directory) and adds what `parse(document, name, path)` makes of each to
/// `out` under its name, the file name without `.json`. The error names the
/// file (and, from `parse`, the field).
template<class Map, class Parse>
std::optional<error> read_config_files(const std::string& dir, Map& out,
                                       Parse parse) {
  auto files = json_files_in(dir);
  if (!files)
    return files.error();
  for (const auto& file : *files) {
    auto path = file.string();
    auto doc = read_json_file(path);
    if (!doc)
      return doc.error();
    auto name = file.stem().string();
    auto parsed = parse(*doc, name, path);
    if (!parsed)
      return parsed.error();
    out.emplace(std::move(name), std::move(*parsed));
  }
  return std::nullopt;
}

} // namespace

expected<profile_map> load_profiles_dir(const std::string& dir) {
  profile_map out;
  if (auto err = read_config_files(
        dir, out,
        [](const auto& doc, const std::string& name, const std::string& path) {
          auto parsed = parse_user_profile(doc, name, path);
          if (parsed) {
            // `./bin/agent` in a profile is relative to the profiles
            // directory.
            agent_spec probe;
            probe.agent_cli = parsed->agent_cli;
            std::vector<agent_spec> agents{std::move(probe)};
            resolve_agent_paths(agents, path);
            parsed->agent_cli = std::move(agents.front().agent_cli);
          }
          return parsed;
        }))
    return *err;
  return out;
}

expected<schedule_spec> check_schedule(const boost::json::value& doc,
                                       const std::string& name,
                                       const std::string& where,
                                       const config_set& cfg) {
  if (!valid_schedule_name(name))
    return error{where, "",
                 "invalid schedule name " + quote(name) + " (1 to " +
                   std::to_string(max_schedule_name) +
                   " characters from [A-Za-z0-9_.-]: a run's task id is the "
                   "name and its due time)"};
  auto spec = parse_schedule(doc, where);
  if (!spec)
    return spec;
  auto probe = spec->task;
  probe["id"] = schedule_run_id(name, 0);
  if (auto task = parse_task(json::value(std::move(probe)), where, cfg);
      !task) {
    auto err = task.error();
    err.path = "/task" + err.path;
    return err;
  }
  return spec;
}

namespace {

/// A schedule file's task names its agents relative to the file (`./bin/x`)
/// as a task file does: made absolute here, since the task is parsed only
/// when a run starts.
void resolve_task_agents(json::object& task, const std::string& file) {
  auto* selection = task.if_contains("agent_selection");
  auto* agents = selection != nullptr && selection->is_object()
                   ? selection->get_object().if_contains("agents")
                   : nullptr;
  if (agents == nullptr || !agents->is_array())
    return;
  auto base = fs::path{file}.parent_path();
  for (auto& agent : agents->get_array()) {
    auto* cli =
      agent.is_object() ? agent.get_object().if_contains("agent_cli") : nullptr;
    if (cli == nullptr || !cli->is_string())
      continue;
    std::string command{cli->get_string()};
    if (command.empty() || command.front() == '/' ||
        command.find('/') == std::string::npos)
      continue;
    *cli = (base / command).lexically_normal().string();
  }
}

} // namespace

expected<config_set> load_config_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return error{dir, "", "not a directory"};
  auto cfg = builtin_config();
  {
    auto profiles = load_profiles_dir(join_path(dir, "profiles"));
    if (!profiles)
      return profiles.error();
    cfg.profiles = std::move(*profiles);
    auto roles = load_roles_dir(join_path(dir, "roles"));
    if (!roles)
      return roles.error();
    cfg.roles = std::move(*roles);
    auto triggers = load_triggers_dir(join_path(dir, "triggers"), dir);
    if (!triggers)
      return triggers.error();
    cfg.triggers = std::move(*triggers);
  }
  if (auto err = read_config_file(dir, "supervisor.json", cfg.supervisor,
                                  [](const auto& doc, const auto& path) {
                                    return parse_supervisor_config(doc, path);
                                  }))
    return *err;
  if (auto err = read_config_file(dir, "classifier.json", cfg.classifier_rules,
                                  [](const auto& doc, const auto& path) {
                                    return parse_classifier_rules(doc, path);
                                  }))
    return *err;
  if (auto err = read_config_file(
        dir, "node.json", cfg.node, [&](const auto& doc, const auto& path) {
          auto node = parse_node_config(doc, path, cfg.profiles);
          if (node) {
            // `./bin/agent` in node.json is relative to the config directory.
            std::vector<agent_spec> agents{std::move(node->default_agent)};
            resolve_agent_paths(agents, path);
            node->default_agent = std::move(agents.front());
          }
          return node;
        }))
    return *err;
  if (auto err = read_config_files(
        join_path(dir, "environments"), cfg.environments,
        [&](const auto& doc, const std::string& name, const std::string& path) {
          auto parsed = guarded([&] {
            reader r{path, cfg.profiles};
            if (!valid_identifier(name))
              r.fail("", "invalid environment name " + quote(name) +
                           " (the file name must be 1 to 64 characters from "
                           "[A-Za-z0-9_.-] plus \".json\")");
            return read_environment(r, doc, name, cfg.supervisor);
          });
          if (parsed)
            resolve_agent_paths(parsed->selection.agents, path);
          return parsed;
        }))
    return *err;
  std::map<std::string, schedule_spec> schedules;
  if (auto err = read_config_files(
        join_path(dir, "schedules"), schedules,
        [&](const auto& doc, const std::string& name, const std::string& path) {
          auto spec = check_schedule(doc, name, path, cfg);
          if (spec)
            resolve_task_agents(spec->task, path);
          return spec;
        }))
    return *err;
  cfg.schedules = std::move(schedules);
  // A trigger's task is checked now, as a delivery would make it, not when
  // the first delivery comes.
  for (auto& [name, trigger] : cfg.triggers) {
    auto file = join_path(join_path(dir, "triggers"), name + ".json");
    if (auto task =
          parse_task(json::value(sample_trigger_task(trigger)), file, cfg);
        !task) {
      auto err = task.error();
      err.path = "/task" + err.path;
      return err;
    }
  }
  return cfg;
}

expected<task_spec> load_task_file(const std::string& path,
                                   const config_set& cfg) {
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  auto task = parse_task(*doc, path, cfg);
  // Only the task's own agents are relative to the task file; the
  // environment's were resolved against theirs at load.
  if (task && task->selection && doc->is_object() &&
      doc->get_object().contains("agent_selection"))
    resolve_agent_paths(task->selection->agents, path);
  return task;
}

} // namespace tasksup

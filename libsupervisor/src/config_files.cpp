#include "tasksup/supervisor/config.hpp"

#include "config_parse.hpp"

#include <boost/json/parser.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>
#include <cerrno>
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
  return parser.release();
}

expected<json::value> read_json_file(const std::string& path) {
  std::error_code fs_ec;
  if (fs::is_directory(path, fs_ec))
    return error{path, "", "is a directory, expected a JSON file"};
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file{
    std::fopen(path.c_str(), "rb"), &std::fclose};
  if (!file)
    return error{path, "", std::string{"cannot open: "} + std::strerror(errno)};
  std::string text;
  char buf[65536];
  for (;;) {
    auto n = std::fread(buf, 1, sizeof(buf), file.get());
    if (n > 0) {
      if (text.size() + n > max_file_bytes)
        return error{path, "",
                     "file is larger than " + std::to_string(max_file_bytes) +
                       " bytes"};
      text.append(buf, n);
    }
    if (n < sizeof(buf)) {
      if (std::ferror(file.get()))
        return error{path, "",
                     std::string{"cannot read: "} + std::strerror(errno)};
      break;
    }
  }
  return parse_json_text(text, path);
}

namespace {

/// Reads `dir/name` when it exists, else nullopt; a file that exists but
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

} // namespace

expected<config_set> load_config_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return error{dir, "", "not a directory"};
  auto cfg = builtin_config();
  {
    auto path = join_path(dir, "supervisor.json");
    auto doc = read_optional(path);
    if (!doc)
      return doc.error();
    if (*doc) {
      auto parsed = parse_supervisor_config(**doc, path);
      if (!parsed)
        return parsed.error();
      cfg.supervisor = std::move(*parsed);
    }
  }
  {
    auto path = join_path(dir, "classifier.json");
    auto doc = read_optional(path);
    if (!doc)
      return doc.error();
    if (*doc) {
      auto parsed = parse_classifier_rules(**doc, path);
      if (!parsed)
        return parsed.error();
      cfg.classifier_rules = std::move(*parsed);
    }
  }
  {
    auto path = join_path(dir, "node.json");
    auto doc = read_optional(path);
    if (!doc)
      return doc.error();
    if (*doc) {
      auto parsed = parse_node_config(**doc, path);
      if (!parsed)
        return parsed.error();
      cfg.node = std::move(*parsed);
      std::vector<agent_spec> agents{std::move(cfg.node.default_agent)};
      resolve_agent_paths(agents, path);
      cfg.node.default_agent = std::move(agents.front());
    }
  }
  auto env_dir = join_path(dir, "environments");
  if (fs::is_directory(env_dir, ec)) {
    std::vector<fs::path> files;
    for (fs::directory_iterator it{env_dir, ec}, end; !ec && it != end;
         it.increment(ec))
      if (it->path().extension() == ".json")
        files.push_back(it->path());
    if (ec)
      return error{env_dir, "", "cannot list: " + ec.message()};
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      auto path = file.string();
      auto doc = read_json_file(path);
      if (!doc)
        return doc.error();
      auto name = file.stem().string();
      auto parsed = guarded([&] {
        reader r{path};
        if (!valid_identifier(name))
          r.fail("", "invalid environment name " + quote(name) +
                       " (the file name must be 1 to 64 characters from "
                       "[A-Za-z0-9_.-] plus \".json\")");
        return read_environment(r, *doc, name, cfg.supervisor);
      });
      if (!parsed)
        return parsed.error();
      resolve_agent_paths(parsed->selection.agents, path);
      cfg.environments.emplace(std::move(name), std::move(*parsed));
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

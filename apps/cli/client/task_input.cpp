#include "task_input.hpp"

#include "tasksup/supervisor/config.hpp"

#include <boost/json/serialize.hpp>

#include <filesystem>
#include <system_error>

namespace tasksup::app {

namespace fs = std::filesystem;

void resolve_agent_paths(boost::json::value& doc, const std::string& base_dir) {
  auto* task = doc.if_object();
  if (!task)
    return;
  // A workflow: the rule holds for each of its steps' tasks.
  if (auto* steps = task->if_contains("steps"); steps && steps->is_array()) {
    for (auto& s : steps->get_array())
      if (auto* step = s.if_object())
        if (auto* t = step->if_contains("task"))
          resolve_agent_paths(*t, base_dir);
    return;
  }
  // A group document: the rule holds for each of its tasks, at every level.
  if (auto* group = task->if_contains("group"); group && task->size() == 1) {
    auto* g = group->if_object();
    auto* members = g ? g->if_contains("members") : nullptr;
    if (members && members->is_array())
      for (auto& m : members->get_array())
        resolve_agent_paths(m, base_dir);
    return;
  }
  auto* selection = task->if_contains("agent_selection");
  if (!selection || !selection->is_object())
    return;
  auto* agents = selection->get_object().if_contains("agents");
  if (!agents || !agents->is_array())
    return;
  for (auto& agent : agents->get_array()) {
    if (!agent.is_object())
      continue;
    auto* cli = agent.get_object().if_contains("agent_cli");
    if (!cli || !cli->is_string())
      continue;
    std::string command{cli->get_string()};
    if (command.empty() || command.front() == '/' ||
        command.find('/') == std::string::npos)
      continue;
    *cli = (fs::path{base_dir} / command).lexically_normal().string();
  }
}

expected<task_input> read_task_input(const std::string& path) {
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  std::error_code ec;
  auto dir = fs::absolute(fs::path{path}, ec).parent_path();
  if (ec)
    return error{
      path, {}, "cannot resolve the file's directory: " + ec.message()};
  task_input out;
  out.path = path;
  out.doc = std::move(*doc);
  resolve_agent_paths(out.doc, dir.string());
  out.text = boost::json::serialize(out.doc);
  return out;
}

} // namespace tasksup::app

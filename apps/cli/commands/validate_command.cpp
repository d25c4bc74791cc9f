// `tasksup validate FILE|DIR...`: checks config directories, config files and
// task files without running anything.

#include "commands.hpp"
#include "config_location.hpp"

#include "tasksup/supervisor/agent_profile.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/group_spec.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace tasksup::app {

namespace {

namespace fs = std::filesystem;

/// What a file given to `validate` is, judged by its name.
enum class file_kind {
  supervisor,
  classifier,
  node,
  environment,
  profile,
  role,
  trigger,
  schedule,
  task
};

const char* kind_name(file_kind kind) {
  switch (kind) {
    case file_kind::supervisor:
      return "supervisor settings";
    case file_kind::classifier:
      return "classifier rules";
    case file_kind::node:
      return "node settings";
    case file_kind::environment:
      return "environment";
    case file_kind::profile:
      return "agent profile";
    case file_kind::role:
      return "role";
    case file_kind::trigger:
      return "trigger";
    case file_kind::schedule:
      return "schedule";
    default:
      return "task";
  }
}

file_kind detect_kind(const fs::path& path) {
  auto name = path.filename().string();
  if (name == "supervisor.json")
    return file_kind::supervisor;
  if (name == "classifier.json")
    return file_kind::classifier;
  if (name == "node.json")
    return file_kind::node;
  // `path` may be relative with no parent component ("x.json"): then the
  // absolute form tells whether it sits in an environments/ directory.
  std::error_code ec;
  auto parent = fs::absolute(path, ec).parent_path().filename();
  if (!ec && parent == "environments")
    return file_kind::environment;
  if (!ec && parent == "profiles")
    return file_kind::profile;
  if (!ec && parent == "roles")
    return file_kind::role;
  if (!ec && parent == "triggers")
    return file_kind::trigger;
  if (!ec && parent == "schedules")
    return file_kind::schedule;
  return file_kind::task;
}

/// Validates every argument, reporting each problem; remembers whether any
/// failed.
class validator {
public:
  explicit validator(std::string config_flag)
    : config_flag_(std::move(config_flag)) {}

  bool all_valid() const noexcept { return all_valid_; }

  void check(const std::string& arg) {
    std::error_code ec;
    if (fs::is_directory(arg, ec))
      check_dir(arg);
    else
      check_file(arg, detect_kind(arg), nullptr);
  }

private:
  void report(const error& err) {
    all_valid_ = false;
    std::cerr << err.to_string() << '\n';
  }

  void ok(const std::string& path, const std::string& kind) {
    std::cout << "ok: " << path << " (" << kind << ")\n";
  }

  /// Checks one file as `kind`; environments are checked over `global`
  /// settings when given. Returns the parsed supervisor settings for a valid
  /// supervisor file (the directory check merges environments over them).
  std::optional<supervisor_config>
  check_file(const std::string& path, file_kind kind,
             const supervisor_config* global,
             const config_set* tasks_cfg = nullptr) {
    auto doc = read_json_file(path);
    if (!doc) {
      report(doc.error());
      return std::nullopt;
    }
    std::optional<error> err;
    std::optional<supervisor_config> sup;
    switch (kind) {
      case file_kind::supervisor: {
        auto res = parse_supervisor_config(*doc, path);
        if (res)
          sup = std::move(*res);
        else
          err = res.error();
        break;
      }
      case file_kind::classifier:
        if (auto res = parse_classifier_rules(*doc, path); !res)
          err = res.error();
        break;
      case file_kind::node:
        if (auto res = parse_node_config(*doc, path, profiles_near(path, 1));
            !res)
          err = res.error();
        break;
      case file_kind::environment:
        err = check_environment(path, *doc, global);
        break;
      case file_kind::profile:
        if (auto res =
              parse_user_profile(*doc, fs::path{path}.stem().string(), path);
            !res)
          err = res.error();
        break;
      case file_kind::role:
        // On its own: its overlays are checked with its directory.
        if (auto res = parse_role(*doc, path, fs::path{path}.stem().string());
            !res)
          err = res.error();
        break;
      case file_kind::trigger: {
        // Its secret file is relative to the config directory above
        // triggers/.
        std::error_code ec;
        auto config_dir = fs::absolute(path, ec).parent_path().parent_path();
        if (auto res = parse_trigger(*doc, path, fs::path{path}.stem().string(),
                                     config_dir.string());
            !res)
          err = res.error();
        break;
      }
      case file_kind::schedule: {
        // Its task is checked as a run of it would be, against the
        // config tasks are checked against.
        const auto* cfg = tasks_cfg != nullptr ? tasks_cfg : task_config();
        if (cfg == nullptr)
          err = error{path, "", "not checked: the config directory is invalid"};
        else if (auto res = check_schedule(*doc, fs::path{path}.stem().string(),
                                           path, *cfg);
                 !res)
          err = res.error();
        break;
      }
      case file_kind::task:
        err = check_task(path, *doc, tasks_cfg);
        break;
    }
    if (err)
      report(*err);
    else
      ok(path, kind == file_kind::task && is_workflow_document(*doc)
                 ? "workflow"
               : kind == file_kind::task && is_group_document(*doc)
                 ? "group"
                 : kind_name(kind));
    return sup;
  }

  std::optional<error> check_environment(const std::string& path,
                                         const boost::json::value& doc,
                                         const supervisor_config* global) {
    auto name = fs::path{path}.stem().string();
    auto res = parse_environment(doc, path, name, profiles_near(path, 2));
    if (!res)
      return res.error();
    // Its supervisor settings must also hold over the directory's globals.
    if (global != nullptr && res->supervisor_overrides) {
      auto merged = parse_supervisor_config(
        boost::json::value(*res->supervisor_overrides), path, *global);
      if (!merged) {
        auto err = merged.error();
        err.path = "/supervisor" + err.path;
        return err;
      }
    }
    return std::nullopt;
  }

  /// The user profiles of the config directory `up` levels above `path`
  /// (node.json: 1, environments/x.json: 2), which its agents may name; none
  /// when they do not load (each profile file reports its own error).
  static profile_map profiles_near(const std::string& path, int up) {
    std::error_code ec;
    auto dir = fs::absolute(path, ec).parent_path();
    if (up > 1)
      dir = dir.parent_path();
    auto profiles = load_profiles_dir((dir / "profiles").string());
    return profiles ? std::move(*profiles) : profile_map{};
  }

  /// A task file, checked as `run` and `submit` check it: parsed, resolved
  /// against `cfg` (the directory's own config for task files inside a
  /// config directory, else the one `--config` names) and validated.
  std::optional<error> check_task(const std::string& path,
                                  const boost::json::value& doc,
                                  const config_set* cfg = nullptr) {
    if (cfg == nullptr)
      cfg = task_config();
    if (cfg == nullptr)
      return error{path, "", "not checked: the config directory is invalid"};
    if (is_group_document(doc)) {
      // A group document: its tree and each of its tasks, as the node
      // checks them.
      auto group = parse_group(doc, path, *cfg);
      if (!group)
        return group.error();
      warn_tasks(path, *group);
      return std::nullopt;
    }
    auto res = parse_task(doc, path, *cfg);
    if (!res)
      return res.error();
    for (auto& w : task_warnings(*res))
      std::cerr << "warning: " << path << ": " << w << '\n';
    return std::nullopt;
  }

  /// The warnings of every task of a group's tree, each naming its task.
  static void warn_tasks(const std::string& path, const group_spec& g) {
    for (auto& m : g.members) {
      if (m.group)
        warn_tasks(path, *m.group);
      else if (m.task)
        for (auto& w : task_warnings(*m.task))
          std::cerr << "warning: " << path << ": task '" << m.id << "': " << w
                    << '\n';
    }
  }

  /// The config tasks are checked against, loaded once; null (after
  /// reporting why) when the config directory does not load.
  const config_set* task_config() {
    if (!task_config_loaded_) {
      task_config_loaded_ = true;
      auto dir = resolve_config_dir(config_flag_);
      if (!dir) {
        task_config_ = std::make_unique<config_set>(builtin_config());
      } else if (auto cfg = load_config_dir(*dir); cfg) {
        task_config_ = std::make_unique<config_set>(std::move(*cfg));
      } else {
        report(cfg.error());
      }
    }
    return task_config_.get();
  }

  /// A config directory: each file on its own, so that every problem is
  /// reported, then the directory as a whole.
  void check_dir(const std::string& dir) {
    bool before = all_valid_;
    all_valid_ = true;
    std::optional<supervisor_config> global;
    for (auto [name, kind] :
         {std::pair{"supervisor.json", file_kind::supervisor},
          std::pair{"classifier.json", file_kind::classifier},
          std::pair{"node.json", file_kind::node}}) {
      auto path = (fs::path{dir} / name).string();
      std::error_code ec;
      if (!fs::exists(path, ec))
        continue;
      auto sup = check_file(path, kind, nullptr);
      if (kind == file_kind::supervisor)
        global = std::move(sup);
    }
    std::error_code pec;
    for (auto [sub, kind] : {std::pair{"profiles", file_kind::profile},
                             std::pair{"roles", file_kind::role},
                             std::pair{"triggers", file_kind::trigger}})
      if (auto files = fs::path{dir} / sub; fs::is_directory(files, pec))
        for (const auto& entry : fs::directory_iterator{files, pec})
          if (entry.path().extension() == ".json")
            check_file(entry.path().string(), kind, nullptr);
    auto env_dir = fs::path{dir} / "environments";
    std::error_code ec;
    if (fs::is_directory(env_dir, ec)) {
      std::vector<std::string> files;
      for (fs::directory_iterator it{env_dir, ec}, end; !ec && it != end;
           it.increment(ec))
        if (it->path().extension() == ".json")
          files.push_back(it->path().string());
      if (ec)
        report(error{env_dir.string(), "", "cannot list: " + ec.message()});
      std::sort(files.begin(), files.end());
      supervisor_config defaults;
      for (const auto& file : files)
        check_file(file, file_kind::environment, global ? &*global : &defaults);
    }
    bool config_ok = all_valid_;
    std::optional<config_set> dir_cfg;
    if (all_valid_) {
      // Per-file checks passed; loading the whole catches anything that
      // only shows in combination.
      if (auto cfg = load_config_dir(dir); cfg) {
        dir_cfg = std::move(*cfg);
      } else {
        report(cfg.error());
        config_ok = false;
      }
    }
    // Schedules: their tasks are checked against this directory's config
    // (loading it checked them too: an invalid one was reported above).
    if (auto files = fs::path{dir} / "schedules";
        dir_cfg && fs::is_directory(files, pec))
      for (const auto& entry : fs::directory_iterator{files, pec})
        if (entry.path().extension() == ".json")
          check_file(entry.path().string(), file_kind::schedule, nullptr,
                     &*dir_cfg);
    // Every other JSON file below the directory is a task file (e.g.
    // config/examples/*.json), checked against this directory's config when
    // it holds one, else against the one --config names.
    bool has_config = is_config_dir(dir);
    auto tasks = task_files(dir);
    if (has_config && !config_ok && !tasks.empty()) {
      for (const auto& file : tasks)
        report(error{file, "", "not checked: the config directory is invalid"});
    } else {
      for (const auto& file : tasks)
        check_file(file, file_kind::task, nullptr,
                   has_config ? &*dir_cfg : nullptr);
    }
    if ((has_config || tasks.empty()) && config_ok && all_valid_)
      ok(dir, "config directory");
    all_valid_ = all_valid_ && before;
  }

  /// True when `dir` holds a config file or an environments/ directory.
  static bool is_config_dir(const std::string& dir) {
    std::error_code ec;
    for (auto name : {"supervisor.json", "classifier.json", "node.json"})
      if (fs::exists(fs::path{dir} / name, ec))
        return true;
    return fs::is_directory(fs::path{dir} / "environments", ec);
  }

  /// The `.json` files below `dir` that are not config files (nor in
  /// environments/, profiles/, roles/ or triggers/), sorted.
  std::vector<std::string> task_files(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    auto root = fs::path{dir};
    for (fs::recursive_directory_iterator it{root, ec}, end; !ec && it != end;
         it.increment(ec)) {
      auto rel = it->path().lexically_relative(root);
      if (it->is_directory(ec)) {
        // environments/, profiles/, roles/ and triggers/ are config,
        // checked as such.
        if (rel == "environments" || rel == "profiles" || rel == "roles" ||
            rel == "triggers" || rel == "schedules")
          it.disable_recursion_pending();
        continue;
      }
      if (it->path().extension() != ".json")
        continue;
      auto name = rel.string();
      if (name == "supervisor.json" || name == "classifier.json" ||
          name == "node.json")
        continue;
      out.push_back(it->path().string());
    }
    if (ec)
      report(error{dir, "", "cannot list: " + ec.message()});
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string config_flag_;
  bool all_valid_ = true;
  bool task_config_loaded_ = false;
  std::unique_ptr<config_set> task_config_;
};

void setup(CLI::App& app, int& status) {
  auto* cmd = app.add_subcommand(
    "validate", "Check config directories, config files and task files "
                "without running anything.");
  cmd->footer(
    std::string{
      "A directory is checked as a config directory (supervisor.json, "
      "classifier.json, node.json, environments/*.json, profiles/*.json, "
      "roles/*.json, triggers/*.json, schedules/*.json); every other .json "
      "file below it is a task file, checked against that directory's config "
      "(or, in a directory without config files, against the config "
      "directory). A file's kind comes "
      "from its name: supervisor.json, classifier.json, node.json, any .json "
      "file in an environments/, profiles/, roles/, triggers/ or schedules/ "
      "directory (a trigger's secret_file is relative to the directory above "
      "triggers/; a schedule's task is checked as a task file is); "
      "anything else "
      "is a task, group or workflow file, "
      "checked against the config directory. Task files get exactly the "
      "checks `run` and `submit` make. "} +
    config_dir_rule +
    "\nPrints `ok: FILE (kind)` for each valid file and `FILE: /json/path: "
    "problem` on stderr for each invalid one. Exit status: 0 when all are "
    "valid, 2 otherwise.");
  struct options {
    std::vector<std::string> paths;
    std::string config;
  };
  auto opts = std::make_shared<options>();
  cmd->add_option("paths", opts->paths, "Config directories or JSON files")
    ->required()
    ->type_name("FILE|DIR");
  cmd
    ->add_option("--config", opts->config,
                 "Config directory that task files are checked against")
    ->type_name("DIR");
  cmd->callback([opts, &status] {
    validator v{opts->config};
    for (const auto& path : opts->paths)
      v.check(path);
    status = v.all_valid() ? exit_status::ok : exit_status::bad_input;
  });
}

const command_registrar registrar{20, setup};

} // namespace

} // namespace tasksup::app

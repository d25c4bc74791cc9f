#include "tasksup/supervisor/group_spec.hpp"

#include "config_reader.hpp"

#include "tasksup/supervisor/answer.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace tasksup {

using namespace detail;

group_shape group_spec::shape() const {
  group_shape out;
  out.strategy = strategy;
  out.intensity = intensity;
  out.shutdown = shutdown;
  out.members.reserve(members.size());
  for (const auto& m : members)
    out.members.push_back(
      {m.id, m.restart, m.significant, m.depends_on, m.continue_on_failure});
  return out;
}

std::vector<step_template> find_step_templates(std::string_view text) {
  std::vector<step_template> out;
  constexpr std::string_view open = "{{steps.";
  for (auto at = text.find(open); at != std::string_view::npos;
       at = text.find(open, at + 1)) {
    step_template t;
    auto close = text.find("}}", at);
    auto end = close == std::string_view::npos ? text.size() : close + 2;
    t.text = std::string{text.substr(at, end - at)};
    if (close != std::string_view::npos) {
      auto inner = text.substr(at + open.size(), close - at - open.size());
      auto dot = inner.find('.');
      if (dot != std::string_view::npos && dot > 0 && dot + 1 < inner.size()) {
        t.step = std::string{inner.substr(0, dot)};
        t.field = std::string{inner.substr(dot + 1)};
        t.valid = valid_identifier(t.step);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

bool is_workflow_document(const boost::json::value& doc) {
  return doc.is_object() && doc.get_object().contains("steps");
}

bool is_group_document(const boost::json::value& doc) {
  return (doc.is_object() && doc.get_object().size() == 1 &&
          doc.get_object().contains("group")) ||
         is_workflow_document(doc);
}

namespace {

/// The most restarts an intensity may allow.
constexpr int max_intensity_restarts = 1000000;

/// Reads a group tree, checking what spans it (ids, nesting, size).
class tree_reader {
public:
  tree_reader(const reader& r, const config_set& cfg) : r_(r), cfg_(cfg) {}

  /// The group object at `path`; `nested` for a group that is a member.
  group_spec read(const json::value& v, const std::string& path, bool nested) {
    const auto& obj = r_.object(v, path);
    if (nested)
      r_.check_keys(obj, path,
                    {"id", "strategy", "intensity", "auto_shutdown", "members",
                     "restart", "significant"});
    else
      r_.check_keys(
        obj, path, {"id", "strategy", "intensity", "auto_shutdown", "members"});
    group_spec g;
    auto id_path = child(path, "id");
    g.id = r_.identifier(r_.required(obj, path, "id"), id_path, "a group id");
    for (const auto& [above, above_path] : ancestors_)
      if (above == g.id)
        r_.fail(id_path, "group " + quote(g.id) +
                           " contains itself: the group at " + above_path +
                           " has this id");
    claim(g.id, id_path);
    if (ancestors_.size() + 1 > max_group_depth)
      r_.fail(path, "groups nest at most " + std::to_string(max_group_depth) +
                      " levels deep");
    if (const auto* x = obj.if_contains("strategy"))
      g.strategy = enum_value<group_strategy>(
        r_, *x, child(path, "strategy"), parse_group_strategy,
        {"one_for_one", "one_for_all", "rest_for_one"});
    if (const auto* x = obj.if_contains("auto_shutdown"))
      g.shutdown = enum_value<auto_shutdown>(
        r_, *x, child(path, "auto_shutdown"), parse_auto_shutdown,
        {"never", "any_significant", "all_significant"});
    if (const auto* x = obj.if_contains("intensity")) {
      auto ptr = child(path, "intensity");
      const auto& sub = r_.object(*x, ptr);
      r_.check_keys(sub, ptr, {"max_restarts", "period_s"});
      if (const auto* y = sub.if_contains("max_restarts"))
        g.intensity.max_restarts = r_.int_value(*y, child(ptr, "max_restarts"),
                                                0, max_intensity_restarts);
      if (const auto* y = sub.if_contains("period_s"))
        g.intensity.period_s = r_.seconds(*y, child(ptr, "period_s"), true);
    }
    auto members_path = child(path, "members");
    const auto& members =
      r_.array(r_.required(obj, path, "members"), members_path);
    if (members.empty())
      r_.fail(members_path, "a group needs at least one member");
    if (members.size() > max_group_members)
      r_.fail(members_path, "a group has at most " +
                              std::to_string(max_group_members) + " members");
    ancestors_.emplace_back(g.id, path);
    for (std::size_t i = 0; i < members.size(); ++i)
      g.members.push_back(member(members[i], child(members_path, i), g));
    ancestors_.pop_back();
    return g;
  }

private:
  group_member_spec member(const json::value& v, const std::string& path,
                           const group_spec& g) {
    if (++total_ > max_tree_members)
      r_.fail(path, "a tree has at most " + std::to_string(max_tree_members) +
                      " members");
    const auto& obj = r_.object(v, path);
    group_member_spec m;
    std::string significant_path;
    if (const auto* sub = obj.if_contains("group")) {
      r_.check_keys(obj, path, {"group"});
      auto gpath = child(path, "group");
      auto nested = std::make_shared<group_spec>(read(*sub, gpath, true));
      const auto& gobj = sub->get_object();
      if (const auto* x = gobj.if_contains("restart"))
        m.restart = enum_value<restart_type>(
          r_, *x, child(gpath, "restart"), parse_restart_type,
          {"transient", "permanent", "temporary"});
      if (const auto* x = gobj.if_contains("significant")) {
        significant_path = child(gpath, "significant");
        m.significant = r_.boolean(*x, significant_path);
      }
      m.id = nested->id;
      m.group = std::move(nested);
    } else {
      // A task, with `significant` beside its own keys.
      json::object task_doc = obj;
      if (const auto* x = obj.if_contains("significant")) {
        significant_path = child(path, "significant");
        m.significant = r_.boolean(*x, significant_path);
        task_doc.erase("significant");
      }
      auto task =
        parse_task(json::value(std::move(task_doc)), r_.where(), cfg_);
      if (!task) {
        auto err = task.error();
        throw parse_failure{
          error{err.where, shown_pointer(path + err.path), err.what}};
      }
      if (task->id.empty())
        r_.fail(path, "missing required key \"id\": a member task needs one "
                      "(it names the member to stop, status and wait)");
      claim(task->id, child(path, "id"));
      m.id = task->id;
      m.restart = task->settings.restart;
      m.task = std::move(*task);
    }
    if (m.significant) {
      if (g.shutdown == auto_shutdown::never)
        r_.fail(significant_path,
                "a significant member needs the group's \"auto_shutdown\" to "
                "be \"any_significant\" or \"all_significant\" (OTP refuses "
                "one with \"never\", the default)");
      if (m.restart == restart_type::permanent)
        r_.fail(significant_path,
                "a permanent member cannot be significant: it is restarted "
                "however it ends, so its end never ends the group (OTP "
                "refuses it); make it transient or temporary");
    }
    return m;
  }

  /// Records `id` at `path`, failing when the tree has it already.
  void claim(const std::string& id, const std::string& path) {
    auto [i, added] = seen_.emplace(id, path);
    if (!added)
      r_.fail(path, "duplicate id " + quote(id) + ": " + i->second +
                      " has it too; ids are unique across the whole tree "
                      "(they name the members to stop, status and wait)");
  }

  const reader& r_;
  const config_set& cfg_;
  /// The groups above the one being read: id and pointer.
  std::vector<std::pair<std::string, std::string>> ancestors_;
  /// Every id read so far, with its pointer.
  std::map<std::string, std::string> seen_;
  std::size_t total_ = 0;
};

/// Reads a workflow document as a group of strategy `steps`.
class workflow_reader {
public:
  workflow_reader(const reader& r, const config_set& cfg) : r_(r), cfg_(cfg) {}

  group_spec read(const json::value& doc) {
    const auto& obj = r_.object(doc, "");
    r_.check_keys(obj, "", {"id", "steps"});
    group_spec g;
    g.id = r_.identifier(r_.required(obj, "", "id"), "/id", "a workflow id");
    g.strategy = group_strategy::steps;
    g.intensity.max_restarts = 0;
    const auto& steps = r_.array(r_.required(obj, "", "steps"), "/steps");
    if (steps.empty())
      r_.fail("/steps", "a workflow needs at least one step");
    if (steps.size() > max_workflow_steps)
      r_.fail("/steps", "a workflow has at most " +
                          std::to_string(max_workflow_steps) + " steps");
    for (std::size_t i = 0; i < steps.size(); ++i)
      g.members.push_back(step(g.id, steps[i], child("/steps", i), i));
    for (std::size_t i = 0; i < steps.size(); ++i)
      link(g, i);
    refuse_taken_racer_ids(g);
    refuse_cycles(g);
    for (std::size_t i = 0; i < steps.size(); ++i)
      check_templates(g, i);
    return g;
  }

private:
  group_member_spec step(const std::string& workflow, const json::value& v,
                         const std::string& path, std::size_t i) {
    const auto& obj = r_.object(v, path);
    r_.check_keys(
      obj, path,
      {"id", "task", "depends_on", "continue_on_failure", "best_of"});
    auto id_path = child(path, "id");
    auto name =
      r_.identifier(r_.required(obj, path, "id"), id_path, "a step id");
    if (auto [at, added] = index_.emplace(name, i); !added)
      r_.fail(id_path, "duplicate step id " + quote(name) + ": " +
                         child(child("/steps", at->second), "id") +
                         " has it too");
    names_.push_back(name);
    auto task_id = step_task_id(workflow, name);
    if (task_id.size() > max_id_length)
      r_.fail(id_path, "the step's task id " + quote(task_id) +
                         " (the workflow's id, a dot and the step's id) is "
                         "longer than " +
                         std::to_string(max_id_length) + " characters");
    auto task_path = child(path, "task");
    json::object task_doc =
      r_.object(r_.required(obj, path, "task"), task_path);
    if (const auto* x = task_doc.if_contains("id");
        x && !(x->is_string() && x->get_string() == task_id))
      r_.fail(child(task_path, "id"),
              "a step's task is named by the workflow and the step (" +
                quote(task_id) + "): leave \"id\" out");
    task_doc["id"] = task_id;
    auto task = parse_task(json::value(std::move(task_doc)), r_.where(), cfg_);
    if (!task) {
      auto err = task.error();
      throw parse_failure{
        error{err.where, shown_pointer(task_path + err.path), err.what}};
    }
    if (task->settings.restart == restart_type::permanent)
      r_.fail(child(child(task_path, "supervisor"), "restart"),
              "a step runs until it ends: its task cannot be permanent");
    group_member_spec m;
    m.id = task_id;
    m.restart = restart_type::temporary;
    int best_of = 1;
    if (const auto* x = obj.if_contains("best_of"))
      best_of = r_.int_value(*x, child(path, "best_of"), 1, max_best_of);
    if (best_of > 1) {
      if (auto last = racer_task_id(task_id, best_of);
          last.size() > max_id_length)
        r_.fail(id_path, "the step's last attempt's task id " + quote(last) +
                           " (the step's task id, a dot and the number) is "
                           "longer than " +
                           std::to_string(max_id_length) + " characters");
      m.group = race(task_id, std::move(*task), best_of);
    } else {
      m.task = std::move(*task);
    }
    if (const auto* x = obj.if_contains("continue_on_failure"))
      m.continue_on_failure =
        r_.boolean(*x, child(path, "continue_on_failure"));
    std::vector<std::pair<std::string, std::string>> deps;
    if (const auto* x = obj.if_contains("depends_on")) {
      auto deps_path = child(path, "depends_on");
      const auto& arr = r_.array(*x, deps_path);
      for (std::size_t k = 0; k < arr.size(); ++k) {
        auto at = child(deps_path, k);
        deps.emplace_back(r_.identifier(arr[k], at, "a step id"), at);
      }
    }
    deps_.push_back(std::move(deps));
    return m;
  }

  /// A best-of-N step: a group of strategy `race` named `id`, of `n` copies
  /// of `task`, the k-th (from 0) with its agent chain rotated by k.
  static std::shared_ptr<const group_spec> race(const std::string& id,
                                                task_spec task, int n) {
    auto g = std::make_shared<group_spec>();
    g->id = id;
    g->strategy = group_strategy::race;
    g->intensity.max_restarts = 0;
    for (int k = 0; k < n; ++k) {
      group_member_spec racer;
      racer.id = racer_task_id(id, k + 1);
      racer.restart = restart_type::temporary;
      auto copy = task;
      copy.id = racer.id;
      if (auto& sel = copy.selection; sel && !sel->agents.empty()) {
        auto first = static_cast<std::size_t>(k) % sel->agents.size();
        std::rotate(sel->agents.begin(),
                    sel->agents.begin() + static_cast<std::ptrdiff_t>(first),
                    sel->agents.end());
        // The rotation is the racers' round-robin: the registry's across
        // tasks would undo it.
        sel->mode = selection_mode::fallback;
      }
      racer.task = std::move(copy);
      g->members.push_back(std::move(racer));
    }
    return g;
  }

  /// A best-of-N step's racers are "<step>.1" to ".N" within the workflow:
  /// no other step may have one of those ids.
  void refuse_taken_racer_ids(const group_spec& g) {
    for (std::size_t i = 0; i < g.members.size(); ++i) {
      if (!g.members[i].group)
        continue;
      auto n = static_cast<int>(g.members[i].group->members.size());
      for (int k = 1; k <= n; ++k) {
        auto other = index_.find(names_[i] + "." + std::to_string(k));
        if (other == index_.end())
          continue;
        r_.fail(child(child("/steps", other->second), "id"),
                "the step id " + quote(other->first) + " is taken: step " +
                  quote(names_[i]) + " has \"best_of\": " + std::to_string(n) +
                  ", and its attempts' tasks are " +
                  quote(racer_task_id(g.members[i].id, 1)) + " to " +
                  quote(racer_task_id(g.members[i].id, n)));
      }
    }
  }

  /// Step i's `depends_on` as indexes: every name a step of the workflow,
  /// other than itself, once.
  void link(group_spec& g, std::size_t i) {
    auto& m = g.members[i];
    for (auto& [name, at] : deps_[i]) {
      auto d = index_.find(name);
      if (d == index_.end())
        r_.fail(at, "unknown step " + quote(name) + " (the steps are " +
                      step_list() + ")");
      if (d->second == i)
        r_.fail(at, "a step cannot depend on itself");
      if (std::find(m.depends_on.begin(), m.depends_on.end(), d->second) !=
          m.depends_on.end())
        r_.fail(at, "step " + quote(name) + " is listed twice");
      m.depends_on.push_back(d->second);
    }
  }

  /// Refuses a cycle of dependencies, naming its steps in order.
  void refuse_cycles(const group_spec& g) {
    // 0: not visited, 1: on the current path, 2: done.
    std::vector<int> mark(g.members.size(), 0);
    std::vector<std::size_t> path;
    std::vector<std::pair<std::size_t, std::size_t>> stack;
    for (std::size_t root = 0; root < g.members.size(); ++root) {
      if (mark[root] != 0)
        continue;
      stack.emplace_back(root, 0);
      mark[root] = 1;
      path.push_back(root);
      while (!stack.empty()) {
        auto& [i, k] = stack.back();
        auto& deps = g.members[i].depends_on;
        if (k == deps.size()) {
          mark[i] = 2;
          path.pop_back();
          stack.pop_back();
          continue;
        }
        auto d = deps[k++];
        if (mark[d] == 1) {
          // The cycle: from d along the path to i, then back to d.
          auto from = std::find(path.begin(), path.end(), d);
          std::string text;
          for (auto j = from; j != path.end(); ++j)
            text += names_[*j] + " -> ";
          text += names_[d];
          r_.fail(child(child("/steps", i), "depends_on"),
                  "a cycle of dependencies: " + text);
        }
        if (mark[d] == 0) {
          mark[d] = 1;
          path.push_back(d);
          stack.emplace_back(d, 0);
        }
      }
    }
  }

  /// Step i's prompt may name, as `{{steps.<id>.branch}}`, the branch a
  /// step it depends on (directly or not) delivers, and as
  /// `{{steps.<id>.answer.<field>}}` a field its answer schema names: any
  /// other template is refused.
  void check_templates(const group_spec& g, std::size_t i) {
    const auto& prompt = step_task(g.members[i])->prompt;
    auto path = child(child(child("/steps", i), "task"), "prompt");
    for (auto& ref : find_step_templates(prompt)) {
      if (!ref.valid)
        r_.fail(path, "a template " + quote(ref.text) +
                        " is not of the form {{steps.<step id>.branch}} or "
                        "{{steps.<step id>.answer.<field>}}");
      auto d = index_.find(ref.step);
      if (d == index_.end())
        r_.fail(path, "the template " + quote(ref.text) +
                        " names an unknown step " + quote(ref.step));
      if (!depends_on(g, i, d->second))
        r_.fail(path, "the template " + quote(ref.text) + " names step " +
                        quote(ref.step) +
                        ", which this step does not depend on: it may not "
                        "have run");
      const auto& dep = *step_task(g.members[d->second]);
      constexpr std::string_view answer_prefix = "answer.";
      if (ref.field.rfind(answer_prefix, 0) == 0) {
        check_answer_field(path, ref, dep);
        continue;
      }
      if (ref.field != "branch")
        r_.fail(path, "the template " + quote(ref.text) + " names the field " +
                        quote(ref.field) +
                        ": a step offers \"branch\" and "
                        "\"answer.<field>\"");
      if (!dep.repo || dep.deliver != delivery_mode::branch)
        r_.fail(path, "the template " + quote(ref.text) +
                        " names the branch "
                        "of step " +
                        quote(ref.step) +
                        ", which delivers none (it needs a \"repo\" and "
                        "\"deliver\": \"branch\")");
    }
  }

  /// `{{steps.<id>.answer.<field>}}` names a field step `dep`'s answer
  /// schema lists among its top-level `properties`.
  void check_answer_field(const std::string& path, const step_template& ref,
                          const task_spec& dep) {
    auto field = ref.field.substr(std::string_view{"answer."}.size());
    if (dep.answer_schema.empty())
      r_.fail(path, "the template " + quote(ref.text) +
                      " names the answer of step " + quote(ref.step) +
                      ", which has no answer schema (\"answer_schema\", or "
                      "a role with one)");
    auto schema = answer_schema::compile_text(dep.answer_schema);
    if (!schema || !(*schema)->declares(field))
      r_.fail(path, "the template " + quote(ref.text) + " names the field " +
                      quote(field) + ", which the answer schema of step " +
                      quote(ref.step) + " does not list in its properties");
  }

  /// Whether step i depends on step d, directly or not.
  static bool depends_on(const group_spec& g, std::size_t i, std::size_t d) {
    std::vector<std::size_t> todo{i};
    std::vector<bool> seen(g.members.size(), false);
    while (!todo.empty()) {
      auto k = todo.back();
      todo.pop_back();
      for (auto x : g.members[k].depends_on) {
        if (x == d)
          return true;
        if (!seen[x]) {
          seen[x] = true;
          todo.push_back(x);
        }
      }
    }
    return false;
  }

  std::string step_list() const {
    std::string out;
    for (std::size_t i = 0; i < names_.size() && i < 20; ++i)
      out += (out.empty() ? "" : ", ") + quote(names_[i]);
    if (names_.size() > 20)
      out += ", ...";
    return out;
  }

  const reader& r_;
  const config_set& cfg_;
  /// Step ids -> their index, and in order.
  std::map<std::string, std::size_t> index_;
  std::vector<std::string> names_;
  /// Each step's `depends_on` as written: name and pointer.
  std::vector<std::vector<std::pair<std::string, std::string>>> deps_;
};

void resolve_tree_paths(group_spec& g, const json::value& doc,
                        const std::string& file) {
  if (g.strategy == group_strategy::steps) {
    // A workflow: its steps' tasks.
    const auto& steps = doc.at("steps").get_array();
    for (std::size_t i = 0; i < g.members.size(); ++i) {
      auto& m = g.members[i];
      const auto& task = steps[i].get_object().at("task").get_object();
      if (!task.contains("agent_selection"))
        continue;
      if (m.task && m.task->selection)
        resolve_agent_paths(m.task->selection->agents, file);
      if (m.group) {
        // A best-of-N step's racers.
        auto copy = std::make_shared<group_spec>(*m.group);
        for (auto& racer : copy->members)
          if (racer.task && racer.task->selection)
            resolve_agent_paths(racer.task->selection->agents, file);
        m.group = std::move(copy);
      }
    }
    return;
  }
  const auto& members = doc.at("members").get_array();
  for (std::size_t i = 0; i < g.members.size(); ++i) {
    auto& m = g.members[i];
    const auto& mdoc = members[i].get_object();
    if (m.group) {
      auto copy = std::make_shared<group_spec>(*m.group);
      resolve_tree_paths(*copy, mdoc.at("group"), file);
      m.group = std::move(copy);
    } else if (m.task && m.task->selection &&
               mdoc.contains("agent_selection")) {
      resolve_agent_paths(m.task->selection->agents, file);
    }
  }
}

void collect_ids(const group_spec& g, std::vector<std::string>& out) {
  out.push_back(g.id);
  for (const auto& m : g.members) {
    if (m.group)
      collect_ids(*m.group, out);
    else
      out.push_back(m.id);
  }
}

} // namespace

expected<group_spec> parse_group(const boost::json::value& doc,
                                 std::string_view where,
                                 const config_set& cfg) {
  return guarded([&] {
    reader r{where, cfg.profiles};
    if (is_workflow_document(doc))
      return workflow_reader{r, cfg}.read(doc);
    const auto& obj = r.object(doc, "");
    r.check_keys(obj, "", {"group"});
    tree_reader tree{r, cfg};
    return tree.read(r.required(obj, "", "group"), "/group", false);
  });
}

expected<group_spec> load_group_file(const std::string& path,
                                     const config_set& cfg) {
  auto doc = read_json_file(path);
  if (!doc)
    return doc.error();
  auto g = parse_group(*doc, path, cfg);
  if (g)
    resolve_tree_paths(
      *g, g->strategy == group_strategy::steps ? *doc : doc->at("group"), path);
  return g;
}

std::vector<std::string> tree_ids(const group_spec& g) {
  std::vector<std::string> out;
  collect_ids(g, out);
  return out;
}

std::vector<const group_spec*> tree_groups(const group_spec& top) {
  std::vector<const group_spec*> out{&top};
  for (std::size_t i = 0; i < out.size(); ++i)
    for (auto& m : out[i]->members)
      if (m.group)
        out.push_back(m.group.get());
  return out;
}

const task_spec* step_task(const group_member_spec& m) {
  if (m.task)
    return &*m.task;
  if (m.group && m.group->strategy == group_strategy::race &&
      !m.group->members.empty() && m.group->members.front().task)
    return &*m.group->members.front().task;
  return nullptr;
}

std::string racer_task_id(std::string_view step, int k) {
  std::string out{step};
  out += '.';
  out += std::to_string(k);
  return out;
}

std::string step_task_id(std::string_view workflow, std::string_view step) {
  std::string out{workflow};
  out += '.';
  out += step;
  return out;
}

} // namespace tasksup

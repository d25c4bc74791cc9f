#include "tasksup/supervisor/group_spec.hpp"

#include "config_reader.hpp"

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
    out.members.push_back({m.id, m.restart, m.significant});
  return out;
}

bool is_group_document(const boost::json::value& doc) {
  return doc.is_object() && doc.get_object().size() == 1 &&
         doc.get_object().contains("group");
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

void resolve_tree_paths(group_spec& g, const json::value& doc,
                        const std::string& file) {
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
    resolve_tree_paths(*g, doc->at("group"), path);
  return g;
}

std::vector<std::string> tree_ids(const group_spec& g) {
  std::vector<std::string> out;
  collect_ids(g, out);
  return out;
}

} // namespace tasksup

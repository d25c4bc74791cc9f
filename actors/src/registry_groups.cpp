// The registry as the host of groups: a group document's tree runs as group
// supervisors (group_supervisor_actor.hpp) whose task members are the
// registry's tasks. A member's run is a task run like any other; its end
// goes to its group, and a restart is a rerun of the same task id that keeps
// its attempt directories, its state directory and its history.

#include "registry_state.hpp"

#include "tasksup/actors/events.hpp"

#include "tasksup/supervisor/events.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::detail {

namespace {

/// How a member's run counts for its group.
member_end member_end_of(const task_result& r) {
  switch (r.outcome) {
    case task_outcome::succeeded:
      return member_end::normal;
    case task_outcome::stopped:
      return member_end::stopped;
    case task_outcome::failed:
      break;
  }
  return member_end::failed;
}

/// Holds every id of `g`'s tree for it, groups included.
void hold_tree(registry_ptr self, const group_spec& g, const std::string& top,
               const std::string& trace_id) {
  auto& st = self->state;
  group_record rec;
  rec.top = top;
  rec.trace_id = trace_id;
  st.groups.insert_or_assign(g.id, std::move(rec));
  st.in_tree.insert_or_assign(g.id, top);
  // The hub keeps the group's events for `events` and `describe`.
  self->send(st.hub, detail::track_atom::value, g.id, std::int64_t{0},
             std::int64_t{0}, false);
  for (auto& m : g.members) {
    if (m.group)
      hold_tree(self, *m.group, top, trace_id);
    else
      st.in_tree.insert_or_assign(m.id, top);
  }
}

/// The words of a group's result: why it ended, and by which member.
std::string end_words(const std::string& id, std::string_view how,
                      std::string_view member) {
  std::string text = "group '" + id + "' ";
  if (how == "completed")
    text += "completed: every member ended";
  else if (how == "auto_shutdown")
    text += "shut down: its significant member '" + std::string{member} +
            "' ended (auto_shutdown)";
  else if (how == "intensity")
    text += "gave up: more restarts than its intensity allows (the last "
            "caused by '" +
            std::string{member} + "')";
  else if (how == "stopped")
    text += "was stopped";
  else if (how == "start_failed")
    text += "could not start its member '" + std::string{member} + "'";
  else
    text += "ended: " + std::string{how};
  if (how == "completed" && !member.empty())
    text += "; the last run of '" + std::string{member} + "' failed";
  return text;
}

/// Records group `id`'s end and answers everyone waiting for it.
void group_finished(registry_ptr self, const std::string& id,
                    std::string_view outcome, std::string_view how,
                    std::string_view member, std::uint64_t restarts,
                    double ts) {
  auto& st = self->state;
  auto g = st.groups.find(id);
  if (g == st.groups.end() || g->second.result)
    return;
  task_result r;
  r.task_id = id;
  r.outcome = outcome == "succeeded" ? task_outcome::succeeded
              : outcome == "stopped" ? task_outcome::stopped
                                     : task_outcome::failed;
  r.cause.reason = how == "stopped"         ? end_reason::user_stop
                   : how == "start_failed"  ? end_reason::start_refused
                   : how == "auto_shutdown" ? end_reason::voluntary
                   : r.outcome == task_outcome::succeeded
                     ? end_reason::succeeded
                     : end_reason::policy_failed;
  if (r.outcome != task_outcome::succeeded)
    r.error = end_words(id, how, member);
  g->second.restarts = restarts;
  g->second.ended_at = ts;
  g->second.result = r;
  if (auto w = st.awaiting.find(id); w != st.awaiting.end()) {
    for (auto& rp : w->second)
      rp.deliver(r);
    st.awaiting.erase(w);
  }
  if (g->second.top != id)
    return;
  // The tree's ids are free again; its tasks keep their records.
  g->second.supervisor = nullptr;
  st.group_supervisors->erase(id);
  for (auto i = st.in_tree.begin(); i != st.in_tree.end();) {
    if (i->second == id) {
      st.member_of.erase(i->first);
      i = st.in_tree.erase(i);
    } else {
      ++i;
    }
  }
}

/// The rows of `id` (a group of `top`'s tree) from its top group's rows:
/// its own row and the rows below it, depth 0 first.
std::vector<group_row> subtree(std::vector<group_row> rows,
                               const std::string& id) {
  auto i = std::find_if(rows.begin(), rows.end(),
                        [&](const group_row& r) { return r.id == id; });
  if (i == rows.end())
    return {};
  auto depth = i->depth;
  auto end = std::find_if(std::next(i), rows.end(),
                          [&](const group_row& r) { return r.depth <= depth; });
  std::vector<group_row> out(std::make_move_iterator(i),
                             std::make_move_iterator(end));
  for (auto& r : out)
    r.depth -= depth;
  return out;
}

/// An ended group's tree, from its spec and its members' records (the
/// supervisors that knew it are gone).
void ended_rows(registry_ptr self, const group_spec& g, int depth,
                std::vector<group_row>& out) {
  auto& st = self->state;
  for (auto& m : g.members) {
    if (out.size() >= wire::max_list_entries)
      return;
    group_row r;
    r.depth = depth;
    r.id = m.id;
    r.group = m.group != nullptr;
    r.restart = m.restart;
    r.significant = m.significant;
    r.phase = member_phase::ended;
    if (m.group) {
      r.strategy = m.group->strategy;
      if (auto i = st.groups.find(m.id);
          i != st.groups.end() && i->second.result)
        r.last = member_end_of(*i->second.result);
      out.push_back(std::move(r));
      ended_rows(self, *m.group, depth + 1, out);
      continue;
    }
    if (auto i = st.finished.find(m.id);
        i != st.finished.end() && i->second.result)
      r.last = member_end_of(*i->second.result);
    out.push_back(std::move(r));
  }
}

/// The spec of group `id` within the tree of `top`.
const group_spec* find_group(const group_spec& top, const std::string& id) {
  if (top.id == id)
    return &top;
  for (auto& m : top.members)
    if (m.group)
      if (auto* g = find_group(*m.group, id))
        return g;
  return nullptr;
}

} // namespace

/// Attempts the earlier runs of `task_id` used: the highest of its record's
/// and of its attempt directories' numbers (a rerun numbers on from there).
int attempts_used(registry_ptr self, const std::string& task_id) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  int most = 0;
  if (auto i = st.finished.find(task_id); i != st.finished.end())
    most = i->second.attempt;
  std::error_code ec;
  auto dir = fs::path{st.opts.attempt_root} / task_id;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end;
       it.increment(ec)) {
    auto name = it->path().filename().string();
    constexpr std::string_view prefix = "attempt-";
    if (name.compare(0, prefix.size(), prefix) != 0)
      continue;
    char* rest = nullptr;
    auto n = std::strtol(name.c_str() + prefix.size(), &rest, 10);
    if (rest != nullptr && *rest == '\0' && n > most && n < 1000000)
      most = static_cast<int>(n);
  }
  return most;
}

caf::result<std::string> submit_group(registry_ptr self, group_spec spec,
                                      bool replace) {
  auto& st = self->state;
  auto ids = tree_ids(spec);
  for (auto& id : ids) {
    if (st.active.count(id) > 0 || st.reserved.count(id) > 0 ||
        st.admitting.count(id) > 0 || st.in_tree.count(id) > 0)
      return make_error(protocol_error::duplicate_task,
                        "group '" + spec.id + "': '" + id +
                          "' is a task or group that has not finished");
    auto ended_group = st.groups.count(id) > 0;
    if ((st.finished.count(id) > 0 || ended_group) && !replace)
      return make_error(protocol_error::duplicate_task,
                        "group '" + spec.id + "': '" + id +
                          "' exists already (submit with --replace to run "
                          "the group again)");
  }
  // `--replace`: the tree's finished tasks are forgotten as a replaced
  // task's are (their directories move aside), and its ended groups go.
  for (auto& id : ids) {
    if (st.groups.erase(id) > 0)
      untrack(self, id);
    forget(self, id);
  }
  auto trace_id = st.ids->trace_id();
  hold_tree(self, spec, spec.id, trace_id);
  auto shared = std::make_shared<const group_spec>(std::move(spec));
  auto& top = st.groups[shared->id];
  top.spec = shared;
  group_options opts;
  opts.spec = shared;
  opts.host = caf::actor_cast<group_host_actor>(self);
  opts.parent = caf::actor_cast<group_parent_actor>(self);
  opts.events = caf::actor_cast<event_sink_actor>(self);
  opts.trace_id = trace_id;
  opts.seed = st.ids->child_seed();
  top.supervisor = spawn_group(self->system(), std::move(opts));
  // It goes down with the registry (and its members with it); should it die
  // without reporting, the group failed.
  self->monitor(top.supervisor);
  st.group_supervisors->insert_or_assign(shared->id, top.supervisor);
  return shared->id;
}

caf::result<bool> start_member(registry_ptr self, task_spec task) {
  auto& st = self->state;
  auto group = caf::actor_cast<group_supervisor_actor>(self->current_sender());
  if (!group)
    return make_error(protocol_error::unknown_task,
                      "a member start without its group");
  auto id = task.id;
  if (id.empty())
    return make_error(protocol_error::invalid_task,
                      "a group's task member needs an id");
  if (st.active.count(id) > 0)
    return make_error(protocol_error::duplicate_task,
                      "member '" + id + "' runs already");
  // A member of an embedding application's group: its id must be free,
  // or a task this host ran for a group before.
  if (st.in_tree.count(id) == 0 && st.member_of.count(id) == 0 &&
      (st.finished.count(id) > 0 || st.groups.count(id) > 0))
    return make_error(protocol_error::duplicate_task,
                      "a task with id '" + id + "' exists already");
  auto rp = self->make_response_promise<bool>();
  submit_into(self, std::move(task), false, false, true,
              [self, rp, id, group](caf::expected<std::string> ok) mutable {
                if (!ok) {
                  rp.deliver(std::move(ok.error()));
                  return;
                }
                self->state.member_of.insert_or_assign(id, group);
                rp.deliver(true);
              });
  return rp;
}

void stop_member(registry_ptr self, const std::string& task_id,
                 double grace_s) {
  auto& st = self->state;
  auto m = st.member_of.find(task_id);
  if (m == st.member_of.end() ||
      self->current_sender() !=
        caf::actor_cast<caf::strong_actor_ptr>(m->second))
    return;
  auto i = st.active.find(task_id);
  // Not running: its end is on its way to the group already.
  if (i == st.active.end())
    return;
  // Its answer (whether the stop took) does not matter: its end does.
  caf::anon_send(i->second.supervisor, stop_atom::value,
                 grace_s > 0 ? stop_mode::cancel : stop_mode::kill);
}

void member_run_ended(registry_ptr self, const task_result& r) {
  auto& st = self->state;
  auto m = st.member_of.find(r.task_id);
  if (m == st.member_of.end())
    return;
  self->send(m->second, member_ended_atom::value, r.task_id, member_end_of(r));
}

void group_down(registry_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  for (auto& [id, g] : st.groups)
    if (g.supervisor && g.supervisor.address() == dm.source) {
      if (!g.result)
        group_finished(self, id, "failed",
                       "its supervisor died: " +
                         self->system().render(dm.reason),
                       {}, 0, wall_now());
      g.supervisor = nullptr;
      return;
    }
}

void group_event_seen(registry_ptr self, const event& ev) {
  auto* f = ev.fields();
  auto* d = f ? std::get_if<event_data::group>(&f->data) : nullptr;
  if (d == nullptr || d->change != "ended")
    return;
  group_finished(self, ev.task_id, d->outcome, d->how, d->member, d->restarts,
                 ev.ts);
}

namespace {

/// A group's status without its tree: running, or done with its result.
task_status group_head(const std::string& id, const group_record& g) {
  task_status s;
  s.task_id = id;
  s.trace_id = g.trace_id;
  s.state = g.result ? task_state::done : task_state::running;
  s.result = g.result;
  return s;
}

} // namespace

caf::result<task_status> group_status(registry_ptr self,
                                      const std::string& id) {
  auto& st = self->state;
  auto& g = st.groups.at(id);
  auto s = group_head(id, g);
  auto& top = st.groups.at(g.top);
  if (top.supervisor && !g.result) {
    auto rp = self->make_response_promise<task_status>();
    self->request(top.supervisor, caf::infinite, status_atom::value)
      .then(
        [rp, s, id](std::vector<group_row>& rows) mutable {
          s.tree = subtree(std::move(rows), id);
          rp.deliver(std::move(s));
        },
        [self, rp, id](caf::error&) mutable {
          // Ended in the meantime: its record says how.
          auto& groups = self->state.groups;
          task_status s;
          s.task_id = id;
          if (auto i = groups.find(id); i != groups.end())
            s = group_head(id, i->second);
          rp.deliver(std::move(s));
        });
    return rp;
  }
  if (top.spec)
    if (auto* spec = find_group(*top.spec, id)) {
      group_row r;
      r.id = id;
      r.group = true;
      r.phase = g.result ? member_phase::ended : member_phase::running;
      r.strategy = spec->strategy;
      r.restarts =
        static_cast<int>(std::min<std::uint64_t>(g.restarts, 1u << 30));
      s.tree.push_back(std::move(r));
      ended_rows(self, *spec, 1, s.tree);
    }
  return s;
}

caf::result<bool> stop_group(registry_ptr self, const std::string& id,
                             stop_mode mode) {
  auto& st = self->state;
  auto& g = st.groups.at(id);
  if (g.result)
    return false;
  auto& top = st.groups.at(g.top);
  if (!top.supervisor)
    return false;
  auto rp = self->make_response_promise<bool>();
  self->request(top.supervisor, caf::infinite, stop_atom::value, id, mode)
    .then([rp](bool ok) mutable { rp.deliver(ok); },
          [rp](caf::error&) mutable { rp.deliver(false); });
  return rp;
}

caf::result<bool> forget_group(registry_ptr self, const std::string& id) {
  auto& st = self->state;
  auto& g = st.groups.at(id);
  if (!g.result || g.top != id || !g.spec)
    return false;
  auto spec = g.spec;
  for (auto& x : tree_ids(*spec)) {
    if (st.groups.erase(x) > 0)
      untrack(self, x);
    else if (st.finished.count(x) > 0)
      forget_finished(self, x);
  }
  return true;
}

void add_group_status(registry_ptr self, std::vector<task_status>& out) {
  for (auto& [id, g] : self->state.groups)
    out.push_back(group_head(id, g));
}

} // namespace tasksup::detail

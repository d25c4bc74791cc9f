// The registry as the host of groups: a group document's tree runs as group
// supervisors (group_supervisor_actor.hpp) whose task members are the
// registry's tasks. A member's run is a task run like any other; its end
// goes to its group, and a restart is a rerun of the same task id that keeps
// its attempt directories, its state directory and its history.

#include "registry_state.hpp"

#include "tasksup/actors/events.hpp"

#include "tasksup/runtime/workspace.hpp"
#include "tasksup/supervisor/answer.hpp"
#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/events.hpp"
#include "tasksup/supervisor/role.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
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
  for (auto& m : g.members) {
    if (m.group)
      hold_tree(self, *m.group, top, trace_id);
    else
      st.in_tree.insert_or_assign(m.id, top);
  }
}

/// The hub keeps group `id`'s events for `events` and `describe` (in the
/// journal under its row `seq`, when it has one).
void track_group(registry_ptr self, const std::string& id, std::int64_t seq,
                 std::int64_t last_event, bool restored) {
  self->send(self->state.hub, detail::track_atom::value, id, seq, last_event,
             restored);
}

/// Starts the top group of a tree held for it (`hold_tree`).
void start_tree(registry_ptr self, std::shared_ptr<const group_spec> spec,
                std::shared_ptr<group_tree> tree, std::uint64_t seed) {
  auto& st = self->state;
  auto& top = st.groups.at(spec->id);
  top.spec = spec;
  group_options opts;
  opts.spec = spec;
  opts.host = caf::actor_cast<group_host_actor>(self);
  opts.parent = caf::actor_cast<group_parent_actor>(self);
  opts.events = caf::actor_cast<event_sink_actor>(self);
  opts.trace_id = top.trace_id;
  opts.seed = seed;
  opts.tree = std::move(tree);
  top.supervisor = spawn_group(self->system(), std::move(opts));
  // It goes down with the registry (and its members with it); should it die
  // without reporting, the group failed.
  self->monitor(top.supervisor);
  st.group_supervisors->insert_or_assign(spec->id, top.supervisor);
}

/// Forgets group `id`'s record, its history and its journal row ->
/// whether it had one.
bool drop_group(registry_ptr self, const std::string& id) {
  auto& st = self->state;
  if (st.groups.erase(id) == 0)
    return false;
  untrack(self, id);
  if (st.opts.journal)
    self->send(st.opts.journal, jforget_atom::value, id);
  return true;
}

/// Lets go of a tree held for a submission that failed.
void release_tree(registry_ptr self, const group_spec& spec) {
  auto& st = self->state;
  for (auto& id : tree_ids(spec)) {
    st.in_tree.erase(id);
    if (auto g = st.groups.find(id); g != st.groups.end()) {
      if (st.opts.journal && g->second.seq != 0)
        self->send(st.opts.journal, jforget_atom::value, id);
      st.groups.erase(g);
    }
  }
}

/// The words of a group's result: why it ended, and by which member.
/// `spec`: the group's, when known.
std::string end_words(const std::string& id, std::string_view how,
                      std::string_view member, const group_spec* spec) {
  if (spec != nullptr && spec->strategy == group_strategy::race &&
      how == "completed")
    return "step '" + id + "' failed: none of its " +
           std::to_string(spec->members.size()) +
           " attempts (best_of) succeeded";
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

/// The spec of group `id`, held by its tree's top record (null when the
/// record has none).
const group_spec* group_spec_of(registry_ptr self, const group_record& g,
                                const std::string& id) {
  auto& st = self->state;
  auto top = st.groups.find(g.top);
  if (top == st.groups.end() || !top->second.spec)
    return nullptr;
  return find_group(*top->second.spec, id);
}

/// Whether a workflow step's (or a racer's) task delivers a branch.
bool delivers_branch(const group_member_spec& m) {
  const auto* task = step_task(m);
  return task != nullptr && task->repo &&
         task->deliver == delivery_mode::branch;
}

/// Deletes the branches a best-of-N step's losers delivered (two racers can
/// pass their gates moments apart), on a thread of its own. Every racer
/// has ended: none delivers after this.
void remove_losers_branches(registry_ptr self, const group_spec& race,
                            const std::string& winner) {
  std::vector<runtime::repo_workspace> losers;
  for (auto& m : race.members)
    if (m.id != winner && delivers_branch(m))
      losers.emplace_back(*m.task->repo, m.id);
  if (losers.empty())
    return;
  self->spawn<caf::detached>(
    [losers = std::move(losers)](caf::event_based_actor*) {
      for (auto& w : losers)
        if (auto ok = w.remove_branch(); !ok)
          std::fprintf(stderr, "tasksup: %s\n", ok.error().to_string().c_str());
    });
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
  const auto* spec = group_spec_of(self, g->second, id);
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
    r.error = end_words(id, how, member, spec);
  if (how == "won") {
    // A best-of-N step: the winner's result is the step's.
    g->second.winner = std::string{member};
    if (auto f = st.finished.find(g->second.winner);
        f != st.finished.end() && f->second.result) {
      auto& won = *f->second.result;
      r.exit_code = won.exit_code;
      r.artifacts = won.artifacts;
      r.metadata = won.metadata;
      r.answer = won.answer;
    }
    if (spec != nullptr)
      remove_losers_branches(self, *spec, g->second.winner);
  }
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
  // The tree's ids are free again; its tasks keep their records. Its groups'
  // rows end in the journal, each with its result.
  g->second.supervisor = nullptr;
  st.group_supervisors->erase(id);
  if (st.opts.journal && g->second.spec)
    for (auto* spec : tree_groups(*g->second.spec)) {
      auto i = st.groups.find(spec->id);
      if (i == st.groups.end() || i->second.seq == 0)
        continue;
      journaled_group_end end{i->second.result, i->second.restarts};
      self->send(st.opts.journal, jend_atom::value, i->second.seq, ts,
                 encode(end));
    }
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
    for (auto d : m.depends_on)
      r.depends_on.push_back(g.members[d].id);
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
    else if (g.strategy == group_strategy::steps)
      r.phase = member_phase::skipped; // a step that never ran
    out.push_back(std::move(r));
  }
}

/// The group of `top`'s tree with the task member `id`, and its index.
const group_spec* group_with_member(const group_spec& g, const std::string& id,
                                    std::size_t& index) {
  for (std::size_t i = 0; i < g.members.size(); ++i) {
    auto& m = g.members[i];
    if (m.group) {
      if (auto* found = group_with_member(*m.group, id, index))
        return found;
    } else if (m.id == id) {
      index = i;
      return &g;
    }
  }
  return nullptr;
}

/// What a step that ran left: its result, and the task whose attempt and
/// branch it is (a best-of-N step's winner).
struct step_end {
  const task_result* result = nullptr;
  std::string task_id;
  int attempt = 0;
};

step_end end_of_step(registry_ptr self, const group_member_spec& dep) {
  auto& st = self->state;
  step_end out;
  auto id = dep.id;
  if (dep.group) {
    auto g = st.groups.find(dep.id);
    if (g == st.groups.end())
      return out;
    if (g->second.result)
      out.result = &*g->second.result;
    if (g->second.winner.empty())
      return out; // no winner (yet): its own result, if it ended
    id = g->second.winner;
  }
  if (auto f = st.finished.find(id);
      f != st.finished.end() && f->second.result) {
    out.result = &*f->second.result;
    out.task_id = id;
    out.attempt = f->second.attempt;
  }
  return out;
}

/// The workflow and the step index task `id` runs for in `top`'s tree: a
/// step's task, or a best-of-N step's racer. Null for other tasks.
const group_spec* step_of_task(const group_spec& top, const std::string& id,
                               std::size_t& index) {
  auto* g = group_with_member(top, id, index);
  if (g != nullptr && g->strategy == group_strategy::race) {
    // The step is the race itself, a member of the workflow.
    for (auto* w : tree_groups(top))
      for (std::size_t i = 0; i < w->members.size(); ++i)
        if (w->members[i].group.get() == g) {
          index = i;
          return w->strategy == group_strategy::steps ? w : nullptr;
        }
    return nullptr;
  }
  return g != nullptr && g->strategy == group_strategy::steps ? g : nullptr;
}

/// A workflow step about to run: each step it depends on, as it ended,
/// goes into `<attempt root>/<task>/inputs.json`, named to its agent by
/// TASKSUP_INPUTS, and its prompt's `{{steps.<id>.branch}}` become branch
/// names. False (with why) when the file cannot be written.
expected<bool> add_step_inputs(registry_ptr self, task_spec& task) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  auto t = st.in_tree.find(task.id);
  if (t == st.in_tree.end())
    return true;
  auto top = st.groups.find(t->second);
  if (top == st.groups.end() || !top->second.spec)
    return true;
  std::size_t index = 0;
  auto* g = step_of_task(*top->second.spec, task.id, index);
  if (g == nullptr)
    return true;
  auto step_of = [g](const std::string& id) {
    return id.substr(std::min(id.size(), g->id.size() + 1));
  };
  // Each step's end, looked up once.
  std::vector<std::optional<step_end>> ends(g->members.size());
  auto end_at = [&](std::size_t d) -> const step_end& {
    if (!ends[d])
      ends[d] = end_of_step(self, g->members[d]);
    return *ends[d];
  };
  boost::json::object steps;
  for (auto d : g->members[index].depends_on) {
    auto& dep = g->members[d];
    auto& e = end_at(d);
    boost::json::object o;
    o["task_id"] = dep.id;
    if (dep.group && !e.task_id.empty())
      o["winner"] = e.task_id;
    if (e.result != nullptr) {
      auto& r = *e.result;
      o["outcome"] = std::string{to_string(r.outcome)};
      o["exit_code"] = r.exit_code;
      boost::json::array artifacts;
      for (auto& a : r.artifacts)
        artifacts.emplace_back(a);
      o["artifacts"] = std::move(artifacts);
      if (e.attempt > 0)
        o["attempt_dir"] = (fs::path{st.opts.attempt_root} / e.task_id /
                            ("attempt-" + std::to_string(e.attempt)))
                             .string();
      if (delivers_branch(dep) && !e.task_id.empty() &&
          r.outcome == task_outcome::succeeded)
        o["branch"] = runtime::delivery_branch(e.task_id);
      // Checked against the step's schema when it succeeded.
      if (boost::system::error_code ec; !r.answer.empty())
        if (auto answer = boost::json::parse(r.answer, ec); !ec)
          o["answer"] = std::move(answer);
    }
    steps[step_of(dep.id)] = std::move(o);
  }
  boost::json::object doc;
  doc["workflow"] = g->id;
  doc["step"] = step_of(g->members[index].id);
  doc["steps"] = std::move(steps);
  auto dir = fs::path{st.opts.attempt_root} / task.id;
  auto file = dir / "inputs.json";
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::ofstream out{file, std::ios::trunc};
  out << boost::json::serialize(doc) << '\n';
  out.close();
  if (ec || !out)
    return tasksup::error{file.string(), "",
                          "cannot write the step's inputs" +
                            (ec ? ": " + ec.message() : std::string{})};
  task.env["TASKSUP_INPUTS"] = file.string();
  // Checked when the workflow was read: each names a step's branch, or a
  // field its answer schema lists (empty when the answer lacks it).
  // Replaced in one pass: an answer's text is not scanned again.
  constexpr std::string_view answer_prefix = "answer.";
  std::vector<std::pair<std::string, std::string>> values;
  for (auto& ref : find_step_templates(task.prompt)) {
    if (!ref.valid)
      continue;
    auto dep_id = step_task_id(g->id, ref.step);
    auto d =
      std::find_if(g->members.begin(), g->members.end(),
                   [&](const group_member_spec& m) { return m.id == dep_id; });
    if (d == g->members.end())
      continue;
    // A step it depends on, directly or not: ended already.
    auto& e = end_at(static_cast<std::size_t>(d - g->members.begin()));
    std::string value;
    if (ref.field == "branch") {
      value = runtime::delivery_branch(e.task_id.empty() ? dep_id : e.task_id);
    } else if (ref.field.rfind(answer_prefix, 0) == 0) {
      if (e.result != nullptr)
        value =
          answer_field(e.result->answer,
                       std::string_view{ref.field}.substr(answer_prefix.size()))
            .value_or("");
    } else {
      continue;
    }
    // The name between the braces.
    values.emplace_back(ref.text.substr(2, ref.text.size() - 4),
                        std::move(value));
  }
  std::vector<std::pair<std::string_view, std::string_view>> names;
  for (auto& [name, value] : values)
    names.emplace_back(name, value);
  task.prompt = render_template(task.prompt, names);
  if (task.prompt.size() > max_prompt_bytes)
    return tasksup::error{task.id, "/prompt",
                          "the prompt with its step templates replaced is " +
                            std::to_string(task.prompt.size()) +
                            " bytes, more than an attempt takes (" +
                            std::to_string(max_prompt_bytes) + ")"};
  return true;
}

/// The winner a best-of-N step's race decided, as its journaled inputs
/// say: in its run since its last start, the first racer that ended
/// normally, unless the race was stopped before. Empty when none.
std::string journaled_winner(const group_spec& race,
                             const std::vector<journaled_group_input>& inputs) {
  using kind = journaled_group_input::kind_t;
  auto first = inputs.begin();
  for (auto i = inputs.begin(); i != inputs.end(); ++i)
    if (i->kind == kind::start)
      first = i;
  for (auto i = first; i != inputs.end(); ++i) {
    if (i->kind == kind::stop || i->kind == kind::kill)
      return {};
    if (i->kind == kind::ended && i->how == member_end::normal &&
        i->member < race.members.size())
      return race.members[i->member].id;
  }
  return {};
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
                                      bool replace, std::string document) {
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
  // `--replace`: an ended tree of the same top id goes whole (its groups'
  // rows too); the new tree's finished tasks are forgotten as a replaced
  // task's are (their directories move aside).
  if (auto old = st.groups.find(spec.id);
      replace && old != st.groups.end() && old->second.spec) {
    // Held here: erasing the top's record would free the spec it walks.
    auto old_spec = old->second.spec;
    for (auto* g : tree_groups(*old_spec))
      drop_group(self, g->id);
  }
  for (auto& id : ids) {
    drop_group(self, id);
    forget(self, id);
  }
  auto trace_id = st.ids->trace_id();
  auto seed = st.ids->child_seed();
  hold_tree(self, spec, spec.id, trace_id);
  auto shared = std::make_shared<const group_spec>(std::move(spec));
  auto tree = make_group_tree(*shared, seed);
  auto groups = tree_groups(*shared);
  if (!st.opts.journal) {
    for (auto* g : groups)
      track_group(self, g->id, 0, 0, false);
    start_tree(self, shared, std::move(tree), seed);
    return shared->id;
  }
  // Durable before it starts: each group's row (the top's with the
  // document, which a restarted node parses again), then the tree runs.
  tree->journal = st.opts.journal;
  auto rp = self->make_response_promise<std::string>();
  auto pending = std::make_shared<std::size_t>(groups.size());
  auto failure = std::make_shared<caf::error>();
  auto finish = [self, rp, shared, tree, seed, failure]() mutable {
    if (*failure) {
      release_tree(self, *shared);
      rp.deliver(std::move(*failure));
      return;
    }
    for (auto* g : tree_groups(*shared))
      track_group(self, g->id, tree->groups.at(g->id)->seq, 0, false);
    start_tree(self, shared, tree, seed);
    rp.deliver(shared->id);
  };
  for (auto* g : groups) {
    journaled_group jg;
    jg.top = shared->id;
    if (g == groups.front())
      jg.document = document;
    jg.trace_id = trace_id;
    jg.seed = seed;
    auto id = g->id;
    self
      ->request(st.opts.journal, caf::infinite, jtask_atom::value, id,
                encode(jg), wall_now(), true)
      .then(
        [self, id, tree, pending, finish](std::int64_t seq) mutable {
          tree->groups.at(id)->seq = seq;
          if (auto i = self->state.groups.find(id);
              i != self->state.groups.end())
            i->second.seq = seq;
          if (--*pending == 0)
            finish();
        },
        [pending, failure, finish](caf::error& err) mutable {
          if (!*failure)
            *failure = std::move(err);
          if (--*pending == 0)
            finish();
        });
  }
  return rp;
}

caf::result<bool> start_member(registry_ptr self, task_spec task,
                               std::int64_t run) {
  auto& st = self->state;
  auto group = caf::actor_cast<group_supervisor_actor>(self->current_sender());
  if (!group)
    return make_error(protocol_error::unknown_task,
                      "a member start without its group");
  auto id = task.id;
  if (id.empty())
    return make_error(protocol_error::invalid_task,
                      "a group's task member needs an id");
  if (run <= 0)
    return make_error(protocol_error::invalid_task,
                      "member '" + id + "': a run token must be positive");
  // A run seen before: a group resumed after a restart finds it again.
  if (auto k = st.member_runs.find(id);
      k != st.member_runs.end() && k->second == run) {
    if (st.active.count(id) > 0) {
      st.member_of.insert_or_assign(id, group);
      return true;
    }
    if (auto f = st.finished.find(id);
        f != st.finished.end() && f->second.result) {
      // It ran and ended: the group learns so after the answer.
      auto rp = self->make_response_promise<bool>();
      rp.deliver(true);
      self->send(group, member_ended_atom::value, id,
                 member_end_of(*f->second.result));
      return rp;
    }
  }
  if (st.active.count(id) > 0)
    return make_error(protocol_error::duplicate_task,
                      "member '" + id + "' runs already");
  // A member of an embedding application's group: its id must be free,
  // or a task this host ran for a group before.
  if (st.in_tree.count(id) == 0 && st.member_of.count(id) == 0 &&
      (st.finished.count(id) > 0 || st.groups.count(id) > 0))
    return make_error(protocol_error::duplicate_task,
                      "a task with id '" + id + "' exists already");
  if (auto ok = add_step_inputs(self, task); !ok)
    return make_error(protocol_error::invalid_task, ok.error().to_string());
  auto rp = self->make_response_promise<bool>();
  submit_into(self, std::move(task), false, false, run,
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
  for (auto& x : tree_ids(*spec))
    if (!drop_group(self, x) && st.finished.count(x) > 0)
      forget_finished(self, x);
  return true;
}

void restore_groups(registry_ptr self,
                    std::vector<journal_group_entry> groups) {
  auto& st = self->state;
  std::map<std::string, journal_group_entry*> rows;
  for (auto& g : groups)
    rows.emplace(g.id, &g);
  for (auto& top : groups) {
    if (top.group.top != top.id)
      continue; // with its top
    auto what = "journaled group '" + top.id + "'";
    auto doc = parse_json_text(top.group.document, what);
    auto spec = doc ? parse_group(*doc, what, st.opts.config)
                    : expected<group_spec>{doc.error()};
    if (spec && spec->id != top.id)
      spec = tasksup::error{what, "",
                            "its document names the group '" + spec->id + "'"};
    if (!spec) {
      // Its tasks are rebuilt as tasks of their own; the tree is gone.
      std::fprintf(stderr,
                   "tasksup: the group '%s' cannot be rebuilt (%s); its "
                   "tasks go on as tasks of their own\n",
                   top.id.c_str(), spec.error().to_string().c_str());
      continue;
    }
    auto shared = std::make_shared<const group_spec>(std::move(*spec));
    auto tree_rows = tree_groups(*shared);
    if (top.finished) {
      for (auto* g : tree_rows) {
        auto r = rows.find(g->id);
        if (r == rows.end() || r->second->group.top != top.id)
          continue;
        auto& row = *r->second;
        group_record rec;
        rec.top = top.id;
        rec.trace_id = top.group.trace_id;
        rec.seq = row.seq;
        if (row.finished) {
          rec.result = row.finished->result;
          rec.restarts = row.finished->restarts;
        }
        rec.ended_at = top.finished_at;
        if (g == tree_rows.front()) {
          rec.spec = shared;
          // A top group's record always says how it ended.
          if (!rec.result) {
            task_result r;
            r.task_id = top.id;
            r.outcome = task_outcome::failed;
            r.cause.reason = end_reason::unknown;
            rec.result = r;
          }
        }
        st.groups.insert_or_assign(g->id, std::move(rec));
        track_group(self, g->id, row.seq, 0, true);
      }
      continue;
    }
    hold_tree(self, *shared, top.id, top.group.trace_id);
    auto tree = make_group_tree(*shared, top.group.seed);
    tree->journal = st.opts.journal;
    for (auto* g : tree_rows) {
      auto r = rows.find(g->id);
      if (r == rows.end() || r->second->group.top != top.id)
        continue; // not journaled: it runs unrecorded
      auto& row = *r->second;
      if (g->strategy == group_strategy::race)
        st.groups.at(g->id).winner = journaled_winner(*g, row.inputs);
      auto& slot = *tree->groups.at(g->id);
      slot.seq = row.seq;
      slot.replay = std::move(row.inputs);
      st.groups.at(g->id).seq = row.seq;
      track_group(self, g->id, row.seq, row.last_event, true);
    }
    start_tree(self, shared, std::move(tree), top.group.seed);
  }
}

void add_group_status(registry_ptr self, std::vector<task_status>& out) {
  for (auto& [id, g] : self->state.groups)
    out.push_back(group_head(id, g));
}

} // namespace tasksup::detail

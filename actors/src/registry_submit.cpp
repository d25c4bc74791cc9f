#include "registry_state.hpp"

#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/runtime/workspace.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/spawn_options.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

namespace tasksup::detail {

using admit_atom = caf::atom_constant<caf::atom("admit")>;

/// Runs a task's admission checks (git, its admit command) on a thread of
/// its own and answers the error text, empty when admitted.
using admission_actor = caf::typed_actor<
  caf::replies_to<admit_atom, task_spec, std::string>::with<std::string>>;

admission_actor::behavior_type admission(admission_actor::pointer self,
                                         std::vector<std::string> allowed) {
  return {[=](admit_atom, const task_spec& task,
              const std::string& runtime_name) -> std::string {
    self->quit();
    auto ok = runtime::admit_task(task, runtime_name, allowed);
    return ok ? std::string{} : ok.error().to_string();
  }};
}

/// Records the round-robin positions in the journal.
void save_rotation(registry_ptr self) {
  auto& st = self->state;
  if (!st.opts.journal)
    return;
  std::string text;
  for (auto& [env, pos] : st.rotation) {
    text += env;
    text += '\t';
    text += std::to_string(pos);
    text += '\n';
  }
  save_state(self, "rotation", std::move(text));
}

/// A task accepted by `prepare`, ready to run (or to be admitted first).
struct prepared_task {
  supervisor_options opts;
  std::string environment;
  /// A repository task or one with an admit command: its checks run
  /// before it is queued (`opts.task` is set, nothing else).
  bool needs_admission = false;
  std::string runtime_name;
};

/// Validates `task` against the node's config, names it, and builds its
/// supervisor's options.
caf::expected<prepared_task> prepare(registry_ptr self, task_spec task,
                                     bool replace, bool admitted, bool member) {
  auto& st = self->state;
  // However the task arrived (typed from another node or an embedding
  // application, or JSON), it is resolved against this node's config and
  // checked by the one validator before anything uses its id as a path or
  // its numbers as durations.
  auto resolved =
    resolve_task(std::move(task), st.opts.config, "submitted task");
  if (!resolved)
    return make_error(protocol_error::invalid_task,
                      resolved.error().to_string());
  task = std::move(*resolved);
  auto known = [&](const std::string& id) {
    return st.active.count(id) > 0 || st.finished.count(id) > 0 ||
           st.reserved.count(id) > 0 || st.admitting.count(id) > 0 ||
           st.in_tree.count(id) > 0 || st.groups.count(id) > 0;
  };
  if (task.id.empty()) {
    do
      task.id = "task-" + std::to_string(st.next_number++);
    while (known(task.id));
  } else if (!member && st.in_tree.count(task.id) > 0) {
    return make_error(protocol_error::duplicate_task,
                      "'" + task.id + "' belongs to the running group '" +
                        st.in_tree[task.id] + "'");
  } else if (st.active.count(task.id) > 0 || st.reserved.count(task.id) > 0 ||
             (!admitted && st.admitting.count(task.id) > 0)) {
    return make_error(protocol_error::duplicate_task,
                      "a task with id '" + task.id +
                        "' exists already and has not finished");
  } else if (!member && st.groups.count(task.id) > 0) {
    return make_error(protocol_error::duplicate_task,
                      "a group with id '" + task.id + "' exists already");
  } else if (st.finished.count(task.id) > 0 && !replace && !member) {
    return make_error(protocol_error::duplicate_task,
                      "a task with id '" + task.id +
                        "' exists already (submit with --replace to run it "
                        "again)");
  }
  auto runtime_name =
    task.runtime.empty() ? st.opts.config.node.default_runtime : task.runtime;
  auto rt = st.opts.runtimes.find(runtime_name);
  if (rt == st.opts.runtimes.end())
    rt = st.opts.runtimes.find("*");
  if (rt == st.opts.runtimes.end() || !rt->second)
    return make_error(protocol_error::unknown_runtime,
                      "task '" + task.id + "': no runtime named '" +
                        runtime_name + "' on this node");
  prepared_task p;
  auto& opts = p.opts;
  // Repository tasks and tasks with an admit command are checked before
  // they are queued; a rejected one leaves nothing behind.
  if (!admitted && (task.repo || task.admit)) {
    p.needs_admission = true;
    p.runtime_name = runtime_name;
    opts.task = std::move(task);
    return p;
  }
  // Round-robin rotates the first agent per environment; fallbacks within a
  // task never move it.
  if (task.selection && task.selection->mode == selection_mode::round_robin &&
      !task.selection->agents.empty()) {
    auto& pos = st.rotation[task.environment];
    auto& agents = task.selection->agents;
    opts.start_agent_id = agents[pos % agents.size()].agent_id;
    pos = (pos + 1) % agents.size();
    save_rotation(self);
  }
  opts.runtime = rt->second;
  if (member)
    opts.attempts_before = attempts_used(self, task.id);
  opts.trace_id = st.ids->trace_id();
  opts.seed = st.ids->child_seed();
  p.environment = task.environment;
  opts.task = std::move(task);
  return p;
}

/// Spawns the supervisor of a prepared task; `last_event` and `restored`
/// describe a task rebuilt after a restart (its journaled events).
void launch(registry_ptr self, supervisor_options opts, std::string environment,
            std::int64_t last_event, bool restored) {
  auto& st = self->state;
  opts.default_agent = st.opts.config.node.default_agent;
  opts.classifier = st.classifier;
  opts.backoff = st.backoff;
  opts.services = caf::actor_cast<node_services_actor>(self);
  opts.event_batches = true;
  opts.attempt_root = st.opts.attempt_root;
  opts.leader_epoch = st.opts.leader_epoch;
  opts.worker_timer = st.worker_timer;
  opts.journal = st.opts.journal;
  auto id = opts.task.id;
  auto trace = opts.trace_id;
  auto runtime_name = opts.task.runtime.empty()
                        ? st.opts.config.node.default_runtime
                        : opts.task.runtime;
  auto labels = opts.task.placement.labels;
  auto local_only = opts.task.repo.has_value();
  auto attempts_before = opts.attempts_before;
  // The hub knows the task before its supervisor's first event; events and
  // the result go there, so the result never overtakes its events.
  self->send(st.hub, detail::track_atom::value, id, opts.journal_seq,
             last_event, restored);
  auto sup = spawn_task_supervisor(self->system(), st.hub, std::move(opts));
  self->monitor(sup);
  st.by_supervisor.emplace(sup.address(), id);
  st.supervisors->emplace(id, sup);
  active_task t{sup, std::move(environment), trace, {}, false};
  t.placement.runtime = std::move(runtime_name);
  t.placement.labels = std::move(labels);
  t.local_only = local_only;
  t.attempts_before = attempts_before;
  st.active.emplace(id, std::move(t));
}

namespace {

/// Takes `id` out of `finished_order`.
void drop_finished_entry(registry_state& st, const std::string& id) {
  auto i = std::find_if(st.finished_order.begin(), st.finished_order.end(),
                        [&](const finished_entry& f) { return f.id == id; });
  if (i != st.finished_order.end())
    st.finished_order.erase(i);
}

} // namespace

/// Forgets a finished task that is submitted again (`--replace`). Its
/// attempt directories move aside (`<id>.replaced-<n>`): an attempt
/// directory is never reused.
void forget(registry_ptr self, const std::string& task_id) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  if (st.finished.erase(task_id) == 0)
    return;
  auto dir = fs::path{st.opts.attempt_root} / task_id;
  std::error_code ec;
  if (fs::exists(dir, ec))
    for (int n = 1; n < 10000; ++n) {
      auto aside = dir;
      aside += ".replaced-" + std::to_string(n);
      if (fs::exists(aside, ec))
        continue;
      fs::rename(dir, aside, ec);
      break;
    }
  untrack(self, task_id);
  st.journal_seq.erase(task_id);
  st.placed_on.erase(task_id);
  st.member_runs.erase(task_id);
  drop_finished_entry(st, task_id);
}

/// A finished task's record is dropped for its next run: `--replace`
/// forgets it (its attempt directories move aside), a group member's rerun
/// keeps its directories and its history.
void clear_for_run(registry_ptr self, const std::string& id, bool member) {
  auto& st = self->state;
  if (!member) {
    forget(self, id);
    return;
  }
  if (st.finished.erase(id) == 0)
    return;
  drop_finished_entry(st, id);
}

void submit_into(registry_ptr self, task_spec task, bool replace, bool admitted,
                 std::int64_t member_run, submitted_fn done) {
  auto& st = self->state;
  auto member = member_run != 0;
  auto p = prepare(self, std::move(task), replace, admitted, member);
  if (!p) {
    done(std::move(p.error()));
    return;
  }
  auto id = p->opts.task.id;
  if (p->needs_admission) {
    // On a thread of its own (git, the user's admit command).
    st.admitting.insert(id);
    auto job =
      self->spawn<caf::detached>(admission, st.opts.config.node.allowed_paths);
    auto task = std::make_shared<task_spec>(std::move(p->opts.task));
    self->request(job, caf::infinite, admit_atom::value, *task, p->runtime_name)
      .then(
        [self, done, id, task, replace, member_run](std::string& err) mutable {
          self->state.admitting.erase(id);
          if (!err.empty())
            done(make_error(protocol_error::invalid_task,
                            "rejected at admission: " + err));
          else
            submit_into(self, std::move(*task), replace, true, member_run,
                        std::move(done));
        },
        [self, done, id](caf::error& err) mutable {
          self->state.admitting.erase(id);
          done(std::move(err));
        });
    return;
  }
  if (!st.opts.journal) {
    clear_for_run(self, id, member);
    if (member)
      st.member_runs.insert_or_assign(id, member_run);
    launch(self, std::move(p->opts), std::move(p->environment));
    done(id);
    return;
  }
  // Durable before it is answered: the id is held while the journal
  // records the task. A member's rerun replaces its record.
  journaled_task jt{
    p->opts.task,           p->opts.trace_id,        p->opts.seed,
    p->opts.start_agent_id, p->opts.attempts_before, member_run};
  st.reserved.insert(id);
  auto shared = std::make_shared<prepared_task>(std::move(*p));
  self
    ->request(st.opts.journal, caf::infinite, jtask_atom::value, id, encode(jt),
              wall_now(), replace || member)
    .then(
      [self, done, id, shared, member, member_run](std::int64_t seq) mutable {
        auto& st = self->state;
        st.reserved.erase(id);
        clear_for_run(self, id, member);
        if (member)
          st.member_runs.insert_or_assign(id, member_run);
        st.journal_seq[id] = seq;
        shared->opts.journal_seq = seq;
        launch(self, std::move(shared->opts), std::move(shared->environment));
        done(id);
      },
      [self, done, id](caf::error& err) mutable {
        self->state.reserved.erase(id);
        done(std::move(err));
      });
}

caf::result<std::string> submit(registry_ptr self, task_spec task,
                                bool replace) {
  auto rp = self->make_response_promise<std::string>();
  submit_into(self, std::move(task), replace, false, 0,
              [rp](caf::expected<std::string> id) mutable {
                if (id)
                  rp.deliver(std::move(*id));
                else
                  rp.deliver(std::move(id.error()));
              });
  return rp;
}

caf::result<std::string> submit_json(registry_ptr self, const std::string& text,
                                     bool replace) {
  auto doc = parse_json_text(text, "submitted task");
  if (!doc)
    return make_error(protocol_error::invalid_task, doc.error().to_string());
  if (is_group_document(*doc)) {
    auto group = parse_group(*doc, "submitted group", self->state.opts.config);
    if (!group)
      return make_error(protocol_error::invalid_task,
                        group.error().to_string());
    return submit_group(self, std::move(*group), replace, text);
  }
  // Agents name this node's profiles (config/profiles/) or the built-in ones.
  auto task = parse_task_as_written(*doc, "submitted task",
                                    self->state.opts.config.profiles);
  if (!task)
    return make_error(protocol_error::invalid_task, task.error().to_string());
  return submit(self, std::move(*task), replace);
}

/// `tasksup forget`: a finished task's status, history, journal record and
/// attempt directories go, as if it had never been submitted (its id is
/// free again). False, and nothing changes, while the task has not
/// finished.
caf::result<bool> forget_finished(registry_ptr self,
                                  const std::string& task_id) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  if (st.active.count(task_id) > 0 || st.reserved.count(task_id) > 0 ||
      st.admitting.count(task_id) > 0 || st.in_tree.count(task_id) > 0)
    return false;
  if (st.finished.count(task_id) == 0)
    return unknown_task_error(st, task_id);
  if (st.opts.journal)
    self->send(st.opts.journal, jforget_atom::value, task_id);
  // A task id is one path component (validated at submission).
  std::error_code ec;
  fs::remove_all(fs::path{st.opts.attempt_root} / task_id, ec);
  forget(self, task_id);
  return true;
}

} // namespace tasksup::detail

#include "tasksup/actors/registry_actor.hpp"

#include "tasksup/actors/cluster.hpp"

#include "actor_now.hpp"
#include "event_hub.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/events.hpp"
#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/runtime/workspace.hpp"

#include "tasksup/supervisor/account_quotas.hpp"
#include "tasksup/supervisor/circuit_breaker.hpp"
#include "tasksup/supervisor/retry_budget.hpp"
#include "tasksup/supervisor/slot_scheduler.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/spawn_options.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

using detail::now_s;

/// A task whose supervisor is alive.
struct active_task {
  caf::actor supervisor;
  std::string environment;
  std::string trace_id;
  /// What its attempts need from a worker node.
  placement_request placement;
  /// Its attempts run here whatever nodes joined (repository tasks).
  bool local_only = false;
};

/// A worker node that joined this coordinator (its offer and load are the
/// slot scheduler's).
struct worker_node {
  caf::actor agent;
  double joined_at = 0;
};

struct registry_state {
  registry_options opts;
  classifier_actor classifier;
  backoff_actor backoff;
  std::optional<trace_id_generator> ids;
  std::map<std::string, active_task> active;
  std::map<caf::actor_addr, std::string> by_supervisor;
  /// Finished tasks, oldest first in `finished_order`.
  std::map<std::string, task_status> finished;
  std::deque<std::string> finished_order;
  std::map<std::string, std::vector<caf::response_promise>> awaiting;
  /// What waits for an active task's record (`when_finished`).
  std::map<std::string, std::vector<std::function<void(const task_status*)>>>
    finishing;
  std::optional<circuit_breaker> breaker;
  /// Accounts closed until their usage quota resets.
  account_quotas quotas;
  retry_budget budget;
  /// Who holds the attempt slots, where, and who waits.
  slot_scheduler slots;
  /// The permits of the tasks waiting for a slot, answered when the
  /// scheduler grants one.
  std::map<std::string, std::pair<permit_request, caf::response_promise>>
    waiting;
  /// The worker nodes that joined, by name.
  std::map<std::string, worker_node> nodes;
  /// Round-robin position per environment.
  std::map<std::string, std::size_t> rotation;
  /// The events: each task's history, subscribers, the journal's copy.
  detail::event_hub_actor hub;
  /// The supervisors of `active`, shared with the exit handler that stops
  /// them when the registry ends.
  std::shared_ptr<std::map<std::string, caf::actor>> supervisors;
  std::uint64_t next_number = 1;
  /// The journal's number of every task it records.
  std::map<std::string, std::int64_t> journal_seq;
  /// Ids being recorded by the journal (not yet answered).
  std::set<std::string> reserved;
  /// Rebuilt tasks that have not yet asked again for what they waited for;
  /// the slot queue is held until none is left, then served in submission
  /// order.
  std::set<std::string> resuming;
  /// What the rebuilt tasks adopted (attempt directories and runtime ids):
  /// left alone when the rest of the old node's attempts are reaped.
  std::set<std::string> adopted;
  /// The attempts they adopted, as (task id, attempt number).
  std::set<std::pair<std::string, int>> adopted_attempts;
  /// Ids of tasks whose admission checks run (not queued yet).
  std::set<std::string> admitting;
  static inline const char* name = "tasksup.registry";
};

using registry_actor_t = caf::stateful_actor<registry_state>;

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// Hands `ev` to the event hub.
void publish(registry_actor_t* self, const event& ev) {
  self->send(self->state.hub, event_atom::value, ev);
}

/// The hub forgets `task_id`'s events (it is evicted or forgotten).
void untrack(registry_actor_t* self, const std::string& task_id) {
  self->send(self->state.hub, detail::untrack_atom::value, task_id);
}

/// Records a piece of node state in the journal.
void save_state(registry_actor_t* self, const char* key, std::string text) {
  if (self->state.opts.journal)
    self->send(self->state.opts.journal, jstate_atom::value, std::string{key},
               std::move(text));
}

/// The answer to a task that holds its slot: the agent's breaker, then
/// (only when the agent may run) a retry token.
permit_reply permit(registry_actor_t* self, const permit_request& req) {
  auto& st = self->state;
  auto now = now_s(self);
  permit_reply r;
  r.agent_allowed = st.breaker->allow(req.agent_id, now);
  if (r.agent_allowed && req.need_token) {
    r.token = st.budget.try_take(now);
    if (!st.budget.unlimited())
      save_state(self, "budget", st.budget.save());
  }
  return r;
}

/// The permit of a task holding its slot, with where that slot is.
permit_reply placed_permit(registry_actor_t* self, const permit_request& req) {
  auto& st = self->state;
  auto r = permit(self, req);
  r.runtime = req.placement.runtime;
  if (auto node = st.slots.node_of(req.task_id); node && !node->empty())
    if (auto n = st.nodes.find(*node); n != st.nodes.end()) {
      r.node = *node;
      r.agent = n->second.agent;
    }
  return r;
}

/// Answers the waiting permits the scheduler granted.
void deliver(registry_actor_t* self, std::vector<slot_grant> grants) {
  auto& st = self->state;
  for (auto& g : grants) {
    auto i = st.waiting.find(g.task_id);
    if (i == st.waiting.end())
      continue;
    auto [req, rp] = std::move(i->second);
    st.waiting.erase(i);
    rp.deliver(placed_permit(self, req));
  }
}

void release(registry_actor_t* self, const std::string& task_id) {
  auto& st = self->state;
  st.waiting.erase(task_id);
  deliver(self, st.slots.release(task_id));
}

/// A task's place in submission order: its journal number (tasks without
/// one, when there is no journal, keep their place in the queue).
std::int64_t order_of(registry_actor_t* self, const std::string& task_id) {
  auto& seqs = self->state.journal_seq;
  auto i = seqs.find(task_id);
  return i == seqs.end() ? std::numeric_limits<std::int64_t>::max() : i->second;
}

/// Once every rebuilt task has adopted its attempt: whatever else the old
/// node left running (an attempt it started but never recorded, a container
/// of a dead node) is killed, so no process or container is left behind.
void reap_orphans(registry_actor_t* self) {
  auto& st = self->state;
  if (!st.opts.journal)
    return;
  runtime::reap_spec spec;
  spec.attempt_root = st.opts.attempt_root;
  spec.owner = "serve";
  spec.dead_owners = true;
  spec.keep = std::move(st.adopted);
  st.adopted.clear();
  spec.keep_attempts = std::move(st.adopted_attempts);
  st.adopted_attempts.clear();
  std::set<runtime::container_runtime*> done;
  for (auto& [name, rt] : st.opts.runtimes) {
    if (!rt || !done.insert(rt.get()).second)
      continue;
    auto report = rt->reap(spec);
    for (auto& line : report.reaped)
      std::fprintf(stderr, "tasksup: reaped after the restart: %s\n",
                   line.c_str());
    for (auto& line : report.errors)
      std::fprintf(stderr, "tasksup: reaping after the restart: %s\n",
                   line.c_str());
  }
}

/// A rebuilt task has asked again for what it waited for (or ended). Once
/// all have, the queue is put back in submission order and served.
void resumed(registry_actor_t* self, const std::string& task_id) {
  auto& st = self->state;
  if (st.resuming.erase(task_id) == 0 || !st.resuming.empty())
    return;
  reap_orphans(self);
  deliver(self, st.slots.resume([self](const std::string& id) {
    return order_of(self, id);
  }));
}

/// Forgets worker node `name` (its connection is gone): nothing is placed
/// there any more; its attempts are lost and their supervisors retry them
/// elsewhere (each sees its own worker go down).
void node_lost(registry_actor_t* self, const std::string& name,
               const std::string& why) {
  auto& st = self->state;
  auto i = st.nodes.find(name);
  if (i == st.nodes.end())
    return;
  std::fprintf(stderr,
               "tasksup: worker node %s lost (%s); %d running attempt(s) "
               "there are retried elsewhere\n",
               name.c_str(), why.c_str(), st.slots.running_on(name));
  self->demonitor(i->second.agent);
  st.nodes.erase(i);
  // Without worker nodes the coordinator runs the queue itself again.
  deliver(self, st.slots.remove_node(name));
}

/// A worker node joins (through the door): its offer is checked, its
/// agent monitored, and the queue served with the new capacity.
caf::result<std::string> join(registry_actor_t* self, node_offer& offer,
                              caf::actor& agent) {
  auto& st = self->state;
  if (auto ok = check_offer(offer); !ok)
    return make_error(protocol_error::invalid_task, ok.error().to_string());
  if (!agent)
    return make_error(protocol_error::invalid_task, "join: no node agent");
  if (auto i = st.nodes.find(offer.name); i != st.nodes.end()) {
    if (i->second.agent.node() != agent.node())
      return make_error(protocol_error::duplicate_task,
                        "a worker node named '" + offer.name +
                          "' has joined already (start the node with "
                          "another --name)");
    // The same node again (it reconnected before its loss was seen).
    node_lost(self, offer.name, "it joined again");
  }
  if (st.nodes.size() >= max_nodes)
    return make_error(protocol_error::invalid_task,
                      "this coordinator takes at most " +
                        std::to_string(max_nodes) + " worker nodes");
  std::string runtimes;
  for (auto& r : offer.runtimes)
    runtimes += (runtimes.empty() ? "" : ",") + r;
  std::fprintf(stderr,
               "tasksup: worker node %s joined (at most %d attempts, "
               "runtimes %s%s%s)\n",
               offer.name.c_str(), offer.max_concurrent, runtimes.c_str(),
               offer.labels.empty() ? "" : ", labels ",
               to_string(offer.labels).c_str());
  self->monitor(agent);
  st.nodes.emplace(offer.name, worker_node{std::move(agent), now_s(self)});
  deliver(self, st.slots.add_node(std::move(offer)));
  return st.opts.node_name;
}

/// Where a task runs or why it waits, added to its supervisor's status.
void add_placement(registry_actor_t* self, task_status& s) {
  auto& st = self->state;
  if (auto node = st.slots.node_of(s.task_id))
    s.node = std::move(*node);
  if (auto why = st.slots.waiting_reason(s.task_id))
    s.waiting_for = std::move(*why);
}

/// Records a final result; answers everyone awaiting it.
void record_result(registry_actor_t* self, task_result r) {
  auto& st = self->state;
  auto i = st.active.find(r.task_id);
  if (i == st.active.end())
    return;
  task_status s;
  s.task_id = r.task_id;
  s.environment = i->second.environment;
  s.trace_id = i->second.trace_id;
  s.state = task_state::done;
  s.agent_id = r.metadata.agent_id;
  s.attempt = r.metadata.total_attempts;
  s.retry_count = r.metadata.retry_count;
  s.total_attempts = r.metadata.total_attempts;
  s.fallback_count = r.metadata.fallback_count;
  s.result = r;
  st.by_supervisor.erase(i->second.supervisor.address());
  st.supervisors->erase(r.task_id);
  st.active.erase(i);
  resumed(self, r.task_id);
  release(self, r.task_id);
  if (auto w = st.awaiting.find(r.task_id); w != st.awaiting.end()) {
    for (auto& rp : w->second)
      rp.deliver(r);
    st.awaiting.erase(w);
  }
  if (st.opts.journal)
    if (auto j = st.journal_seq.find(r.task_id); j != st.journal_seq.end())
      self->send(st.opts.journal, jend_atom::value, j->second, wall_now(),
                 encode(s));
  auto& record =
    st.finished.insert_or_assign(r.task_id, std::move(s)).first->second;
  st.finished_order.push_back(r.task_id);
  if (auto w = st.finishing.find(r.task_id); w != st.finishing.end()) {
    auto fs = std::move(w->second);
    st.finishing.erase(w);
    for (auto& f : fs)
      f(&record);
  }
  while (st.finished_order.size() > st.opts.history_limit) {
    auto& id = st.finished_order.front();
    untrack(self, id);
    st.finished.erase(id);
    st.journal_seq.erase(id);
    st.finished_order.pop_front();
  }
}

/// True when the current message names `task_id`, a task of this registry,
/// but comes from someone other than that task's supervisor (messages about
/// tasks the registry does not run, e.g. an embedding application's own
/// supervisors using it for slots, pass).
bool from_other_supervisor(registry_actor_t* self, const std::string& task_id,
                           const caf::actor_addr& sender) {
  auto& st = self->state;
  if (auto i = st.active.find(task_id); i != st.active.end())
    return i->second.supervisor.address() != sender;
  // A supervisor of ours speaking for a task that is not its own.
  auto j = st.by_supervisor.find(sender);
  return j != st.by_supervisor.end() && j->second != task_id;
}

bool from_other_supervisor(registry_actor_t* self, const std::string& task_id) {
  return from_other_supervisor(
    self, task_id, caf::actor_cast<caf::actor_addr>(self->current_sender()));
}

using admit_atom = caf::atom_constant<caf::atom("admit")>;

/// Runs a task's admission checks (git, its admit command) on a thread of
/// its own and answers the error text, empty when admitted.
caf::behavior admission_actor(caf::event_based_actor* self,
                              std::vector<std::string> allowed) {
  return {[=](admit_atom, const task_spec& task,
              const std::string& runtime_name) -> std::string {
    self->quit();
    auto ok = runtime::admit_task(task, runtime_name, allowed);
    return ok ? std::string{} : ok.error().to_string();
  }};
}

/// Records the round-robin positions in the journal.
void save_rotation(registry_actor_t* self) {
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
caf::expected<prepared_task> prepare(registry_actor_t* self, task_spec task,
                                     bool replace, bool admitted) {
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
           st.reserved.count(id) > 0 || st.admitting.count(id) > 0;
  };
  if (task.id.empty()) {
    do
      task.id = "task-" + std::to_string(st.next_number++);
    while (known(task.id));
  } else if (st.active.count(task.id) > 0 || st.reserved.count(task.id) > 0 ||
             (!admitted && st.admitting.count(task.id) > 0)) {
    return make_error(protocol_error::duplicate_task,
                      "a task with id '" + task.id +
                        "' exists already and has not finished");
  } else if (st.finished.count(task.id) > 0 && !replace) {
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
  opts.trace_id = st.ids->trace_id();
  opts.seed = st.ids->child_seed();
  p.environment = task.environment;
  opts.task = std::move(task);
  return p;
}

/// Spawns the supervisor of a prepared task; `last_event` and `restored`
/// describe a task rebuilt after a restart (its journaled events).
void launch(registry_actor_t* self, supervisor_options opts,
            std::string environment, std::int64_t last_event = 0,
            bool restored = false) {
  auto& st = self->state;
  opts.default_agent = st.opts.config.node.default_agent;
  opts.classifier = st.classifier;
  opts.backoff = st.backoff;
  opts.services = caf::actor_cast<caf::actor>(self);
  opts.event_batches = true;
  opts.attempt_root = st.opts.attempt_root;
  opts.journal = st.opts.journal;
  auto id = opts.task.id;
  auto trace = opts.trace_id;
  auto runtime_name = opts.task.runtime.empty()
                        ? st.opts.config.node.default_runtime
                        : opts.task.runtime;
  auto labels = opts.task.placement.labels;
  auto local_only = opts.task.repo.has_value();
  // The hub knows the task before its supervisor's first event; events and
  // the result go there, so the result never overtakes its events.
  self->send(st.hub, detail::track_atom::value, id, opts.journal_seq,
             last_event, restored);
  auto sup = spawn_task_supervisor(
    self->system(), caf::actor_cast<caf::actor>(st.hub), std::move(opts));
  self->monitor(sup);
  st.by_supervisor.emplace(sup.address(), id);
  st.supervisors->emplace(id, sup);
  active_task t{sup, std::move(environment), trace, {}, false};
  t.placement.runtime = std::move(runtime_name);
  t.placement.labels = std::move(labels);
  t.local_only = local_only;
  st.active.emplace(id, std::move(t));
}

/// Forgets a finished task that is submitted again (`--replace`). Its
/// attempt directories move aside (`<id>.replaced-<n>`): an attempt
/// directory is never reused.
void forget(registry_actor_t* self, const std::string& task_id) {
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
  st.finished_order.erase(
    std::find(st.finished_order.begin(), st.finished_order.end(), task_id));
}

/// Accepts `task` (checked, admitted, journaled) and answers `rp` with its
/// id, or the reason it was refused.
void submit_into(registry_actor_t* self, task_spec task, bool replace,
                 bool admitted, caf::response_promise rp) {
  auto& st = self->state;
  auto p = prepare(self, std::move(task), replace, admitted);
  if (!p) {
    rp.deliver(std::move(p.error()));
    return;
  }
  auto id = p->opts.task.id;
  if (p->needs_admission) {
    // On a thread of its own (git, the user's admit command).
    st.admitting.insert(id);
    auto job = self->spawn<caf::detached>(admission_actor,
                                          st.opts.config.node.allowed_paths);
    auto task = std::make_shared<task_spec>(std::move(p->opts.task));
    self->request(job, caf::infinite, admit_atom::value, *task, p->runtime_name)
      .then(
        [self, rp, id, task, replace](std::string& err) mutable {
          self->state.admitting.erase(id);
          if (!err.empty())
            rp.deliver(make_error(protocol_error::invalid_task,
                                  "rejected at admission: " + err));
          else
            submit_into(self, std::move(*task), replace, true, rp);
        },
        [self, rp, id](caf::error& err) mutable {
          self->state.admitting.erase(id);
          rp.deliver(std::move(err));
        });
    return;
  }
  if (!st.opts.journal) {
    forget(self, id);
    launch(self, std::move(p->opts), std::move(p->environment));
    rp.deliver(id);
    return;
  }
  // Durable before it is answered: the id is held while the journal
  // records the task.
  journaled_task jt{p->opts.task, p->opts.trace_id, p->opts.seed,
                    p->opts.start_agent_id};
  st.reserved.insert(id);
  auto shared = std::make_shared<prepared_task>(std::move(*p));
  self
    ->request(st.opts.journal, caf::infinite, jtask_atom::value, id, encode(jt),
              wall_now(), replace)
    .then(
      [self, rp, id, shared](std::int64_t seq) mutable {
        auto& st = self->state;
        st.reserved.erase(id);
        forget(self, id);
        st.journal_seq[id] = seq;
        shared->opts.journal_seq = seq;
        launch(self, std::move(shared->opts), std::move(shared->environment));
        rp.deliver(id);
      },
      [self, rp, id](caf::error& err) mutable {
        self->state.reserved.erase(id);
        rp.deliver(std::move(err));
      });
}

caf::result<std::string> submit(registry_actor_t* self, task_spec task,
                                bool replace = false) {
  auto rp = self->make_response_promise<std::string>();
  submit_into(self, std::move(task), replace, false, rp);
  return rp;
}

/// Rebuilds the node's tasks from the journal: finished ones as they ended,
/// unfinished ones resume.
void restore(registry_actor_t* self) {
  auto& st = self->state;
  auto snapshot = std::move(st.opts.restored);
  st.opts.restored = {};
  if (auto i = snapshot.node_state.find("breakers");
      i != snapshot.node_state.end())
    st.breaker->restore(i->second);
  if (auto i = snapshot.node_state.find("quotas");
      i != snapshot.node_state.end())
    st.quotas.restore(i->second);
  if (auto i = snapshot.node_state.find("budget");
      i != snapshot.node_state.end())
    st.budget.restore(i->second);
  if (auto i = snapshot.node_state.find("rotation");
      i != snapshot.node_state.end()) {
    // "environment\tposition\n" lines.
    std::string_view rest = i->second;
    while (!rest.empty()) {
      auto eol = rest.find('\n');
      auto line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view{}
                                           : rest.substr(eol + 1);
      auto tab = line.find('\t');
      if (tab == std::string_view::npos)
        continue;
      st.rotation[std::string{line.substr(0, tab)}] = static_cast<std::size_t>(
        std::strtoull(std::string{line.substr(tab + 1)}.c_str(), nullptr, 10));
    }
  }
  // The finished tasks' journaled event counts, for the hub.
  std::map<std::string, std::int64_t> last_events;
  for (auto& e : snapshot.tasks) {
    auto id = e.task.spec.id;
    st.journal_seq[id] = e.seq;
    if (e.finished) {
      st.finished.insert_or_assign(id, std::move(*e.finished));
      st.finished_order.push_back(id);
      last_events[id] = e.last_event;
      continue;
    }
    supervisor_options opts;
    opts.task = std::move(e.task.spec);
    opts.trace_id = std::move(e.task.trace_id);
    opts.seed = e.task.seed;
    opts.start_agent_id = std::move(e.task.start_agent_id);
    opts.journal_seq = e.seq;
    opts.resume = true;
    opts.replay = std::move(e.inputs);
    auto runtime_name = opts.task.runtime.empty()
                          ? st.opts.config.node.default_runtime
                          : opts.task.runtime;
    auto rt = st.opts.runtimes.find(runtime_name);
    if (rt == st.opts.runtimes.end())
      rt = st.opts.runtimes.find("*");
    if (rt == st.opts.runtimes.end() || !rt->second) {
      // The node no longer has the task's runtime: it ends, failed, with
      // the reason (its journal keeps everything before).
      task_result r;
      r.task_id = id;
      r.error = "node restarted without the runtime '" + runtime_name +
                "' this task needs";
      task_status s;
      s.task_id = id;
      s.environment = opts.task.environment;
      s.state = task_state::done;
      s.result = r;
      self->send(st.opts.journal, jend_atom::value, e.seq, wall_now(),
                 encode(s));
      st.finished.insert_or_assign(id, std::move(s));
      st.finished_order.push_back(id);
      last_events[id] = e.last_event;
      continue;
    }
    opts.runtime = rt->second;
    st.resuming.insert(id);
    auto env = opts.task.environment;
    launch(self, std::move(opts), std::move(env), e.last_event, true);
  }
  while (st.finished_order.size() > st.opts.history_limit) {
    st.finished.erase(st.finished_order.front());
    st.journal_seq.erase(st.finished_order.front());
    st.finished_order.pop_front();
  }
  // A kept finished task's history is read from the journal.
  for (auto& id : st.finished_order)
    self->send(st.hub, detail::track_atom::value, id, st.journal_seq[id],
               last_events[id], true);
}

/// The record of a finished task; null while it runs or when unknown.
const task_status* finished_status(const registry_state& st,
                                   const std::string& id) {
  auto i = st.finished.find(id);
  return i == st.finished.end() ? nullptr : &i->second;
}

/// Runs `f` with `id`'s record once its result is recorded: at once when it
/// is, or when the result the supervisor sent before it ended has come
/// through the hub. Null for a task that is not known at all.
void when_finished(registry_actor_t* self, const std::string& id,
                   std::function<void(const task_status*)> f) {
  auto& st = self->state;
  if (auto* done = finished_status(st, id))
    f(done);
  else if (st.active.count(id) > 0)
    st.finishing[id].push_back(std::move(f));
  else
    f(nullptr);
}

/// Asks an active task's supervisor and answers with its reply. A supervisor
/// that finished in the meantime (its result is still on its way here when
/// the question reaches it) answers with `on_finished` once the result has
/// arrived, not with "receiver down".
template<class T, class OnReply, class OnFinished, class... Ts>
caf::result<T> ask_supervisor(registry_actor_t* self, const std::string& id,
                              OnReply on_reply, OnFinished on_finished,
                              Ts... xs) {
  auto rp = self->make_response_promise<T>();
  auto supervisor = self->state.active.at(id).supervisor;
  self->request(supervisor, caf::infinite, xs...)
    .then([=](T& x) mutable { rp.deliver(on_reply(std::move(x))); },
          [=](caf::error& err) mutable {
            // The supervisor sends its result before it terminates, so once
            // its reply failed the result is recorded or on its way through
            // the hub (a lost supervisor's, too).
            when_finished(self, id, [=](const task_status* done) mutable {
              if (done)
                rp.deliver(on_finished(*done));
              else
                rp.deliver(std::move(err));
            });
          });
  return rp;
}

/// Forwards a control message to a task's supervisor (-> bool); a finished
/// task answers false, an unknown one an error.
template<class... Ts>
caf::result<bool> control(registry_actor_t* self, const std::string& task_id,
                          Ts... xs) {
  auto& st = self->state;
  if (st.active.count(task_id) > 0)
    return ask_supervisor<bool>(
      self, task_id, [](bool x) { return x; },
      [](const task_status&) { return false; }, xs...);
  if (st.finished.count(task_id) > 0)
    return false;
  return make_error(protocol_error::unknown_task,
                    "no task with id '" + task_id + "'");
}

/// `tasksup forget`: a finished task's status, history, journal record and
/// attempt directories go, as if it had never been submitted (its id is
/// free again). False, and nothing changes, while the task has not
/// finished.
caf::result<bool> forget_finished(registry_actor_t* self,
                                  const std::string& task_id) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  if (st.active.count(task_id) > 0 || st.reserved.count(task_id) > 0 ||
      st.admitting.count(task_id) > 0)
    return false;
  if (st.finished.count(task_id) == 0)
    return make_error(protocol_error::unknown_task,
                      "no task with id '" + task_id + "'");
  if (st.opts.journal)
    self->send(st.opts.journal, jforget_atom::value, task_id);
  // A task id is one path component (validated at submission).
  std::error_code ec;
  fs::remove_all(fs::path{st.opts.attempt_root} / task_id, ec);
  forget(self, task_id);
  return true;
}

caf::result<std::vector<task_status>> all_status(registry_actor_t* self) {
  auto& st = self->state;
  auto acc = std::make_shared<std::vector<task_status>>();
  for (auto& id : st.finished_order)
    acc->push_back(st.finished[id]);
  if (st.active.empty())
    return *acc;
  auto rp = self->make_response_promise();
  auto pending = std::make_shared<std::size_t>(st.active.size());
  auto done = [=]() mutable {
    if (--*pending == 0) {
      std::sort(acc->begin(), acc->end(),
                [](auto& x, auto& y) { return x.task_id < y.task_id; });
      rp.deliver(std::move(*acc));
    }
  };
  for (auto& entry : st.active) {
    auto id = entry.first;
    self->request(entry.second.supervisor, caf::infinite, status_atom::value)
      .then(
        [=](task_status& s) mutable {
          add_placement(self, s);
          acc->push_back(std::move(s));
          done();
        },
        [=](caf::error&) mutable {
          // Finished between the question and the answer (see
          // ask_supervisor).
          when_finished(self, id, [=](const task_status* finished) mutable {
            if (finished)
              acc->push_back(*finished);
            done();
          });
        });
  }
  return rp;
}

caf::result<std::string> submit_json(registry_actor_t* self,
                                     const std::string& text, bool replace) {
  auto doc = parse_json_text(text, "submitted task");
  if (!doc)
    return make_error(protocol_error::invalid_task, doc.error().to_string());
  // Agents name this node's profiles (config/profiles/) or the built-in ones.
  auto task = parse_task_as_written(*doc, "submitted task",
                                    self->state.opts.config.profiles);
  if (!task)
    return make_error(protocol_error::invalid_task, task.error().to_string());
  return submit(self, std::move(*task), replace);
}

/// The most output one `logs` answer carries.
constexpr std::size_t log_chunk_bytes = 64 * 1024;

/// A chunk of an attempt's output log (see `logs_atom`).
using log_chunk = caf::result<int, std::uint64_t, std::string, bool>;

log_chunk read_log(registry_actor_t* self, const std::string& task_id,
                   int attempt, std::uint64_t offset) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  auto finished = st.finished.count(task_id) > 0;
  // Only a known task's id becomes a path (ids are validated at submit).
  if (!finished && st.active.count(task_id) == 0)
    return make_error(protocol_error::unknown_task,
                      "no task with id '" + task_id + "'");
  auto dir = fs::path{st.opts.attempt_root} / task_id;
  int latest = 0;
  std::error_code ec;
  for (fs::directory_iterator i{dir, ec}, end; !ec && i != end;
       i.increment(ec)) {
    auto name = i->path().filename().string();
    if (name.rfind("attempt-", 0) == 0)
      latest = std::max(latest, std::atoi(name.c_str() + 8));
  }
  if (attempt <= 0)
    attempt = latest;
  if (attempt <= 0)
    return log_chunk{0, std::uint64_t{0}, std::string{}, finished};
  auto path = dir / ("attempt-" + std::to_string(attempt)) / "output.log";
  std::string data;
  if (auto* f = std::fopen(path.c_str(), "rb")) {
    if (std::fseek(f, static_cast<long>(offset), SEEK_SET) == 0) {
      data.resize(log_chunk_bytes);
      data.resize(std::fread(data.data(), 1, data.size(), f));
    }
    std::fclose(f);
  } else if (attempt > latest) {
    return make_error(protocol_error::unknown_task, "task '" + task_id +
                                                      "' has no attempt " +
                                                      std::to_string(attempt));
  }
  auto complete = data.empty() && (finished || attempt < latest);
  auto next = offset + data.size();
  return log_chunk{attempt, next, std::move(data), complete};
}

caf::behavior registry_actor(registry_actor_t* self, registry_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.ids.emplace(st.opts.seed);
  st.breaker.emplace(st.opts.config.node.breaker);
  st.slots = slot_scheduler{st.opts.config.node.max_concurrent};
  if (st.opts.config.node.retry_budget_capacity)
    st.budget = retry_budget{*st.opts.config.node.retry_budget_capacity,
                             st.opts.config.node.retry_budget_refill_per_s};
  auto rules = classifier::make(st.opts.config.classifier_rules.empty()
                                  ? default_classifier_rules()
                                  : st.opts.config.classifier_rules);
  if (!rules)
    rules = classifier::make(default_classifier_rules());
  st.classifier = spawn_classifier(self->system(), std::move(*rules));
  st.backoff = spawn_backoff(self->system(), st.ids->child_seed());
  // The registry is the parent of its task supervisors: when it goes, they
  // go too (their workers then end their attempts), so a shut-down node
  // leaves no attempt running and no actor the system would wait for.
  auto supervisors = std::make_shared<std::map<std::string, caf::actor>>();
  st.supervisors = supervisors;
  self->attach_functor([classifier = st.classifier, backoff = st.backoff,
                        supervisors](const caf::error&) {
    for (auto& kv : *supervisors)
      caf::anon_send_exit(kv.second, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(classifier, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(backoff, caf::exit_reason::user_shutdown);
  });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    auto i = st.by_supervisor.find(dm.source);
    if (i != st.by_supervisor.end()) {
      // A supervisor that ends without escalating lost its task. Its result,
      // should it have sent one, is still on its way through the hub: the
      // loss goes the same way, after it, and counts only if it was not.
      task_result r;
      r.task_id = i->second;
      r.outcome = task_outcome::failed;
      r.error = "task supervisor died: " + self->system().render(dm.reason);
      self->send(st.hub, escalate_atom::value, std::move(r), dm.source);
      return;
    }
    for (auto& [name, n] : st.nodes)
      if (n.agent.address() == dm.source) {
        node_lost(self, name, self->system().render(dm.reason));
        return;
      }
  });
  st.hub = detail::spawn_event_hub(self, st.opts.journal);
  restore(self);
  if (!st.resuming.empty())
    st.slots.hold();
  return {
    // -- clients ----------------------------------------------------------
    [=](submit_atom, task_spec& task) { return submit(self, std::move(task)); },
    [=](submit_json_atom, const std::string& text) {
      return submit_json(self, text, false);
    },
    [=](submit_json_atom, const std::string& text, bool replace) {
      return submit_json(self, text, replace);
    },
    [=](stop_atom, const std::string& task_id, stop_mode mode) {
      return control(self, task_id, stop_atom::value, mode);
    },
    [=](retry_now_atom, const std::string& task_id) {
      return control(self, task_id, retry_now_atom::value);
    },
    [=](pause_atom, const std::string& task_id) {
      return control(self, task_id, pause_atom::value);
    },
    [=](resume_atom, const std::string& task_id) {
      return control(self, task_id, resume_atom::value);
    },
    [=](force_fallback_atom, const std::string& task_id) {
      return control(self, task_id, force_fallback_atom::value);
    },
    [=](forget_atom, const std::string& task_id) {
      return forget_finished(self, task_id);
    },
    [=](status_atom) { return all_status(self); },
    [=](health_atom) {
      auto& st = self->state;
      auto now = now_s(self);
      node_health h;
      for (auto& agent : st.breaker->keys())
        h.breakers.push_back({agent, st.breaker->state(agent, now)});
      h.budget_limited = !st.budget.unlimited();
      if (h.budget_limited) {
        h.budget_tokens = st.budget.available(now);
        h.budget_capacity = *st.opts.config.node.retry_budget_capacity;
      }
      for (auto& [account, until] : st.quotas.closed(now))
        h.quotas.push_back({account, until});
      h.slots_in_use = static_cast<int>(st.slots.in_use());
      // With worker nodes, the cluster's capacity: the workers' (and
      // repository tasks' slots here).
      h.slot_limit = st.slots.capacity();
      h.queued = static_cast<int>(st.slots.queued());
      return h;
    },
    [=](status_atom, const std::string& task_id) -> caf::result<task_status> {
      auto& st = self->state;
      if (st.active.count(task_id) > 0)
        return ask_supervisor<task_status>(
          self, task_id,
          [self](task_status s) {
            add_placement(self, s);
            return s;
          },
          [](const task_status& s) { return s; }, status_atom::value);
      if (auto* done = finished_status(st, task_id))
        return *done;
      return make_error(protocol_error::unknown_task,
                        "no task with id '" + task_id + "'");
    },
    [=](logs_atom, const std::string& task_id, int attempt,
        std::uint64_t offset) {
      return read_log(self, task_id, attempt, offset);
    },
    [=](await_atom, const std::string& task_id) -> caf::result<task_result> {
      auto& st = self->state;
      if (auto i = st.finished.find(task_id); i != st.finished.end())
        return *i->second.result;
      if (st.active.count(task_id) == 0)
        return make_error(protocol_error::unknown_task,
                          "no task with id '" + task_id + "'");
      auto rp = self->make_response_promise();
      st.awaiting[task_id].push_back(rp);
      return rp;
    },
    [=](subscribe_atom a, const caf::actor& sub) {
      return self->delegate(self->state.hub, a, sub);
    },
    [=](subscribe_atom a, const caf::actor& sub, const std::string& task_id) {
      return self->delegate(self->state.hub, a, sub, task_id);
    },
    [=](unsubscribe_atom a, const caf::actor& sub) {
      return self->delegate(self->state.hub, a, sub);
    },
    // -- task supervisors -------------------------------------------------
    [=](event_atom, const event& ev) { publish(self, ev); },
    [=](event_atom a, std::vector<event>& evs) {
      // A supervisor's events of one failed attempt, in order (an
      // embedding application's supervisors send theirs here).
      self->send(self->state.hub, a, std::move(evs));
    },
    [=](escalate_atom, task_result& r) {
      // Only a task's own supervisor ends it: a stray or forged escalate
      // would orphan the running supervisor and free its slot. (The node's
      // own supervisors send theirs through the hub; an embedding
      // application's come here.)
      if (!from_other_supervisor(self, r.task_id))
        record_result(self, std::move(r));
    },
    [=](escalate_atom, task_result& r, const caf::actor_addr& from) {
      // A result passed on by the hub, with the supervisor that sent it.
      if (self->current_sender() ==
            caf::actor_cast<caf::strong_actor_ptr>(self->state.hub) &&
          !from_other_supervisor(self, r.task_id, from))
        record_result(self, std::move(r));
    },
    [=](permit_atom, permit_request& req) -> caf::result<permit_reply> {
      auto& st = self->state;
      if (from_other_supervisor(self, req.task_id))
        return make_error(protocol_error::unknown_task,
                          "task '" + req.task_id + "' is not yours");
      if (auto i = st.active.find(req.task_id); i != st.active.end()) {
        req.placement = i->second.placement;
        req.local_only = i->second.local_only;
      }
      // A closed account is answered at once, before any queue: the task
      // waits for the reset (or falls back) without holding a place.
      if (auto until = st.quotas.closed_until(
            req.account.empty() ? req.agent_id : req.account, now_s(self));
          until > 0) {
        permit_reply r;
        r.quota_reset_at = until;
        return r;
      }
      if (!req.need_slot || st.slots.holds(req.task_id))
        return placed_permit(self, req);
      if (st.waiting.count(req.task_id) > 0)
        return make_error(protocol_error::duplicate_task,
                          "task '" + req.task_id +
                            "' waits for a slot already");
      if (st.slots.request({req.task_id, req.placement, req.local_only}))
        return placed_permit(self, req);
      auto rp = self->make_response_promise();
      auto id = req.task_id;
      st.waiting.emplace(std::move(id), std::make_pair(std::move(req), rp));
      return rp;
    },
    [=](release_atom, const std::string& task_id) {
      if (!from_other_supervisor(self, task_id))
        release(self, task_id);
    },
    [=](reclaim_atom, const std::string& task_id) {
      // Only a rebuilt task's own supervisor, once.
      auto& st = self->state;
      if (st.resuming.count(task_id) > 0 &&
          !from_other_supervisor(self, task_id)) {
        st.slots.reclaim(task_id);
      }
    },
    [=](resumed_atom, const std::string& task_id, std::string& dir,
        std::string& runtime_id, int attempt) {
      if (from_other_supervisor(self, task_id))
        return;
      if (attempt > 0)
        self->state.adopted_attempts.emplace(task_id, attempt);
      if (!dir.empty())
        self->state.adopted.insert(std::move(dir));
      if (!runtime_id.empty())
        self->state.adopted.insert(std::move(runtime_id));
      resumed(self, task_id);
    },
    // -- worker nodes -----------------------------------------------------
    [=](join_atom, node_offer& offer, caf::actor& agent) {
      return join(self, offer, agent);
    },
    [=](node_lost_atom, const std::string& name, const caf::node_id& nid) {
      // A supervisor whose attempt was lost with the node's connection:
      // seen before (or instead of) the registry's own down message.
      auto& st = self->state;
      auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (st.by_supervisor.count(sender) == 0)
        return;
      if (auto i = st.nodes.find(name);
          i != st.nodes.end() && i->second.agent.node() == nid)
        node_lost(self, name, "its connection failed");
    },
    [=](nodes_atom) {
      auto& st = self->state;
      std::vector<node_info> out;
      auto now = now_s(self);
      for (auto& [name, load] : st.slots.nodes())
        if (auto n = st.nodes.find(name); n != st.nodes.end())
          out.push_back(
            node_info{load.offer, load.running, now - n->second.joined_at});
      return out;
    },
    [=](close_account_atom, const std::string& account, double until) {
      // Only a task's supervisor reports a quota.
      auto& st = self->state;
      auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (st.by_supervisor.count(sender) == 0)
        return;
      auto now = now_s(self);
      st.quotas.drop_expired(now);
      st.quotas.close(account, std::min(until, now + max_quota_wait_s), now);
      save_state(self, "quotas", st.quotas.save());
    },
    [=](agent_result_atom, const std::string& agent_id, bool success) {
      auto& st = self->state;
      auto now = now_s(self);
      if (success)
        st.breaker->record_success(agent_id, now);
      else
        st.breaker->record_failure(agent_id, now);
      st.breaker->drop_stale(now);
      save_state(self, "breakers", st.breaker->save());
    },
  };
}

} // namespace

caf::actor spawn_registry(caf::actor_system& sys, registry_options opts) {
  return sys.spawn(registry_actor, std::move(opts));
}

} // namespace tasksup

#include "tasksup/actors/registry_actor.hpp"

#include "tasksup/actors/cluster.hpp"

#include "actor_now.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/events.hpp"
#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/runtime/workspace.hpp"

#include "tasksup/supervisor/account_quotas.hpp"
#include "tasksup/supervisor/circuit_breaker.hpp"
#include "tasksup/supervisor/retry_budget.hpp"

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

/// A worker node that joined this coordinator.
struct worker_node {
  node_offer offer;
  caf::actor agent;
  /// Attempts placed there that have not released their slot.
  int running = 0;
  double joined_at = 0;
};

/// The events of one task, kept so that a client subscribing after the task
/// began still sees all of it: every event but output lines, and output
/// lines up to a byte budget (the attempt's log file has them all).
struct event_history {
  std::vector<event> events;
  std::size_t log_bytes = 0;
  std::size_t dropped_logs = 0;

  /// Output lines kept per task, in bytes of text (a line's JSON is its
  /// text, escaped, plus the head's ~170 bytes).
  static constexpr std::size_t log_budget = 64 * 1024;
  static constexpr std::size_t log_head_bytes = 170;

  void add(const event& ev) {
    if (ev.kind == event_kind::log) {
      // Measured without rendering: the registry renders nothing.
      auto* f = ev.fields();
      auto* line = f ? std::get_if<event_data::log>(&f->data) : nullptr;
      auto bytes = line ? line->line.size() + log_head_bytes : ev.json().size();
      if (log_bytes + bytes > log_budget) {
        ++dropped_logs;
        return;
      }
      log_bytes += bytes;
    }
    events.push_back(ev);
  }
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
  std::optional<circuit_breaker> breaker;
  /// Accounts closed until their usage quota resets.
  account_quotas quotas;
  retry_budget budget;
  /// Attempt slots: holders and the FIFO of waiting tasks.
  std::set<std::string> slot_holders;
  /// The node of each holder's slot ("" for this node).
  std::map<std::string, std::string> slot_node;
  /// The worker nodes that joined, by name.
  std::map<std::string, worker_node> nodes;
  std::deque<std::pair<permit_request, caf::response_promise>> slot_queue;
  /// Round-robin position per environment.
  std::map<std::string, std::size_t> rotation;
  std::vector<caf::actor> subscribers;
  /// Past events per task, active and finished (evicted with `finished`).
  std::map<std::string, event_history> history;
  /// The supervisors of `active`, shared with the exit handler that stops
  /// them when the registry ends.
  std::shared_ptr<std::map<std::string, caf::actor>> supervisors;
  std::uint64_t next_number = 1;
  /// The journal's number of every task it records, and the number of the
  /// task's last journaled event.
  std::map<std::string, std::int64_t> journal_seq;
  std::map<std::string, std::int64_t> event_n;
  /// Ids being recorded by the journal (not yet answered).
  std::set<std::string> reserved;
  /// Tasks rebuilt after a restart whose history is (partly) only in the
  /// journal.
  std::set<std::string> restored;
  /// Rebuilt tasks that have not yet asked again for what they waited for;
  /// queued slots are granted once none is left, in submission order.
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

void publish(registry_actor_t* self, const event& ev) {
  auto& st = self->state;
  if (auto i = st.history.find(ev.task_id); i != st.history.end())
    i->second.add(ev);
  // Output lines are in the attempt's log file; the rest is history.
  if (st.opts.journal && ev.kind != event_kind::log)
    if (auto j = st.journal_seq.find(ev.task_id); j != st.journal_seq.end())
      self->send(st.opts.journal, jevent_atom::value, j->second,
                 ++st.event_n[ev.task_id], ev);
  for (auto& sub : self->state.subscribers)
    self->send(sub, event_atom::value, ev);
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

std::size_t slot_limit(registry_actor_t* self) {
  return static_cast<std::size_t>(
    std::max(1, self->state.opts.config.node.max_concurrent));
}

/// Slots held on this node (not on worker nodes).
std::size_t local_slots(registry_actor_t* self) {
  auto& st = self->state;
  return static_cast<std::size_t>(
    std::count_if(st.slot_node.begin(), st.slot_node.end(),
                  [](auto& x) { return x.second.empty(); }));
}

/// The worker nodes as placement sees them, and their names.
std::vector<node_load> node_loads(registry_actor_t* self,
                                  std::vector<std::string>* names = nullptr) {
  std::vector<node_load> out;
  for (auto& [name, n] : self->state.nodes) {
    out.push_back(node_load{n.offer, n.running});
    if (names)
      names->push_back(name);
  }
  return out;
}

/// Where `req`'s attempt can run now: a worker node's name, "" for this
/// node, nullopt when nothing fits or all that fits is busy. A coordinator
/// without worker nodes runs attempts itself; with some, only repository
/// tasks run here.
std::optional<std::string> place(registry_actor_t* self,
                                 const permit_request& req) {
  auto& st = self->state;
  if (req.local_only || st.nodes.empty()) {
    if (local_slots(self) < slot_limit(self))
      return std::string{};
    return std::nullopt;
  }
  std::vector<std::string> names;
  auto loads = node_loads(self, &names);
  if (auto i = choose_node(loads, req.placement))
    return names[*i];
  return std::nullopt;
}

/// Why `req` waits in the queue, for `status`.
std::string waiting_reason(registry_actor_t* self, const permit_request& req) {
  auto& st = self->state;
  if (req.local_only || st.nodes.empty())
    return "all " + std::to_string(slot_limit(self)) +
           " attempt slots of this node are busy";
  return unplaced_reason(node_loads(self), req.placement);
}

/// The permit of a task holding its slot, with where that slot is.
permit_reply placed_permit(registry_actor_t* self, const permit_request& req) {
  auto& st = self->state;
  auto r = permit(self, req);
  r.runtime = req.placement.runtime;
  if (auto i = st.slot_node.find(req.task_id);
      i != st.slot_node.end() && !i->second.empty())
    if (auto n = st.nodes.find(i->second); n != st.nodes.end()) {
      r.node = i->second;
      r.agent = n->second.agent;
    }
  return r;
}

/// Gives `req`'s task the slot on `node` and answers with it.
permit_reply grant(registry_actor_t* self, const permit_request& req,
                   const std::string& node) {
  auto& st = self->state;
  st.slot_holders.insert(req.task_id);
  st.slot_node[req.task_id] = node;
  if (auto n = st.nodes.find(node); n != st.nodes.end())
    ++n->second.running;
  return placed_permit(self, req);
}

/// Whether any slot is free: on this node or on a worker node.
bool any_slot_free(registry_actor_t* self) {
  auto& st = self->state;
  return local_slots(self) < slot_limit(self) ||
         std::any_of(st.nodes.begin(), st.nodes.end(), [](auto& x) {
           return x.second.running < x.second.offer.max_concurrent;
         });
}

/// Serves the queue in order; a task that fits nowhere now keeps its place
/// and does not hold up the tasks behind it that fit elsewhere. Stops once
/// every slot is taken (a slot given back serves one task, not a walk of
/// the whole queue).
void grant_slots(registry_actor_t* self) {
  auto& st = self->state;
  if (!st.resuming.empty())
    return;
  for (auto i = st.slot_queue.begin();
       i != st.slot_queue.end() && any_slot_free(self);) {
    auto node = place(self, i->first);
    if (!node) {
      ++i;
      continue;
    }
    auto [req, rp] = std::move(*i);
    i = st.slot_queue.erase(i);
    rp.deliver(grant(self, req, *node));
  }
}

void release(registry_actor_t* self, const std::string& task_id) {
  auto& st = self->state;
  if (auto i = st.slot_node.find(task_id); i != st.slot_node.end()) {
    if (auto n = st.nodes.find(i->second); n != st.nodes.end())
      --n->second.running;
    st.slot_node.erase(i);
  }
  if (st.slot_holders.erase(task_id) == 0) {
    auto i = std::find_if(st.slot_queue.begin(), st.slot_queue.end(),
                          [&](auto& x) { return x.first.task_id == task_id; });
    if (i != st.slot_queue.end())
      st.slot_queue.erase(i);
  }
  grant_slots(self);
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
  std::stable_sort(
    st.slot_queue.begin(), st.slot_queue.end(), [&](auto& x, auto& y) {
      return order_of(self, x.first.task_id) < order_of(self, y.first.task_id);
    });
  grant_slots(self);
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
               name.c_str(), why.c_str(), i->second.running);
  self->demonitor(i->second.agent);
  st.nodes.erase(i);
  // Without worker nodes the coordinator runs the queue itself again.
  grant_slots(self);
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
  auto name = offer.name;
  st.nodes.emplace(
    name, worker_node{std::move(offer), std::move(agent), 0, now_s(self)});
  grant_slots(self);
  return st.opts.node_name;
}

/// Where a task runs or why it waits, added to its supervisor's status.
void add_placement(registry_actor_t* self, task_status& s) {
  auto& st = self->state;
  if (auto i = st.slot_node.find(s.task_id); i != st.slot_node.end())
    s.node = i->second;
  auto q = std::find_if(st.slot_queue.begin(), st.slot_queue.end(),
                        [&](auto& x) { return x.first.task_id == s.task_id; });
  if (q != st.slot_queue.end())
    s.waiting_for = waiting_reason(self, q->first);
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
  st.finished.insert_or_assign(r.task_id, std::move(s));
  st.finished_order.push_back(r.task_id);
  while (st.finished_order.size() > st.opts.history_limit) {
    auto& id = st.finished_order.front();
    st.history.erase(id);
    st.finished.erase(id);
    st.journal_seq.erase(id);
    st.event_n.erase(id);
    st.restored.erase(id);
    st.finished_order.pop_front();
  }
}

/// True when the current message names `task_id`, a task of this registry,
/// but comes from someone other than that task's supervisor (messages about
/// tasks the registry does not run, e.g. an embedding application's own
/// supervisors using it for slots, pass).
bool from_other_supervisor(registry_actor_t* self, const std::string& task_id) {
  auto& st = self->state;
  auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (auto i = st.active.find(task_id); i != st.active.end())
    return i->second.supervisor.address() != sender;
  // A supervisor of ours speaking for a task that is not its own.
  auto j = st.by_supervisor.find(sender);
  return j != st.by_supervisor.end() && j->second != task_id;
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

/// Spawns the supervisor of a prepared task.
void launch(registry_actor_t* self, supervisor_options opts,
            std::string environment) {
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
  auto sup = spawn_task_supervisor(
    self->system(), caf::actor_cast<caf::actor>(self), std::move(opts));
  self->monitor(sup);
  st.by_supervisor.emplace(sup.address(), id);
  st.history[id];
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
  st.history.erase(task_id);
  st.journal_seq.erase(task_id);
  st.event_n.erase(task_id);
  st.restored.erase(task_id);
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
  for (auto& e : snapshot.tasks) {
    auto id = e.task.spec.id;
    st.journal_seq[id] = e.seq;
    st.restored.insert(id);
    if (e.last_event > 0)
      st.event_n[id] = e.last_event;
    if (e.finished) {
      st.finished.insert_or_assign(id, std::move(*e.finished));
      st.finished_order.push_back(id);
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
      continue;
    }
    opts.runtime = rt->second;
    st.resuming.insert(id);
    auto env = opts.task.environment;
    launch(self, std::move(opts), std::move(env));
  }
  while (st.finished_order.size() > st.opts.history_limit) {
    st.finished.erase(st.finished_order.front());
    st.journal_seq.erase(st.finished_order.front());
    st.restored.erase(st.finished_order.front());
    st.finished_order.pop_front();
  }
}

/// The record of a finished task; null while it runs or when unknown.
const task_status* finished_status(const registry_state& st,
                                   const std::string& id) {
  auto i = st.finished.find(id);
  return i == st.finished.end() ? nullptr : &i->second;
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
            // its reply failed the registry has either recorded the task as
            // finished or lost the supervisor (and reported that).
            if (auto* done = finished_status(self->state, id))
              rp.deliver(on_finished(*done));
            else
              rp.deliver(std::move(err));
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
          // ask_supervisor): its record is here by now.
          if (auto* finished = finished_status(self->state, id))
            acc->push_back(*finished);
          done();
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

/// Subscribes `sub` and answers with the task's events so far; a task whose
/// history is in the journal (rebuilt after a restart) is read from there.
caf::result<std::vector<event>> subscribe_task(registry_actor_t* self,
                                               const caf::actor& sub,
                                               const std::string& task_id) {
  auto& st = self->state;
  auto h = st.history.find(task_id);
  auto restored = st.restored.count(task_id) > 0;
  if (h == st.history.end() && !restored)
    return make_error(protocol_error::unknown_task,
                      "no task with id '" + task_id + "'");
  auto& subs = st.subscribers;
  if (std::find(subs.begin(), subs.end(), sub) == subs.end()) {
    subs.push_back(sub);
    self->monitor(sub);
  }
  if (!restored || !st.opts.journal)
    return h->second.events;
  // The journal has every event but output lines, up to the ones queued
  // just now; everything after reaches `sub` as it happens.
  auto rp = self->make_response_promise<std::vector<event>>();
  self
    ->request(st.opts.journal, caf::infinite, jhistory_atom::value,
              st.journal_seq[task_id], task_id)
    .then([rp](std::vector<event>& evs) mutable { rp.deliver(std::move(evs)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
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
      // A supervisor that ends without escalating lost its task.
      task_result r;
      r.task_id = i->second;
      r.outcome = task_outcome::failed;
      r.error = "task supervisor died: " + self->system().render(dm.reason);
      record_result(self, std::move(r));
      return;
    }
    for (auto& [name, n] : st.nodes)
      if (n.agent.address() == dm.source) {
        node_lost(self, name, self->system().render(dm.reason));
        return;
      }
    auto& subs = st.subscribers;
    subs.erase(
      std::remove_if(subs.begin(), subs.end(),
                     [&](auto& x) { return x.address() == dm.source; }),
      subs.end());
  });
  restore(self);
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
      h.slots_in_use = static_cast<int>(st.slot_holders.size());
      h.slot_limit = static_cast<int>(slot_limit(self));
      if (!st.nodes.empty()) {
        // The cluster's capacity: the worker nodes' (and repository tasks'
        // slots here).
        h.slot_limit = 0;
        for (auto& [name, n] : st.nodes)
          h.slot_limit += n.offer.max_concurrent;
      }
      h.queued = static_cast<int>(st.slot_queue.size());
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
    [=](subscribe_atom, const caf::actor& sub) {
      auto& subs = self->state.subscribers;
      if (std::find(subs.begin(), subs.end(), sub) == subs.end()) {
        subs.push_back(sub);
        self->monitor(sub);
      }
      return true;
    },
    [=](subscribe_atom, const caf::actor& sub, const std::string& task_id) {
      return subscribe_task(self, sub, task_id);
    },
    [=](unsubscribe_atom, const caf::actor& sub) {
      auto& subs = self->state.subscribers;
      subs.erase(std::remove(subs.begin(), subs.end(), sub), subs.end());
      return true;
    },
    // -- task supervisors -------------------------------------------------
    [=](event_atom, const event& ev) { publish(self, ev); },
    [=](event_atom, const std::vector<event>& evs) {
      // A supervisor's events of one failed attempt, in order.
      for (auto& ev : evs)
        publish(self, ev);
    },
    [=](escalate_atom, task_result& r) {
      // Only a task's own supervisor ends it: a stray or forged escalate
      // would orphan the running supervisor and free its slot.
      if (!from_other_supervisor(self, r.task_id))
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
      if (!req.need_slot || st.slot_holders.count(req.task_id) > 0)
        return placed_permit(self, req);
      if (st.slot_queue.empty() && st.resuming.empty())
        if (auto node = place(self, req))
          return grant(self, req, *node);
      auto rp = self->make_response_promise();
      st.slot_queue.emplace_back(std::move(req), rp);
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
        st.slot_holders.insert(task_id);
        st.slot_node[task_id] = "";
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
      for (auto& [name, n] : st.nodes)
        out.push_back(node_info{n.offer, n.running, now - n.joined_at});
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

#include "tasksup/actors/registry_actor.hpp"

#include "actor_now.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/events.hpp"
#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/runtime/workspace.hpp"

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
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
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
};

/// The events of one task, kept so that a client subscribing after the task
/// began still sees all of it: every event but output lines, and output
/// lines up to a byte budget (the attempt's log file has them all).
struct event_history {
  std::vector<event> events;
  std::size_t log_bytes = 0;
  std::size_t dropped_logs = 0;

  /// Output lines kept per task, in bytes of rendered JSON.
  static constexpr std::size_t log_budget = 64 * 1024;

  void add(const event& ev) {
    if (ev.kind == event_kind::log) {
      if (log_bytes + ev.json.size() > log_budget) {
        ++dropped_logs;
        return;
      }
      log_bytes += ev.json.size();
    }
    events.push_back(ev);
  }
};

struct registry_state {
  registry_options opts;
  caf::actor classifier;
  caf::actor backoff;
  std::optional<trace_id_generator> ids;
  std::map<std::string, active_task> active;
  std::map<caf::actor_addr, std::string> by_supervisor;
  /// Finished tasks, oldest first in `finished_order`.
  std::map<std::string, task_status> finished;
  std::deque<std::string> finished_order;
  std::map<std::string, std::vector<caf::response_promise>> awaiting;
  std::optional<circuit_breaker> breaker;
  retry_budget budget;
  /// Attempt slots: holders and the FIFO of waiting tasks.
  std::set<std::string> slot_holders;
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
  /// Ids of tasks whose admission checks run (not queued yet).
  std::set<std::string> admitting;
  static inline const char* name = "tasksup.registry";
};

using registry_actor_t = caf::stateful_actor<registry_state>;

void publish(registry_actor_t* self, const event& ev) {
  if (auto i = self->state.history.find(ev.task_id);
      i != self->state.history.end())
    i->second.add(ev);
  for (auto& sub : self->state.subscribers)
    self->send(sub, event_atom::value, ev);
}

/// The answer to a task that holds its slot: the agent's breaker, then
/// (only when the agent may run) a retry token.
permit_reply permit(registry_actor_t* self, const permit_request& req) {
  auto& st = self->state;
  auto now = now_s(self);
  permit_reply r;
  r.agent_allowed = st.breaker->allow(req.agent_id, now);
  if (r.agent_allowed && req.need_token)
    r.token = st.budget.try_take(now);
  return r;
}

std::size_t slot_limit(registry_actor_t* self) {
  return static_cast<std::size_t>(
    std::max(1, self->state.opts.config.node.max_concurrent));
}

void grant_slots(registry_actor_t* self) {
  auto& st = self->state;
  while (!st.slot_queue.empty() && st.slot_holders.size() < slot_limit(self)) {
    auto [req, rp] = std::move(st.slot_queue.front());
    st.slot_queue.pop_front();
    st.slot_holders.insert(req.task_id);
    rp.deliver(permit(self, req));
  }
}

void release(registry_actor_t* self, const std::string& task_id) {
  auto& st = self->state;
  if (st.slot_holders.erase(task_id) == 0) {
    auto i = std::find_if(st.slot_queue.begin(), st.slot_queue.end(),
                          [&](auto& x) { return x.first.task_id == task_id; });
    if (i != st.slot_queue.end())
      st.slot_queue.erase(i);
  }
  grant_slots(self);
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
  release(self, r.task_id);
  if (auto w = st.awaiting.find(r.task_id); w != st.awaiting.end()) {
    for (auto& rp : w->second)
      rp.deliver(r);
    st.awaiting.erase(w);
  }
  st.finished.insert_or_assign(r.task_id, std::move(s));
  st.finished_order.push_back(r.task_id);
  while (st.finished_order.size() > st.opts.history_limit) {
    st.history.erase(st.finished_order.front());
    st.finished.erase(st.finished_order.front());
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

caf::result<std::string> submit(registry_actor_t* self, task_spec task,
                                bool admitted = false) {
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
  if (task.id.empty()) {
    do
      task.id = "task-" + std::to_string(st.next_number++);
    while (st.active.count(task.id) > 0 || st.finished.count(task.id) > 0);
  } else if (st.active.count(task.id) > 0 || st.finished.count(task.id) > 0 ||
             (!admitted && st.admitting.count(task.id) > 0)) {
    return make_error(protocol_error::duplicate_task,
                      "a task with id '" + task.id + "' exists already");
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
  // Repository tasks and tasks with an admit command are checked before
  // they are queued; a rejected one leaves nothing behind.
  if (!admitted && (task.repo || task.admit)) {
    auto id = task.id;
    st.admitting.insert(id);
    auto rp = self->make_response_promise<std::string>();
    auto job = self->spawn<caf::detached>(admission_actor,
                                          st.opts.config.node.allowed_paths);
    self->request(job, caf::infinite, admit_atom::value, task, runtime_name)
      .then(
        [=](std::string& err) mutable {
          self->state.admitting.erase(id);
          if (!err.empty()) {
            rp.deliver(make_error(protocol_error::invalid_task,
                                  "rejected at admission: " + err));
            return;
          }
          auto r = submit(self, task, true);
          if (r.flag == caf::rt_value)
            rp.deliver(r.value.get_as<std::string>(0));
          else
            rp.deliver(std::move(r.err));
        },
        [=](caf::error& err) mutable {
          self->state.admitting.erase(id);
          rp.deliver(std::move(err));
        });
    return rp;
  }
  supervisor_options opts;
  // Round-robin rotates the first agent per environment; fallbacks within a
  // task never move it.
  if (task.selection && task.selection->mode == selection_mode::round_robin &&
      !task.selection->agents.empty()) {
    auto& pos = st.rotation[task.environment];
    auto& agents = task.selection->agents;
    opts.start_agent_id = agents[pos % agents.size()].agent_id;
    pos = (pos + 1) % agents.size();
  }
  opts.default_agent = st.opts.config.node.default_agent;
  opts.runtime = rt->second;
  opts.classifier = st.classifier;
  opts.backoff = st.backoff;
  opts.services = caf::actor_cast<caf::actor>(self);
  opts.trace_id = st.ids->trace_id();
  opts.seed = st.ids->child_seed();
  opts.attempt_root = st.opts.attempt_root;
  auto id = task.id;
  auto env_name = task.environment;
  opts.task = std::move(task);
  auto trace = opts.trace_id;
  auto sup = spawn_task_supervisor(
    self->system(), caf::actor_cast<caf::actor>(self), std::move(opts));
  self->monitor(sup);
  st.by_supervisor.emplace(sup.address(), id);
  st.history[id];
  st.supervisors->emplace(id, sup);
  st.active.emplace(id, active_task{sup, env_name, trace});
  return id;
}

/// Forwards a control message to a task's supervisor (-> bool); a finished
/// task answers false, an unknown one an error.
template<class... Ts>
caf::result<bool> control(registry_actor_t* self, const std::string& task_id,
                          Ts... xs) {
  auto& st = self->state;
  if (auto i = st.active.find(task_id); i != st.active.end()) {
    self->delegate(i->second.supervisor, xs...);
    return caf::delegated<bool>{};
  }
  if (st.finished.count(task_id) > 0)
    return false;
  return make_error(protocol_error::unknown_task,
                    "no task with id '" + task_id + "'");
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
  for (auto& [id, t] : st.active)
    self->request(t.supervisor, caf::infinite, status_atom::value)
      .then(
        [=](task_status& s) mutable {
          acc->push_back(std::move(s));
          done();
        },
        [=](caf::error&) mutable { done(); });
  return rp;
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
    auto& subs = st.subscribers;
    subs.erase(
      std::remove_if(subs.begin(), subs.end(),
                     [&](auto& x) { return x.address() == dm.source; }),
      subs.end());
  });
  return {
    // -- clients ----------------------------------------------------------
    [=](submit_atom, task_spec& task) { return submit(self, std::move(task)); },
    [=](submit_json_atom, const std::string& text) -> caf::result<std::string> {
      auto doc = parse_json_text(text, "submitted task");
      if (!doc)
        return make_error(protocol_error::invalid_task,
                          doc.error().to_string());
      auto task = parse_task_as_written(*doc, "submitted task");
      if (!task)
        return make_error(protocol_error::invalid_task,
                          task.error().to_string());
      return submit(self, std::move(*task));
    },
    [=](stop_atom, const std::string& task_id, stop_mode mode) {
      return control(self, task_id, stop_atom::value, mode);
    },
    [=](retry_now_atom, const std::string& task_id) {
      return control(self, task_id, retry_now_atom::value);
    },
    [=](force_fallback_atom, const std::string& task_id) {
      return control(self, task_id, force_fallback_atom::value);
    },
    [=](status_atom) { return all_status(self); },
    [=](status_atom, const std::string& task_id) -> caf::result<task_status> {
      auto& st = self->state;
      if (auto i = st.active.find(task_id); i != st.active.end()) {
        self->delegate(i->second.supervisor, status_atom::value);
        return caf::delegated<task_status>{};
      }
      if (auto i = st.finished.find(task_id); i != st.finished.end())
        return i->second;
      return make_error(protocol_error::unknown_task,
                        "no task with id '" + task_id + "'");
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
    [=](subscribe_atom, const caf::actor& sub,
        const std::string& task_id) -> caf::result<std::vector<event>> {
      // The task's past events and the subscription in one step: nothing
      // the task emits is missed or seen twice.
      auto& st = self->state;
      auto h = st.history.find(task_id);
      if (h == st.history.end())
        return make_error(protocol_error::unknown_task,
                          "no task with id '" + task_id + "'");
      auto& subs = st.subscribers;
      if (std::find(subs.begin(), subs.end(), sub) == subs.end()) {
        subs.push_back(sub);
        self->monitor(sub);
      }
      return h->second.events;
    },
    [=](unsubscribe_atom, const caf::actor& sub) {
      auto& subs = self->state.subscribers;
      subs.erase(std::remove(subs.begin(), subs.end(), sub), subs.end());
      return true;
    },
    // -- task supervisors -------------------------------------------------
    [=](event_atom, const event& ev) { publish(self, ev); },
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
      if (!req.need_slot || st.slot_holders.count(req.task_id) > 0)
        return permit(self, req);
      if (st.slot_queue.empty() && st.slot_holders.size() < slot_limit(self)) {
        st.slot_holders.insert(req.task_id);
        return permit(self, req);
      }
      auto rp = self->make_response_promise();
      st.slot_queue.emplace_back(std::move(req), rp);
      return rp;
    },
    [=](release_atom, const std::string& task_id) {
      if (!from_other_supervisor(self, task_id))
        release(self, task_id);
    },
    [=](agent_result_atom, const std::string& agent_id, bool success) {
      auto& st = self->state;
      auto now = now_s(self);
      if (success)
        st.breaker->record_success(agent_id, now);
      else
        st.breaker->record_failure(agent_id, now);
      st.breaker->drop_stale(now);
    },
  };
}

} // namespace

caf::actor spawn_registry(caf::actor_system& sys, registry_options opts) {
  return sys.spawn(registry_actor, std::move(opts));
}

} // namespace tasksup

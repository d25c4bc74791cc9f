#include "tasksup/actors/registry_actor.hpp"

#include "registry_state.hpp"

#include "tasksup/actors/actor_timer.hpp"
#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/events.hpp"
#include "tasksup/actors/task_supervisor_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup::detail {

/// Hands `ev` to the event hub.
void publish(registry_ptr self, const event& ev) {
  self->send(self->state.hub, event_atom::value, ev);
}

/// The hub forgets `task_id`'s events (it is evicted or forgotten).
void untrack(registry_ptr self, const std::string& task_id) {
  self->send(self->state.hub, detail::untrack_atom::value, task_id);
}

/// Records a piece of node state in the journal.
void save_state(registry_ptr self, const char* key, std::string text) {
  if (self->state.opts.journal)
    self->send(self->state.opts.journal, jstate_atom::value, std::string{key},
               std::move(text));
}

/// The answer to a task that holds its slot: the agent's breaker, then
/// (only when the agent may run) a retry token.
permit_reply permit(registry_ptr self, const permit_request& req) {
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
permit_reply placed_permit(registry_ptr self, const permit_request& req) {
  auto& st = self->state;
  auto r = permit(self, req);
  r.runtime = req.placement.runtime;
  if (auto node = st.slots.node_of(req.task_id); node && !node->empty())
    if (auto n = st.nodes.find(*node); n != st.nodes.end()) {
      r.node = *node;
      r.agent = n->second.agent;
      st.placed_on.insert_or_assign(req.task_id, *node);
    }
  return r;
}

/// Answers the waiting permits the scheduler granted.
void deliver(registry_ptr self, std::vector<slot_grant> grants) {
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

void release(registry_ptr self, const std::string& task_id) {
  auto& st = self->state;
  st.waiting.erase(task_id);
  deliver(self, st.slots.release(task_id));
}

void add_placement(registry_ptr self, task_status& s) {
  auto& st = self->state;
  if (auto node = st.slots.node_of(s.task_id))
    s.node = std::move(*node);
  if (auto why = st.slots.waiting_reason(s.task_id))
    s.waiting_for = std::move(*why);
}

/// Records a final result; answers everyone awaiting it.
void record_result(registry_ptr self, task_result r) {
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
  s.attempt = i->second.attempts_before + r.metadata.total_attempts;
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
  auto now = wall_now();
  st.finished_order.push_back({r.task_id, now});
  if (auto w = st.finishing.find(r.task_id); w != st.finishing.end()) {
    auto fs = std::move(w->second);
    st.finishing.erase(w);
    for (auto& f : fs)
      f(&record);
  }
  member_run_ended(self, *record.result);
  expire_finished(self, now);
}

namespace {

/// `seconds` in words: "7 days", "36 hours", "90 seconds".
std::string age_words(double seconds) {
  auto whole = [](double x, const char* unit) {
    auto n = static_cast<long long>(x);
    return std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
  };
  if (seconds >= 86400 && std::fmod(seconds, 86400) == 0)
    return whole(seconds / 86400, "day");
  if (seconds >= 3600 && std::fmod(seconds, 3600) == 0)
    return whole(seconds / 3600, "hour");
  return whole(seconds, "second");
}

/// `at` (wall-clock seconds) as UTC: "2026-11-30 01:02:03 UTC".
std::string utc_words(double at) {
  auto t = static_cast<std::time_t>(at);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

} // namespace

void expire_finished(registry_ptr self, double now) {
  auto& st = self->state;
  auto max_age = st.opts.history_max_age_s;
  while (!st.finished_order.empty()) {
    auto& oldest = st.finished_order.front();
    std::string why;
    if (st.finished_order.size() > st.opts.history_limit)
      why = "the node keeps the " + std::to_string(st.opts.history_limit) +
            " most recent finished tasks (--retain-tasks)";
    else if (max_age > 0 && now - oldest.at > max_age)
      why = "the node keeps finished tasks for " + age_words(max_age) +
            " (--retain-days)";
    else
      break;
    auto id = std::move(oldest.id);
    st.finished_order.pop_front();
    untrack(self, id);
    st.finished.erase(id);
    st.journal_seq.erase(id);
    st.placed_on.erase(id);
    // The journal keeps what status shows: its record goes now, not at
    // its next pruning.
    if (st.opts.journal)
      self->send(st.opts.journal, jforget_atom::value, id);
    if (st.expired.count(id) == 0)
      st.expired_order.push_back(id);
    st.expired[id] = expired_task{now, std::move(why)};
    while (st.expired_order.size() > max_expired_kept) {
      st.expired.erase(st.expired_order.front());
      st.expired_order.pop_front();
    }
    if (st.opts.journal && !st.expired_unsaved) {
      st.expired_unsaved = true;
      self->delayed_send(self, expired_save_delay, save_expired_atom::value);
    }
  }
}

std::string encode_expired(const registry_state& st) {
  std::string out;
  auto n = std::min(st.expired_order.size(), max_expired_saved);
  for (auto i = st.expired_order.size() - n; i < st.expired_order.size(); ++i) {
    auto& id = st.expired_order[i];
    auto& x = st.expired.at(id);
    char at[32];
    std::snprintf(at, sizeof at, "%.3f", x.at);
    out += id + '\t' + at + '\t' + x.why + '\n';
  }
  return out;
}

void restore_expired(registry_state& st, std::string_view text) {
  while (!text.empty()) {
    auto eol = text.find('\n');
    auto line = text.substr(0, eol);
    text =
      eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    auto tab1 = line.find('\t');
    auto tab2 =
      tab1 == std::string_view::npos ? tab1 : line.find('\t', tab1 + 1);
    if (tab2 == std::string_view::npos || tab1 == 0)
      continue;
    std::string id{line.substr(0, tab1)};
    char* end = nullptr;
    std::string at_text{line.substr(tab1 + 1, tab2 - tab1 - 1)};
    auto at = std::strtod(at_text.c_str(), &end);
    if (end == at_text.c_str() || *end != '\0' || !std::isfinite(at))
      continue;
    if (st.expired.count(id) == 0)
      st.expired_order.push_back(id);
    st.expired[id] = expired_task{at, std::string{line.substr(tab2 + 1)}};
  }
  while (st.expired_order.size() > max_expired_kept) {
    st.expired.erase(st.expired_order.front());
    st.expired_order.pop_front();
  }
}

caf::error unknown_task_error(const registry_state& st,
                              const std::string& task_id) {
  if (auto i = st.expired.find(task_id); i != st.expired.end())
    return make_error(protocol_error::unknown_task,
                      "task '" + task_id + "' expired at " +
                        utc_words(i->second.at) + ": " + i->second.why);
  return make_error(protocol_error::unknown_task,
                    "no task with id '" + task_id + "'");
}

/// True when the current message names `task_id`, a task of this registry,
/// but comes from someone other than that task's supervisor (messages about
/// tasks the registry does not run, e.g. an embedding application's own
/// supervisors using it for slots, pass).
bool from_other_supervisor(registry_ptr self, const std::string& task_id,
                           const caf::actor_addr& sender) {
  auto& st = self->state;
  if (auto i = st.active.find(task_id); i != st.active.end())
    return i->second.supervisor.address() != sender;
  // A supervisor of ours speaking for a task that is not its own.
  auto j = st.by_supervisor.find(sender);
  return j != st.by_supervisor.end() && j->second != task_id;
}

bool from_other_supervisor(registry_ptr self, const std::string& task_id) {
  return from_other_supervisor(
    self, task_id, caf::actor_cast<caf::actor_addr>(self->current_sender()));
}

/// The record of a finished task; null while it runs or when unknown.
const task_status* finished_status(const registry_state& st,
                                   const std::string& id) {
  auto i = st.finished.find(id);
  return i == st.finished.end() ? nullptr : &i->second;
}

void when_finished(registry_ptr self, const std::string& id,
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
caf::result<T> ask_supervisor(registry_ptr self, const std::string& id,
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
caf::result<bool> control(registry_ptr self, const std::string& task_id,
                          Ts... xs) {
  auto& st = self->state;
  if (st.groups.count(task_id) > 0)
    return make_error(protocol_error::invalid_task,
                      "'" + task_id +
                        "' is a group: stop, kill, status, wait and events "
                        "apply to it, other controls to its tasks");
  if (st.active.count(task_id) > 0)
    return ask_supervisor<bool>(
      self, task_id, [](bool x) { return x; },
      [](const task_status&) { return false; }, xs...);
  if (st.finished.count(task_id) > 0)
    return false;
  return unknown_task_error(st, task_id);
}

/// Whether the current message comes from the registry's node membership
/// (its reports are the only ones that change where attempts are placed).
bool from_membership(registry_ptr self) {
  return self->current_sender() ==
         caf::actor_cast<caf::strong_actor_ptr>(self->state.membership);
}

registry_impl::behavior_type registry_behavior(registry_ptr self,
                                               registry_options opts) {
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
  st.worker_timer = make_actor_timer(self->system());
  // The registry is the parent of its task supervisors: when it goes, they
  // go too (their workers then end their attempts), so a shut-down node
  // leaves no attempt running and no actor the system would wait for.
  auto supervisors =
    std::make_shared<std::map<std::string, task_supervisor_actor>>();
  st.supervisors = supervisors;
  auto groups =
    std::make_shared<std::map<std::string, group_supervisor_actor>>();
  st.group_supervisors = groups;
  self->attach_functor([classifier = st.classifier, backoff = st.backoff,
                        supervisors, groups](const caf::error&) {
    for (auto& kv : *groups)
      caf::anon_send_exit(kv.second, caf::exit_reason::user_shutdown);
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
      r.cause.reason = end_reason::supervisor_died;
      self->send(st.hub, escalate_atom::value, std::move(r), dm.source);
    } else {
      group_down(self, dm);
    }
  });
  st.hub = detail::spawn_event_hub(self, st.opts.journal);
  st.membership = detail::spawn_node_membership(
    self, caf::actor_cast<membership_listener_actor>(self), st.opts.node_name,
    st.opts.peer_timeout_s);
  // The restore consumes the snapshot.
  std::string saved_schedules;
  if (auto i = st.opts.restored.node_state.find("schedules");
      i != st.opts.restored.node_state.end())
    saved_schedules = i->second;
  restore(self);
  if (!st.resuming.empty())
    st.slots.hold();
  if (st.opts.schedules) {
    // After the restore: a catch-up run is submitted like any task.
    scheduler_options so;
    so.host = caf::actor_cast<schedule_host_actor>(self);
    so.journal = st.opts.journal;
    so.config = st.opts.config;
    so.saved = std::move(saved_schedules);
    st.scheduler = spawn_scheduler(self->system(), std::move(so));
    self->link_to(st.scheduler);
  }
  return {
    // -- clients ----------------------------------------------------------
    [=](submit_atom, task_spec& task) { return submit(self, std::move(task)); },
    [=](submit_json_atom, const std::string& text) {
      return submit_json(self, text, false);
    },
    [=](submit_json_atom, const std::string& text, bool replace) {
      return submit_json(self, text, replace);
    },
    [=](stop_atom, const std::string& task_id,
        stop_mode mode) -> caf::result<bool> {
      if (self->state.groups.count(task_id) > 0)
        return stop_group(self, task_id, mode);
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
      if (self->state.groups.count(task_id) > 0)
        return forget_group(self, task_id);
      return forget_finished(self, task_id);
    },
    [=](status_atom) { return all_status(self); },
    [=](status_atom, const status_query& q) { return status_page_of(self, q); },
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
      if (st.groups.count(task_id) > 0)
        return group_status(self, task_id);
      if (st.active.count(task_id) > 0)
        return ask_supervisor<task_status>(
          self, task_id,
          [self](task_status s) {
            add_placement(self, s);
            return s;
          },
          [](const task_status& s) { return s; }, status_atom::value);
      expire_finished(self, wall_now());
      if (auto* done = finished_status(st, task_id))
        return *done;
      return unknown_task_error(st, task_id);
    },
    [=](logs_atom, const std::string& task_id, int attempt,
        std::uint64_t offset) {
      return read_log(self, task_id, attempt, offset);
    },
    [=](await_atom, const std::string& task_id) -> caf::result<task_result> {
      auto& st = self->state;
      if (auto i = st.finished.find(task_id); i != st.finished.end())
        return *i->second.result;
      if (auto g = st.groups.find(task_id); g != st.groups.end()) {
        if (g->second.result)
          return *g->second.result;
      } else if (st.active.count(task_id) == 0)
        return unknown_task_error(st, task_id);
      auto rp = self->make_response_promise<task_result>();
      st.awaiting[task_id].push_back(rp);
      return rp;
    },
    [=](subscribe_atom a, const subscriber_actor& sub) {
      return self->delegate(self->state.hub, a, sub);
    },
    [=](subscribe_atom a, const subscriber_actor& sub,
        const std::string& task_id) {
      return self->delegate(self->state.hub, a, sub, task_id);
    },
    [=](unsubscribe_atom a, const subscriber_actor& sub) {
      return self->delegate(self->state.hub, a, sub);
    },
    // -- task supervisors and groups --------------------------------------
    [=](event_atom, const event& ev) {
      if (ev.kind == event_kind::group)
        group_event_seen(self, ev);
      publish(self, ev);
    },
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
      auto rp = self->make_response_promise<permit_reply>();
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
    [=](adopt_atom, std::string& task_id, std::string& node, int attempt,
        attempt_owner_actor& owner)
      -> caf::result<container_worker_actor, std::string> {
      auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (from_other_supervisor(self, task_id) ||
          self->state.by_supervisor.count(sender) == 0)
        return make_error(protocol_error::unknown_task,
                          "task '" + task_id + "' is not yours");
      return adopt(self, std::move(task_id), std::move(node), attempt,
                   std::move(owner));
    },
    [=](adopt_end_atom, const std::string& task_id) {
      if (self->current_sender() == self->ctrl())
        adoption_timed_out(self, task_id);
    },
    // -- groups -------------------------------------------------------------
    [=](member_start_atom, const std::string&, task_spec& task,
        std::int64_t run) { return start_member(self, std::move(task), run); },
    [=](member_stop_atom, const std::string& task_id, double grace_s) {
      stop_member(self, task_id, grace_s);
    },
    [=](group_started_atom, const std::string&) {
      // Its `group` event says so.
    },
    [=](group_ended_atom, const group_report&) {
      // Its `group` event ("ended", sent before this) recorded the end.
    },
    // -- worker nodes -----------------------------------------------------
    [=](join_atom, node_offer& offer, node_agent_actor& agent) {
      return self->delegate(self->state.membership, join_atom::value,
                            std::move(offer), std::move(agent));
    },
    [=](node_lost_atom, std::string& name, caf::node_id& nid) {
      // A supervisor whose attempt was lost with the node's connection:
      // seen before (or instead of) the membership's down message. Nothing
      // more is placed there from now on (the supervisor's next permit
      // request comes right after this); the membership drops the node and
      // tells it, should its connection still hold.
      auto& st = self->state;
      auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
      if (st.by_supervisor.count(sender) == 0)
        return;
      auto i = st.nodes.find(name);
      if (i == st.nodes.end() || i->second.agent.node() != nid)
        return;
      node_left(self, name, lost_with_connection);
      self->send(st.membership, node_lost_atom::value, std::move(name),
                 std::move(nid));
    },
    [=](node_joined_atom, node_offer& offer, node_agent_actor& agent) {
      if (from_membership(self))
        node_joined(self, offer, agent);
    },
    [=](node_left_atom, const std::string& name, const std::string& why) {
      if (from_membership(self))
        node_left(self, name, why);
    },
    [=](save_expired_atom) {
      self->state.expired_unsaved = false;
      save_state(self, "expired", encode_expired(self->state));
    },
    [=](worker_wait_atom) {
      auto& slots = self->state.slots;
      if (!slots.awaiting_nodes() || self->state.opts.workers_only)
        return;
      std::fprintf(stderr, "tasksup: no worker node joined again in time; "
                           "running attempts here\n");
      deliver(self, slots.stop_awaiting_nodes());
    },
    [=](schedule_atom a,
        schedule_request& req) -> caf::result<std::vector<schedule_info>> {
      if (!self->state.scheduler)
        return make_error(protocol_error::invalid_task,
                          "this registry runs no schedules (only `tasksup "
                          "serve` does)");
      return self->delegate(self->state.scheduler, a, std::move(req));
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

} // namespace tasksup::detail

namespace tasksup {

registry_actor spawn_registry(caf::actor_system& sys, registry_options opts) {
  return sys.spawn(detail::registry_behavior, std::move(opts));
}

} // namespace tasksup

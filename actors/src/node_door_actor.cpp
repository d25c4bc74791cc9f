#include "tasksup/actors/node_door_actor.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/events.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/schedule_actor.hpp"
#include "tasksup/supervisor/wire_limits.hpp"

#include "actor_now.hpp"

#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_clock.hpp>
#include <caf/atom.hpp>
#include <caf/delegated.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace tasksup {

namespace {

/// The door's own timer: check for stalled subscribers.
using door_check_atom = caf::atom_constant<caf::atom("doorcheck")>;

/// The door's own timer: end the awaits that have waited their time.
using await_check_atom = caf::atom_constant<caf::atom("awaitcheck")>;

/// The door to itself: answer the next share of a task's awaits.
using answer_more_atom = caf::atom_constant<caf::atom("answermore")>;

/// Answers to awaits (results, or await timeouts) go out at most
/// `answers_per_turn` at a time, `answer_turn_gap` apart: 50,000 a second.
/// CAF sends every remote message through one broker, first in first out,
/// so a task awaited 100,000 times would otherwise put all its answers
/// ahead of every other client's replies (a second of silence, measured in
/// node_pending_test). Spread out, the broker keeps up with them and other
/// replies pass in between; a task awaited up to 1,000 times is answered
/// at once.
constexpr std::size_t answers_per_turn = 1000;
constexpr auto answer_turn_gap = std::chrono::milliseconds{20};

/// Who a request counts against: the peer node of a remote sender (one
/// connection), the sending actor of an in-process one (actor id 0 for a
/// remote sender; an anonymous one counts as the null node's).
using client_key = std::pair<caf::node_id, caf::actor_id>;

/// An `await` the door answers once the registry has the task's result.
struct waiter {
  caf::typed_response_promise<task_result> rp;
  client_key client;
  std::string task_id;
  caf::actor_clock::time_point deadline;
};

/// The awaits of one task, by waiter number; some may have ended already
/// (timed out), and are skipped and now and then compacted away.
struct task_waits {
  std::vector<std::uint64_t> ids;
  std::size_t live = 0;
};

/// A task's result (or the registry's error), and the awaits of it that
/// have yet to be given it, `answers_per_turn` at a time.
struct result_answers {
  std::variant<task_result, caf::error> answer;
  std::vector<std::uint64_t> ids;
  std::size_t next = 0;
};

/// An event subscriber and what it has not acknowledged yet.
struct subscriber {
  subscriber_actor who;
  /// The client it counts against.
  client_key client;
  /// Events sent since it subscribed, and how many it acknowledged.
  std::uint64_t sent = 0;
  std::uint64_t acked = 0;
  /// Cost (`event_cost`) of each unacknowledged event, oldest first.
  std::deque<std::size_t> unacked;
  std::size_t unacked_bytes = 0;
  /// When it last made progress: subscribed, acknowledged more, or had
  /// events wait for it after having none.
  caf::actor_clock::time_point progress;
};

std::size_t event_cost(const event& ev) {
  return ev.json().size() + ev.task_id.size() + door_event_overhead_bytes;
}

struct door_state {
  registry_actor registry;
  /// The statistics actor for `(agents, window_s)`, if the node has one.
  stats_actor stats;
  /// Remote (or local) event subscribers, each monitored.
  std::vector<subscriber> subscribers;
  /// The unacknowledged bytes of all subscribers.
  std::size_t unacked_bytes = 0;
  /// Whether a `door_check` is on its way.
  bool check_pending = false;
  /// Limits and logs.
  door_options opts;
  /// Pending awaits by number: numbers grow with arrival and every await
  /// waits the same time, so the first one is the first to time out.
  /// Keeping them here (one registry request per task) rather than as one
  /// CAF request each keeps a flood of awaits cheap: CAF 0.17 looks up a
  /// response handler by a linear search over all pending ones.
  std::map<std::uint64_t, waiter> waiters;
  std::unordered_map<std::string, task_waits> waits_by_task;
  std::uint64_t next_waiter = 0;
  /// Pending awaits and subscriptions (and subscriptions being made) per
  /// client, and of all clients.
  std::map<client_key, std::size_t> pending_by_client;
  std::size_t pending = 0;
  /// Whether an `await_check` is on its way.
  bool await_check_pending = false;
  /// Results being given to their awaits, oldest first; the first has an
  /// `answer_more` on its way.
  std::deque<result_answers> answering;
  static inline const char* name = "tasksup.node_door";
};

/// The door's interface and its own timers.
using door_impl = node_door_actor::extend<caf::reacts_to<door_check_atom>,
                                          caf::reacts_to<await_check_atom>,
                                          caf::reacts_to<answer_more_atom>>;

using door_ptr = door_impl::stateful_pointer<door_state>;

std::vector<subscriber>::iterator find_subscriber(door_ptr self,
                                                  const caf::actor_addr& who) {
  auto& subs = self->state.subscribers;
  return std::find_if(subs.begin(), subs.end(), [&](const subscriber& x) {
    return x.who.address() == who;
  });
}

/// The client the current request counts against.
client_key current_client(door_ptr self) {
  auto sender = self->current_sender();
  if (!sender)
    return {caf::node_id{}, 0};
  if (sender->node() != self->node())
    return {sender->node(), 0};
  return {sender->node(), sender->id()};
}

/// Counts one more pending request of `who`, or says which limit that
/// would pass (`what` names the request in the error).
caf::error charge(door_ptr self, const client_key& who, const char* what) {
  auto& st = self->state;
  auto& mine = st.pending_by_client[who];
  if (mine >= st.opts.max_pending_per_client) {
    if (mine == 0)
      st.pending_by_client.erase(who);
    return make_error(
      protocol_error::limit_reached,
      std::string{what} + ": this client has " + std::to_string(mine) +
        " awaits and event subscriptions pending, the most the node allows "
        "one client (max_pending_per_client = " +
        std::to_string(st.opts.max_pending_per_client) +
        "); try again once some were answered");
  }
  if (st.pending >= st.opts.max_pending) {
    if (mine == 0)
      st.pending_by_client.erase(who);
    return make_error(
      protocol_error::limit_reached,
      std::string{what} + ": the node has " + std::to_string(st.pending) +
        " awaits and event subscriptions pending, the most it allows "
        "(max_pending = " +
        std::to_string(st.opts.max_pending) +
        "); try again once some were answered");
  }
  ++mine;
  ++st.pending;
  return caf::none;
}

/// Counts one pending request of `who` less.
void discharge(door_ptr self, const client_key& who) {
  auto& st = self->state;
  auto i = st.pending_by_client.find(who);
  if (i == st.pending_by_client.end())
    return;
  --st.pending;
  if (--i->second == 0)
    st.pending_by_client.erase(i);
}

/// Adds `sub` (once), counted against `client`, and monitors it.
void add_subscriber(door_ptr self, const subscriber_actor& sub,
                    const client_key& client) {
  if (find_subscriber(self, sub.address()) != self->state.subscribers.end()) {
    discharge(self, client);
    return;
  }
  subscriber s;
  s.who = sub;
  s.client = client;
  s.progress = self->clock().now();
  self->state.subscribers.push_back(std::move(s));
  self->monitor(sub);
}

/// Forgets `*i` (its backlog no longer counts); returns the next one.
std::vector<subscriber>::iterator forget(door_ptr self,
                                         std::vector<subscriber>::iterator i) {
  self->state.unacked_bytes -= i->unacked_bytes;
  self->demonitor(i->who.address());
  discharge(self, i->client);
  return self->state.subscribers.erase(i);
}

/// Tells `*i` it gets no more events, and why, and forgets it.
std::vector<subscriber>::iterator drop(door_ptr self,
                                       std::vector<subscriber>::iterator i,
                                       const std::string& why) {
  auto text = "dropped: did not keep up (" + why + "; " +
              std::to_string(i->unacked.size()) +
              " events sent and not acknowledged)";
  if (self->state.opts.log)
    self->state.opts.log("event subscriber " +
                         caf::to_string(i->who.address()) + " " + text);
  self->send(i->who, dropped_atom::value,
             text + "; the node sends this subscriber no more events");
  return forget(self, i);
}

/// Makes sure a check comes no later than the first stall deadline.
void schedule_check(door_ptr self) {
  auto& st = self->state;
  if (st.check_pending)
    return;
  std::optional<caf::actor_clock::time_point> first;
  for (auto& s : st.subscribers)
    if (!s.unacked.empty() && (!first || s.progress < *first))
      first = s.progress;
  if (!first)
    return;
  auto due = *first + door_stall_timeout;
  auto now = self->clock().now();
  auto delay = due > now ? std::chrono::duration_cast<caf::timespan>(due - now)
                         : caf::timespan{0};
  st.check_pending = true;
  self->delayed_send(self, delay, door_check_atom::value);
}

/// Drops every subscriber that has acknowledged nothing for
/// `door_stall_timeout` while events wait for it.
void check_stalled(door_ptr self) {
  auto now = self->clock().now();
  auto& subs = self->state.subscribers;
  for (auto i = subs.begin(); i != subs.end();) {
    if (!i->unacked.empty() && now - i->progress >= door_stall_timeout)
      i = drop(self, i,
               "no acknowledgement for " +
                 std::to_string(door_stall_timeout.count()) +
                 " s while events waited");
    else
      ++i;
  }
}

/// Sends `ev` to every subscriber; one whose backlog would pass a cap is
/// dropped instead.
void fan_out(door_ptr self, const event& ev) {
  auto& st = self->state;
  auto cost = event_cost(ev);
  auto now = self->clock().now();
  for (auto i = st.subscribers.begin(); i != st.subscribers.end();) {
    auto& s = *i;
    if (s.unacked.size() + 1 > door_max_unacked_events) {
      i = drop(self, i,
               "more than " + std::to_string(door_max_unacked_events) +
                 " events waiting");
      continue;
    }
    if (s.unacked_bytes + cost > door_max_unacked_bytes) {
      i = drop(self, i,
               "more than " + std::to_string(door_max_unacked_bytes >> 20) +
                 " MiB of events waiting");
      continue;
    }
    if (s.unacked.empty())
      s.progress = now;
    self->send(s.who, event_atom::value, ev);
    ++s.sent;
    s.unacked.push_back(cost);
    s.unacked_bytes += cost;
    st.unacked_bytes += cost;
    ++i;
  }
  // All together within their budget: the furthest behind go first.
  while (st.unacked_bytes > door_max_unacked_total_bytes) {
    auto worst = std::max_element(st.subscribers.begin(), st.subscribers.end(),
                                  [](const subscriber& a, const subscriber& b) {
                                    return a.unacked_bytes < b.unacked_bytes;
                                  });
    if (worst == st.subscribers.end())
      break;
    drop(self, worst,
         "the subscribers together had more than " +
           std::to_string(door_max_unacked_total_bytes >> 20) +
           " MiB of events waiting, this one the most");
  }
  schedule_check(self);
}

/// Makes sure an `await_check` comes no later than the first await's
/// deadline.
void schedule_await_check(door_ptr self) {
  auto& st = self->state;
  if (st.await_check_pending || st.waiters.empty())
    return;
  auto due = st.waiters.begin()->second.deadline;
  auto now = self->clock().now();
  auto delay = due > now ? std::chrono::duration_cast<caf::timespan>(due - now)
                         : caf::timespan{0};
  st.await_check_pending = true;
  self->delayed_send(self, delay, await_check_atom::value);
}

/// Drops the numbers of ended awaits from `w` once they outnumber the live
/// ones, so a task awaited again and again does not collect them.
void compact(door_ptr self, task_waits& w) {
  if (w.ids.size() < 64 || w.ids.size() < 2 * w.live)
    return;
  auto& waiters = self->state.waiters;
  w.ids.erase(
    std::remove_if(w.ids.begin(), w.ids.end(),
                   [&](std::uint64_t id) { return waiters.count(id) == 0; }),
    w.ids.end());
}

/// Ends the awaits whose deadline has passed with `await_timeout`, at most
/// `answers_per_turn` of them; asks for another turn `answer_turn_gap`
/// later when more are due.
void time_out_awaits(door_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  // Worded once: a burst of timeouts (thousands of awaits made together)
  // shares it.
  std::ostringstream secs;
  secs << std::chrono::duration_cast<std::chrono::duration<double>>(
            st.opts.await_timeout)
            .count();
  auto after = "' has not finished after " + secs.str() +
               " s (the node's await timeout); await it again to keep waiting";
  std::size_t ended = 0;
  while (!st.waiters.empty() && st.waiters.begin()->second.deadline <= now) {
    if (ended++ == answers_per_turn) {
      st.await_check_pending = true;
      self->delayed_send(self, answer_turn_gap, await_check_atom::value);
      return;
    }
    auto& w = st.waiters.begin()->second;
    w.rp.deliver(make_error(protocol_error::await_timeout,
                            "await: task '" + w.task_id + after));
    discharge(self, w.client);
    if (auto t = st.waits_by_task.find(w.task_id);
        t != st.waits_by_task.end()) {
      --t->second.live;
      compact(self, t->second);
    }
    st.waiters.erase(st.waiters.begin());
  }
}

/// Gives the oldest result being answered to its next awaits, at most
/// `answers_per_turn` of them (an await that timed out meanwhile is gone
/// from `waiters` and skipped), and asks for another turn
/// `answer_turn_gap` later while any are left.
void answer_some(door_ptr self) {
  auto& st = self->state;
  std::size_t given = 0;
  while (!st.answering.empty() && given < answers_per_turn) {
    auto& a = st.answering.front();
    for (; a.next < a.ids.size() && given < answers_per_turn; ++a.next) {
      auto i = st.waiters.find(a.ids[a.next]);
      if (i == st.waiters.end())
        continue;
      std::visit([&](auto& x) { i->second.rp.deliver(x); }, a.answer);
      discharge(self, i->second.client);
      st.waiters.erase(i);
      ++given;
    }
    if (a.next == a.ids.size())
      st.answering.pop_front();
  }
  if (!st.answering.empty())
    self->delayed_send(self, answer_turn_gap, answer_more_atom::value);
}

/// Answers every await of `task_id` with `answer` (a result or an error),
/// a share at a time (`answers_per_turn`).
void answer_awaits(door_ptr self, const std::string& task_id,
                   std::variant<task_result, caf::error> answer) {
  auto& st = self->state;
  auto t = st.waits_by_task.find(task_id);
  if (t == st.waits_by_task.end())
    return;
  auto idle = st.answering.empty();
  st.answering.push_back({std::move(answer), std::move(t->second.ids)});
  st.waits_by_task.erase(t);
  if (idle)
    answer_some(self);
}

/// Waits for `task_id`'s result on behalf of the current request: one
/// registry request per task, however many clients await it.
caf::result<task_result> await_task(door_ptr self, std::string task_id) {
  auto& st = self->state;
  auto client = current_client(self);
  if (auto err = charge(self, client, "await"))
    return err;
  auto id = st.next_waiter++;
  waiter w;
  w.rp = self->make_response_promise<task_result>();
  w.client = client;
  w.task_id = task_id;
  w.deadline = self->clock().now() + st.opts.await_timeout;
  st.waiters.emplace(id, std::move(w));
  auto [t, first] = st.waits_by_task.try_emplace(task_id);
  t->second.ids.push_back(id);
  ++t->second.live;
  if (first)
    self->request(st.registry, caf::infinite, await_atom::value, task_id)
      .then(
        [=](task_result& r) { answer_awaits(self, task_id, std::move(r)); },
        [=](caf::error& err) { answer_awaits(self, task_id, std::move(err)); });
  schedule_await_check(self);
  return caf::delegated<task_result>{};
}

/// The client of the current request as an audit line names it: the
/// subject of a remote client's certificate (and its node), or the local
/// actor.
std::string audit_name(door_ptr self) {
  auto sender = self->current_sender();
  if (!sender)
    return "an anonymous sender";
  if (sender->node() == self->node())
    return "local actor " + std::to_string(sender->id());
  std::string subject;
  if (self->state.opts.peer)
    if (auto peer = self->state.opts.peer(sender->node()))
      subject = peer->subject;
  return "client '" + (subject.empty() ? std::string{"(unknown)"} : subject) +
         "' (node " + caf::to_string(sender->node()) + ")";
}

/// Why the current sender may not join as a worker node (a client
/// certificate, or none known), or nullopt when it may.
std::optional<caf::error> refuse_join(door_ptr self) {
  auto& opts = self->state.opts;
  auto sender = self->current_sender();
  if (!opts.joins_need_node_certificate || !sender ||
      sender->node() == self->node())
    return std::nullopt;
  auto peer = opts.peer ? opts.peer(sender->node()) : std::nullopt;
  if (peer && peer->node_certificate)
    return std::nullopt;
  auto who = audit_name(self);
  if (opts.log)
    opts.log("refused a worker node's join: " + who +
             " did not show a node certificate");
  return make_error(
    protocol_error::invalid_task,
    "join: this connection showed " +
      std::string{peer ? "a client certificate" : "no certificate known here"} +
      "; a worker node joins with a node certificate (node.crt and node.key "
      "in its --certs directory, made by `tasksup certs init` with the "
      "coordinator's CA)");
}

/// `x` with each control character shown as '?': a task id is the
/// client's text, and must not start a forged line in the node's log.
std::string printable(std::string x) {
  for (auto& c : x)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  return x;
}

/// Logs a control request of `who` and publishes it as a warning event of
/// the task.
void audit(door_ptr self, const std::string& who, const std::string& action,
           const std::string& task_id) {
  auto& st = self->state;
  auto line = printable("audit: " + who + " asked to " + action + " task '" +
                        task_id + "'");
  if (st.opts.audit)
    st.opts.audit(line);
  event_head h;
  h.task_id = task_id;
  h.ts = detail::now_s(self);
  self->send(st.registry, event_atom::value, warning_event(h, line));
}

/// Sends `xs...` to the registry as the door's own request and answers the
/// current request with the registry's answer. Unlike `delegate`, the
/// answer comes from the door: the registry's address never reaches the
/// client, so its internal handlers stay out of reach.
template<class R, class... Ts>
caf::result<R> forward(door_ptr self, Ts&&... xs) {
  auto rp = self->make_response_promise();
  self->request(self->state.registry, caf::infinite, std::forward<Ts>(xs)...)
    .then([rp](R& x) mutable { rp.deliver(std::move(x)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

/// A control request of `who`: audited, then forwarded.
caf::result<bool> control(door_ptr self, const std::string& who,
                          control_request req) {
  // Loading rejects other values; checked again because an in-process
  // sender skips the deserializer.
  if (!detail::valid_enum_value(req.action))
    return caf::make_error(caf::sec::invalid_argument,
                           "as_client: unknown control action");
  audit(self, who, std::string{to_string(req.action)}, req.task_id);
  auto& id = req.task_id;
  switch (req.action) {
    case task_control::stop:
    case task_control::kill:
      return forward<bool>(
        self, stop_atom::value, std::move(id),
        req.action == task_control::kill ? stop_mode::kill : stop_mode::cancel);
    case task_control::retry_now:
      return forward<bool>(self, retry_now_atom::value, std::move(id));
    case task_control::fallback_now:
      return forward<bool>(self, force_fallback_atom::value, std::move(id));
    case task_control::forget:
      return forward<bool>(self, forget_atom::value, std::move(id));
    case task_control::pause:
      return forward<bool>(self, pause_atom::value, std::move(id));
    case task_control::resume:
      return forward<bool>(self, resume_atom::value, std::move(id));
  }
  return caf::make_error(caf::sec::invalid_argument,
                         "as_client: unknown control action");
}

door_impl::behavior_type door(door_ptr self, registry_actor registry,
                              stats_actor stats, door_options opts) {
  self->state.registry = registry;
  self->state.stats = stats;
  self->state.opts = std::move(opts);
  // Anything outside the client protocol: a request gets
  // unexpected_message, an asynchronous message is dropped, and nothing is
  // printed (a peer must not be able to flood the node's log).
  self->set_default_handler(caf::drop);
  self->monitor(registry);
  // System messages a peer can send too: an error message or an exit
  // message from anyone but this node's own actors ends nothing (by default
  // CAF 0.17 ends an actor on either), and only the registry's own down
  // message ends the door.
  auto local_sender = [=] {
    auto sender = self->current_sender();
    return sender && sender->node() == self->node();
  };
  self->set_error_handler([](caf::error&) {});
  self->set_exit_handler([=](caf::exit_msg& em) {
    if (local_sender() && em.reason)
      self->quit(std::move(em.reason));
  });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == st.registry.address()) {
      if (self->current_sender() ==
          caf::actor_cast<caf::strong_actor_ptr>(st.registry))
        self->quit(dm.reason);
      return;
    }
    auto i = find_subscriber(self, dm.source);
    if (i != st.subscribers.end())
      forget(self, i);
  });
  self
    ->request(registry, caf::infinite, subscribe_atom::value,
              caf::actor_cast<subscriber_actor>(self))
    .then([](bool) {},
          [=](caf::error& err) {
            // Without events the door cannot serve `events --follow`.
            self->quit(std::move(err));
          });
  return {
    [=](submit_atom, task_spec& task) {
      return forward<std::string>(self, submit_atom::value, std::move(task));
    },
    [=](submit_json_atom, std::string& text) -> caf::result<std::string> {
      if (text.size() > wire::max_task_json_bytes)
        return make_error(
          protocol_error::invalid_task,
          "the task is " + std::to_string(text.size()) + " bytes; at most " +
            std::to_string(wire::max_task_json_bytes) + " are accepted");
      return forward<std::string>(self, submit_json_atom::value,
                                  std::move(text));
    },
    [=](stop_atom, std::string& task_id, stop_mode mode) -> caf::result<bool> {
      // Loading rejects other values; checked again because an in-process
      // sender skips the deserializer.
      if (!detail::valid_enum_value(mode))
        return caf::make_error(caf::sec::invalid_argument,
                               "stop: unknown stop mode");
      return control(
        self, audit_name(self),
        {mode == stop_mode::kill ? task_control::kill : task_control::stop,
         std::move(task_id)});
    },
    [=](retry_now_atom, std::string& task_id) {
      return control(self, audit_name(self),
                     {task_control::retry_now, std::move(task_id)});
    },
    [=](force_fallback_atom, std::string& task_id) {
      return control(self, audit_name(self),
                     {task_control::fallback_now, std::move(task_id)});
    },
    [=](forget_atom, std::string& task_id) {
      return control(self, audit_name(self),
                     {task_control::forget, std::move(task_id)});
    },
    [=](pause_atom, std::string& task_id) {
      return control(self, audit_name(self),
                     {task_control::pause, std::move(task_id)});
    },
    [=](resume_atom, std::string& task_id) {
      return control(self, audit_name(self),
                     {task_control::resume, std::move(task_id)});
    },
    [=](as_client_atom, const std::string& who,
        control_request& req) -> caf::result<bool> {
      // Only the node's own front ends (the local control socket) name
      // their clients; a peer cannot.
      auto sender = self->current_sender();
      if (!sender || sender->node() != self->node())
        return caf::make_error(caf::sec::unexpected_message,
                               "as_client: only for the node's own actors");
      return control(self, who, std::move(req));
    },
    [=](status_atom) {
      return forward<std::vector<task_status>>(self, status_atom::value);
    },
    [=](view_atom) -> caf::result<std::string> {
      if (!self->state.stats)
        return caf::make_error(caf::sec::unexpected_message,
                               "view: this node keeps no statistics");
      auto rp = self->make_response_promise<std::string>();
      self->request(self->state.stats, caf::infinite, view_atom::value)
        .then([rp](std::string& x) mutable { rp.deliver(std::move(x)); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](agents_atom, double window_s) -> caf::result<std::string> {
      if (!self->state.stats)
        return caf::make_error(caf::sec::unexpected_message,
                               "agents: this node keeps no statistics");
      auto rp = self->make_response_promise<std::string>();
      self
        ->request(self->state.stats, caf::infinite, agents_atom::value,
                  window_s)
        .then([rp](std::string& x) mutable { rp.deliver(std::move(x)); },
              [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](status_atom, std::string& task_id) {
      return forward<task_status>(self, status_atom::value, std::move(task_id));
    },
    [=](status_atom, status_query& q) -> caf::result<status_page> {
      // Checked again: an in-process sender skips the deserializer.
      if (q.states >= (1u << all_task_states.size()) ||
          q.outcomes >= (1u << all_task_outcomes.size()))
        return caf::make_error(caf::sec::invalid_argument,
                               "status: an unknown state or outcome");
      auto rp = self->make_response_promise<status_page>();
      self->request(self->state.registry, caf::infinite, status_atom::value, q)
        .then(
          [=](status_page& page) mutable {
            if (!self->state.stats) {
              page.now = wall_clock_s();
              rp.deliver(std::move(page));
              return;
            }
            // The page's times, from the statistics.
            std::vector<std::string> ids;
            ids.reserve(page.tasks.size());
            for (auto& t : page.tasks)
              ids.push_back(t.task_id);
            auto shared = std::make_shared<status_page>(std::move(page));
            self
              ->request(self->state.stats, caf::infinite, clock_atom::value,
                        std::move(ids))
              .then(
                [=](task_clocks& clocks) mutable {
                  shared->now = clocks.now;
                  shared->times.reserve(shared->tasks.size());
                  for (auto& t : shared->tasks) {
                    auto* x = clocks.find(t.task_id);
                    shared->times.push_back(x ? *x : task_times{});
                  }
                  rp.deliver(std::move(*shared));
                },
                [=](caf::error&) mutable {
                  // No statistics: no times.
                  shared->now = wall_clock_s();
                  rp.deliver(std::move(*shared));
                });
          },
          [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [=](submit_json_atom, std::string& text,
        bool replace) -> caf::result<std::string> {
      if (text.size() > wire::max_task_json_bytes)
        return make_error(
          protocol_error::invalid_task,
          "the task is " + std::to_string(text.size()) + " bytes; at most " +
            std::to_string(wire::max_task_json_bytes) + " are accepted");
      return forward<std::string>(self, submit_json_atom::value,
                                  std::move(text), replace);
    },
    [=](logs_atom, std::string& task_id, int attempt, std::uint64_t offset)
      -> caf::result<int, std::uint64_t, std::string, bool> {
      auto rp =
        self->make_response_promise<int, std::uint64_t, std::string, bool>();
      self
        ->request(self->state.registry, caf::infinite, logs_atom::value,
                  std::move(task_id), attempt, offset)
        .then(
          [rp](int a, std::uint64_t next, std::string& data,
               bool complete) mutable {
            rp.deliver(a, next, std::move(data), complete);
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    // A worker node joining this coordinator (its agent then gets the
    // attempts placed on it).
    [=](join_atom, node_offer& offer,
        node_agent_actor& agent) -> caf::result<std::string> {
      if (auto refused = refuse_join(self))
        return std::move(*refused);
      return forward<std::string>(self, join_atom::value, std::move(offer),
                                  std::move(agent));
    },
    [=](nodes_atom) {
      return forward<std::vector<node_info>>(self, nodes_atom::value);
    },
    [=](schedule_atom, schedule_request& req) {
      // A change goes to the audit log (a schedule has no events of its
      // own to carry it).
      if (req.op != schedule_op::list && self->state.opts.audit)
        self->state.opts.audit(printable(
          "audit: " + audit_name(self) + " asked to " +
          std::string{to_string(req.op)} + " schedule '" + req.name + "'"));
      return forward<std::vector<schedule_info>>(self, schedule_atom::value,
                                                 std::move(req));
    },
    [=](await_atom, std::string& task_id) {
      return await_task(self, std::move(task_id));
    },
    [=](await_check_atom) {
      if (self->current_sender().get() != self->ctrl())
        return;
      self->state.await_check_pending = false;
      time_out_awaits(self);
      schedule_await_check(self);
    },
    [=](answer_more_atom) {
      if (self->current_sender().get() == self->ctrl())
        answer_some(self);
    },
    [=](subscribe_atom, const subscriber_actor& sub) -> caf::result<bool> {
      if (!sub)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: no subscriber given");
      auto& subs = self->state.subscribers;
      if (find_subscriber(self, sub.address()) != subs.end())
        return true;
      if (subs.size() >= wire::max_subscribers)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: the node serves at most " +
                                 std::to_string(wire::max_subscribers) +
                                 " event subscribers");
      auto client = current_client(self);
      if (auto err = charge(self, client, "subscribe"))
        return err;
      add_subscriber(self, sub, client);
      return true;
    },
    [=](subscribe_atom, const subscriber_actor& sub,
        std::string& task_id) -> caf::result<std::vector<event>> {
      // The task's past events, then its new ones: the registry's answer
      // and its later events reach the door in order, so adding `sub` when
      // the answer arrives loses nothing and repeats nothing.
      if (!sub)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: no subscriber given");
      if (self->state.subscribers.size() >= wire::max_subscribers)
        return caf::make_error(caf::sec::invalid_argument,
                               "subscribe: the node serves at most " +
                                 std::to_string(wire::max_subscribers) +
                                 " event subscribers");
      // Counted from now: subscriptions being made are pending too.
      auto client = current_client(self);
      if (auto err = charge(self, client, "subscribe"))
        return err;
      auto rp = self->make_response_promise<std::vector<event>>();
      self
        ->request(self->state.registry, caf::infinite, subscribe_atom::value,
                  caf::actor_cast<subscriber_actor>(self), std::move(task_id))
        .then(
          [=](std::vector<event>& past) mutable {
            add_subscriber(self, sub, client);
            rp.deliver(std::move(past));
          },
          [=](caf::error& err) mutable {
            discharge(self, client);
            rp.deliver(std::move(err));
          });
      return rp;
    },
    [=](unsubscribe_atom, const subscriber_actor& sub) {
      auto i = find_subscriber(self, sub.address());
      if (i != self->state.subscribers.end())
        forget(self, i);
      return true;
    },
    [=](ack_atom, std::uint64_t received) -> caf::result<bool> {
      // The sender acknowledges for itself only: nobody can keep another
      // subscriber fed.
      auto served = [&] {
        auto sender = self->current_sender();
        if (!sender)
          return false;
        auto i =
          find_subscriber(self, caf::actor_cast<caf::actor_addr>(sender));
        if (i == self->state.subscribers.end())
          return false;
        auto& s = *i;
        received = std::min(received, s.sent);
        if (received <= s.acked)
          return true;
        for (; s.acked < received; ++s.acked) {
          s.unacked_bytes -= s.unacked.front();
          self->state.unacked_bytes -= s.unacked.front();
          s.unacked.pop_front();
        }
        s.progress = self->clock().now();
        return true;
      }();
      // Only a request is answered: CAF 0.17 would send the answer to a
      // plain `send` back as a message too, one per batch of events.
      if (!self->current_message_id().is_request())
        return caf::delegated<bool>{};
      return served;
    },
    [=](door_check_atom) {
      if (self->current_sender().get() != self->ctrl())
        return;
      self->state.check_pending = false;
      check_stalled(self);
      schedule_check(self);
    },
    [=](event_atom, const event& ev) {
      // Only the registry's events are passed on; one sent to the door by
      // anyone else (a forged event) is dropped.
      if (self->current_sender() !=
          caf::actor_cast<caf::strong_actor_ptr>(self->state.registry))
        return;
      fan_out(self, ev);
    },
  };
}

} // namespace

node_door_actor spawn_node_door(caf::actor_system& sys,
                                registry_actor registry) {
  return sys.spawn(door, std::move(registry), stats_actor{}, door_options{});
}

node_door_actor spawn_node_door(caf::actor_system& sys, registry_actor registry,
                                stats_actor stats) {
  return sys.spawn(door, std::move(registry), std::move(stats), door_options{});
}

node_door_actor spawn_node_door(caf::actor_system& sys, registry_actor registry,
                                stats_actor stats, door_log_fn log) {
  door_options opts;
  opts.log = std::move(log);
  return sys.spawn(door, std::move(registry), std::move(stats),
                   std::move(opts));
}

node_door_actor spawn_node_door(caf::actor_system& sys, registry_actor registry,
                                stats_actor stats, door_options opts) {
  return sys.spawn(door, std::move(registry), std::move(stats),
                   std::move(opts));
}

} // namespace tasksup

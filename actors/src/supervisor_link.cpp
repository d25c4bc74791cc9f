// A task supervisor's link to its attempt's worker: on this node (one kept
// for the task's quick retries) or on the worker node the registry placed
// the attempt on, what it does when that worker or its node is lost, and how
// an attempt's end becomes the task machine's input.

#include "supervisor_state.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/container_worker_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

namespace tasksup::detail {

namespace {

/// A remote attempt's runtime id, as the journal keeps it:
/// `node:<node>/<id on that node>`.
std::string remote_runtime_id(const std::string& node, const std::string& id) {
  return "node:" + node + "/" + id;
}

/// The node of a runtime id made by `remote_runtime_id`, else empty.
std::string remote_node_of(const std::string& runtime_id) {
  if (runtime_id.rfind("node:", 0) != 0)
    return {};
  auto slash = runtime_id.find('/', 5);
  return runtime_id.substr(5, slash == std::string::npos ? std::string::npos
                                                         : slash - 5);
}

/// How long a supervisor waits for the report of a remote worker that went
/// down: CAF may deliver the worker's down message before the messages it
/// sent just before it ended (they are deserialized apart, and arrive
/// through a new proxy of the worker).
constexpr std::chrono::seconds remote_report_grace{2};

/// An attempt lost with worker node `node`: why, for the classifier.
attempt_outcome lost_outcome(const std::string& node, std::string why) {
  attempt_outcome out;
  out.exit_code = -1;
  out.lost_node = node;
  out.infrastructure_error = "worker node " + node + " lost: " + why;
  return out;
}

/// Takes `w` as the worker of the current attempt (it runs on `node`).
void take_worker(supervisor_actor self, container_worker_actor w,
                 const std::string& node) {
  auto& s = self->state;
  s.worker = std::move(w);
  s.worker_node = node;
  s.remote_starting = 0;
  self->monitor(s.worker);
  if (auto stop = std::exchange(s.pending_stop, std::nullopt))
    self->send(s.worker, stop_atom::value, stop->first, stop->second);
}

/// A remote start (or adoption) of `attempt` failed: whether it is still
/// the one under way, which then no longer is (a stop waiting for it is
/// dropped with it).
bool start_failed(supervisor_actor self, int attempt) {
  auto& st = self->state;
  if (st.remote_starting != attempt)
    return false;
  st.remote_starting = 0;
  st.pending_stop.reset();
  return true;
}

/// Asks the worker node the registry placed the attempt on to start it.
void start_remote(supervisor_actor self, worker_options w) {
  auto& s = self->state;
  auto ra = to_remote(std::move(w), s.placed_runtime);
  ra.epoch = s.node->leader_epoch;
  auto attempt = ra.attempt.spec.attempt;
  auto node = s.placed_node;
  s.remote_starting = attempt;
  self
    ->request(s.placed_agent, remote_start_timeout, run_attempt_atom::value,
              std::move(ra), caf::actor_cast<attempt_owner_actor>(self))
    .then(
      [self, attempt, node](container_worker_actor& worker) {
        auto& st = self->state;
        if (st.remote_starting == attempt)
          take_worker(self, std::move(worker), node);
      },
      [self, attempt, node](caf::error& err) {
        if (!start_failed(self, attempt))
          return;
        auto& st = self->state;
        if (err == caf::sec::request_timeout) {
          // The node never answered: as good as lost.
          if (st.node->services)
            self->send(st.node->services, node_lost_atom::value, node,
                       st.placed_agent.node());
          attempt_ended(
            self, attempt,
            lost_outcome(node, "it did not start the attempt "
                               "within " +
                                 std::to_string(remote_start_timeout.count()) +
                                 " s"));
          return;
        }
        attempt_outcome out;
        out.exit_code = -1;
        out.infrastructure_error =
          "worker node " + node +
          " could not start the attempt: " + error_text(err);
        attempt_ended(self, attempt, std::move(out));
      });
}

/// The attempt ran on worker node `node` (empty: on one, not recorded
/// which) when this coordinator went down (the one it took over from, or
/// itself before a restart): that node kept it, and hands it over once it
/// joined (again) (`adopt`, through the registry). Until then the attempt
/// counts as starting: a stop waits for the worker.
void adopt_remote(supervisor_actor self, std::string node, int attempt) {
  auto& s = self->state;
  s.remote_starting = attempt;
  self
    ->request(s.node->services, caf::infinite, adopt_atom::value, s.task_id(),
              node, attempt, caf::actor_cast<attempt_owner_actor>(self))
    .then(
      [self, attempt](container_worker_actor& worker, std::string& node) {
        auto& st = self->state;
        if (st.remote_starting != attempt)
          return;
        // Its held messages come once it is this supervisor's.
        self->send(worker, resume_atom::value);
        take_worker(self, std::move(worker), node);
        emit(self,
             warning_event(st.head(), "attempt " + std::to_string(attempt) +
                                        " adopted from worker node " + node +
                                        ", where it kept running while the "
                                        "coordinator changed"));
      },
      [self, attempt, node](caf::error& err) {
        if (!start_failed(self, attempt))
          return;
        attempt_ended(self, attempt,
                      lost_outcome(node.empty() ? "(not recorded)" : node,
                                   "the coordinator changed while the "
                                   "attempt ran there, and it was not "
                                   "adopted: " +
                                     error_text(err)));
      });
}

/// The options of a worker for `spec` by agent `agent_index`: the agent's
/// settings, the runtime, the attempt's trace and span.
worker_options worker_for(const supervisor_state& s, std::size_t agent_index,
                          runtime::attempt_spec spec) {
  const auto& agent = s.agent(agent_index);
  worker_options w;
  apply_agent_options(w, agent);
  w.spec = std::move(spec);
  w.runtime = s.node->runtime;
  w.trace_id = s.opts->trace_id;
  w.span_id = std::string_view{s.span};
  w.agent_cli = agent.agent_cli;
  w.timer = s.node->worker_timer;
  return w;
}

} // namespace

bool from_worker(supervisor_actor self) {
  auto& s = self->state;
  auto sender = self->current_sender();
  if (!sender)
    return false;
  // By identity, not by handle: a remote worker's proxy is replaced when
  // its down message overtakes its last messages, which then come from a
  // new proxy of the same actor.
  if (s.worker)
    return sender->node() == s.worker.node() && sender->id() == s.worker.id();
  if (s.remote_starting == 0 || !s.placed_agent ||
      sender->node() != s.placed_agent.node())
    return false;
  take_worker(self, caf::actor_cast<container_worker_actor>(sender),
              s.placed_node);
  return true;
}

void spawn_worker(supervisor_actor self, runtime::attempt_spec spec,
                  std::size_t agent_index) {
  auto& s = self->state;
  auto w = worker_for(s, agent_index, std::move(spec));
  w.report_runtime_id = static_cast<bool>(s.journal);
  if (s.placed_agent) {
    start_remote(self, std::move(w));
    return;
  }
  s.worker_node.clear();
  w.events = s.parent;
  w.keep = true;
  if (s.kept_worker) {
    s.worker = std::exchange(s.kept_worker, nullptr);
    self->send(s.worker, next_attempt_atom::value,
               std::move(static_cast<attempt_options&>(w)));
    return;
  }
  s.worker = spawn_container_worker(
    self, caf::actor_cast<attempt_owner_actor>(self), std::move(w));
  self->monitor(s.worker);
}

std::optional<input::attempt_ended>
adopt_worker(supervisor_actor self, std::size_t agent_index, int attempt) {
  auto& s = self->state;
  auto node = remote_node_of(s.adopt_id);
  // A coordinator sharing a journal runs attempts on worker nodes only: one
  // whose start it had not recorded yet (no runtime id) may run on any.
  bool remote =
    !node.empty() || (s.adopt_id.empty() && s.node->leader_epoch > 0);
  if (remote && s.node->services) {
    adopt_remote(self, std::move(node), attempt);
    return std::nullopt;
  }
  if (remote)
    return ended_input(self, attempt,
                       lost_outcome(node, "the coordinator restarted while "
                                          "the attempt ran there"));
  auto w = worker_for(
    s, agent_index,
    make_attempt_spec(*s.opts, *s.node, s.agent(agent_index), attempt));
  w.adopt_id = s.adopt_id;
  w.events = s.parent;
  w.keep = true;
  s.adopted_dir = w.spec.attempt_dir;
  s.adopted_attempt = attempt;
  s.worker = spawn_container_worker(
    self, caf::actor_cast<attempt_owner_actor>(self), std::move(w));
  self->monitor(s.worker);
  return std::nullopt;
}

void stop_worker(supervisor_actor self, stop_mode mode,
                 std::chrono::milliseconds grace) {
  auto& s = self->state;
  if (s.worker)
    self->send(s.worker, stop_atom::value, mode, std::int64_t{grace.count()});
  else if (s.remote_starting != 0)
    s.pending_stop.emplace(mode, std::int64_t{grace.count()});
}

void release_kept_worker(supervisor_actor self) {
  auto& s = self->state;
  if (!s.kept_worker)
    return;
  self->demonitor(s.kept_worker.address());
  self->send(std::exchange(s.kept_worker, nullptr), release_atom::value);
}

namespace {

/// Checks the answer of an attempt that succeeded (or ended voluntarily)
/// against the task's schema, and tells the machine before the attempt's
/// end, which it judges. The errors are the next attempt's feedback.
void check_answer(supervisor_actor self, attempt_report& r) {
  auto& s = self->state;
  const auto& cfg = s.machine().config();
  const auto& o = r.outcome;
  auto done_code = cfg.done_exit_code;
  if (!cfg.steps.answer || !o.infrastructure_error.empty() ||
      !(o.exit_code == 0 || (done_code && o.exit_code == *done_code)))
    return;
  answer_verdict v;
  if (s.opts->answer)
    v = s.opts->answer->check(r.answer);
  else
    v.errors.push_back(s.opts->answer_error);
  input::answer_checked in;
  in.attempt = r.attempt;
  in.ok = v.ok;
  in.answer = std::move(v.answer);
  for (auto& e : v.errors) {
    if (!in.errors.empty())
      in.errors += '\n';
    in.errors += e;
  }
  emit(self, step_event(s.head(), "answer", "schema", v.ok, std::nullopt,
                        v.ok ? std::string{"passed"}
                             : "failed: " + v.errors.front()));
  if (s.run)
    s.run->step_tail = std::move(v.errors);
  drive(self, std::move(in));
}

} // namespace

void worker_reported(supervisor_actor self, attempt_report& r) {
  auto& st = self->state;
  if (!from_worker(self) || r.attempt != st.m.attempt)
    return;
  check_answer(self, r);
  if (st.worker_node.empty()) {
    st.kept_worker = st.worker; // it waits for the next attempt
    attempt_ended(self, r.attempt, std::move(r.outcome));
    return;
  }
  auto worker = st.worker;
  self->demonitor(worker.address());
  // Its node is stopping: nothing more goes there.
  if (!r.outcome.lost_node.empty() && st.node->services)
    self->send(st.node->services, node_lost_atom::value, st.worker_node,
               worker.node());
  // The worker node keeps the report until it is recorded: should this
  // coordinator go down first, the one that takes over adopts the attempt
  // with its report instead of running it again.
  drive(self, ended_input(self, r.attempt, std::move(r.outcome)),
        [self, worker](bool) { self->send(worker, release_atom::value); });
}

std::string journaled_runtime_id(const supervisor_state& s,
                                 std::string runtime_id) {
  if (s.worker_node.empty())
    return runtime_id;
  return remote_runtime_id(s.worker_node, runtime_id);
}

void worker_down(supervisor_actor self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (st.kept_worker && dm.source == st.kept_worker.address()) {
    st.kept_worker = nullptr; // gone between attempts: the next spawns one
    return;
  }
  if (!st.worker || dm.source != st.worker.address())
    return;
  if (!st.worker_node.empty() &&
      dm.reason == caf::exit_reason::remote_link_unreachable) {
    // Its node is gone (killed, frozen, cut off): the attempt is lost
    // with it, and no attempt goes there any more.
    auto node = st.worker_node;
    if (st.node->services)
      self->send(st.node->services, node_lost_atom::value, node,
                 st.worker.node());
    attempt_ended(self, st.m.attempt,
                  lost_outcome(node, "the connection to it failed (" +
                                       self->system().render(dm.reason) + ")"));
    return;
  }
  if (!st.worker_node.empty()) {
    // Its last messages may still be on their way: judged after a grace.
    self->delayed_send(self, remote_report_grace, worker_gone_atom::value,
                       st.m.attempt);
    return;
  }
  // The worker died without reporting its exit: the machinery failed.
  attempt_outcome out;
  out.exit_code = -1;
  out.infrastructure_error =
    "container worker died: " + self->system().render(dm.reason);
  attempt_ended(self, st.m.attempt, std::move(out));
}

void worker_gone(supervisor_actor self, int attempt) {
  auto& st = self->state;
  if (self->current_sender() != self->ctrl() || !st.worker ||
      st.worker_node.empty() || attempt != st.m.attempt)
    return;
  attempt_outcome out;
  out.exit_code = -1;
  out.infrastructure_error = "the container worker on node " + st.worker_node +
                             " ended without reporting its attempt";
  attempt_ended(self, attempt, std::move(out));
}

std::string attempt_dir_of(const supervisor_state& s, int attempt) {
  std::string dir = s.node->attempt_root;
  if (!dir.empty() && dir.back() != '/')
    dir += '/';
  return dir + s.task_id() + "/attempt-" + std::to_string(attempt);
}

/// Carries out `fx`, then feeds the inputs they produced at once.
void attempt_ended(supervisor_actor self, int attempt, attempt_outcome out) {
  drive(self, ended_input(self, attempt, std::move(out)));
}

input::attempt_ended ended_input(supervisor_actor self, int attempt,
                                 attempt_outcome out) {
  auto& st = self->state;
  st.worker = nullptr;
  st.worker_node.clear();
  input::attempt_ended in;
  in.attempt = attempt;
  if (out.started && out.exit_code == 0) {
    std::error_code ec;
    in.done_file = std::filesystem::exists(
      detail::done_file(attempt_dir_of(st, attempt)), ec);
  }
  // The runtime bounded the tail (runtime::outcome_tail_lines).
  if (st.run && !out.succeeded())
    st.run->attempt_tail = out.tail;
  if (!out.succeeded() && st.journal) {
    // The journal keeps the tail, so a restarted node can classify again.
    in.outcome = out;
    st.to_classify = std::move(out);
  } else if (!out.succeeded()) {
    // The machine gets the outcome without its tail (not a copy of it); the
    // classifier gets the whole outcome.
    auto tail = std::move(out.tail);
    out.tail.clear();
    in.outcome = out;
    out.tail = std::move(tail);
    st.to_classify = std::move(out);
  } else {
    in.outcome = std::move(out);
  }
  return in;
}

} // namespace tasksup::detail

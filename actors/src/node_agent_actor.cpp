#include "tasksup/actors/cluster.hpp"

#include "tasksup/actors/actor_timer.hpp"
#include "tasksup/actors/protocol.hpp"

#include "attempt_log.hpp"

#include <caf/actor_cast.hpp>
#include <caf/node_id.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

struct node_agent_state {
  node_agent_options opts;
  /// The coordinator's node: only it places attempts here.
  caf::node_id coordinator;
  /// The node process that joined it (told when the coordinator drops the
  /// node).
  node_process_actor process;
  /// The newest leadership epoch a placement came from: an older one is a
  /// deposed leader's, refused.
  std::int64_t epoch = 0;
  /// One attempt running here: its container worker, which attempt it
  /// is, and the coordinator connection (`joins`) that placed or adopted
  /// it: one from an earlier connection was kept for adoption.
  struct running {
    container_worker_actor worker;
    std::string task_id;
    int attempt = 0;
    std::uint64_t join = 0;
  };
  /// The attempts running here.
  std::map<caf::actor_addr, running> workers;
  /// How many times the node process joined a coordinator.
  std::uint64_t joins = 0;
  /// The timer every container worker here uses (its adoption grace).
  runtime::scripted_runtime::timer_fn timer;
  /// Answered once the last worker is gone, after `(stop)`.
  std::vector<caf::typed_response_promise<bool>> stopping;
  static inline const char* name = "tasksup.node_agent";
};

using agent_pointer = node_agent_actor::stateful_pointer<node_agent_state>;

bool plain_name(const std::string& x) {
  if (x.empty() || x.size() > wire::max_id_bytes || x[0] == '.')
    return false;
  return std::all_of(x.begin(), x.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

node_agent_actor::behavior_type node_agent(agent_pointer self,
                                           node_agent_options opts) {
  self->state.opts = std::move(opts);
  self->state.timer = make_actor_timer(self->system());
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    st.workers.erase(dm.source);
    if (st.workers.empty())
      for (auto& rp : std::exchange(st.stopping, {}))
        rp.deliver(true);
  });
  return {
    // The local node process, once it joined: whose placements to take.
    // Told before the join is asked for, so that the coordinator's first
    // messages (placements, adoptions) find it ready.
    [=](join_atom, const caf::node_id& coordinator) {
      auto sender = self->current_sender();
      if (sender && sender->node() == self->node()) {
        self->state.coordinator = coordinator;
        self->state.process = caf::actor_cast<node_process_actor>(sender);
        ++self->state.joins;
      }
    },
    [=](node_left_atom, std::string& why) {
      // Only the coordinator it joined can drop it. Its attempts here are
      // no longer that coordinator's: they end (a late one included), and
      // the node process joins again.
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || sender->node() != st.coordinator || !st.coordinator)
        return;
      st.coordinator = caf::node_id{};
      for (auto& [addr, r] : st.workers)
        self->send(r.worker, node_lost_atom::value, st.opts.name);
      if (st.process)
        self->send(st.process, node_left_atom::value,
                   why.substr(0, wire::max_id_bytes * 4));
    },
    [=](logs_atom, const std::string& task_id, int attempt,
        std::uint64_t offset,
        bool finished) -> caf::result<int, std::uint64_t, std::string, bool> {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || sender->node() != st.coordinator)
        return caf::make_error(caf::sec::unexpected_message,
                               "logs: for this node's coordinator only");
      if (!plain_name(task_id))
        return make_error(protocol_error::invalid_task,
                          "logs: the task id is not a plain name");
      auto here = detail::read_attempt_log(st.opts.attempt_root + "/" + task_id,
                                           attempt, offset, finished);
      if (!here)
        return make_error(protocol_error::unknown_task,
                          "worker node " + st.opts.name + " has no attempt " +
                            std::to_string(attempt) + " of task '" + task_id +
                            "'");
      return {here->attempt, here->next, std::move(here->data), here->complete};
    },
    [=](run_attempt_atom, remote_attempt& ra, attempt_owner_actor& supervisor)
      -> caf::result<container_worker_actor> {
      auto& st = self->state;
      auto fail = [&](std::string what) {
        return make_error(protocol_error::invalid_task,
                          "node " + st.opts.name + ": " + std::move(what));
      };
      auto sender = self->current_sender();
      if (!sender || sender->node() != st.coordinator || !supervisor)
        return fail("attempts are placed here by its coordinator only");
      if (ra.epoch < st.epoch)
        return make_error(
          protocol_error::not_leader,
          "node " + st.opts.name + ": a placement from leadership epoch " +
            std::to_string(ra.epoch) + ", older than epoch " +
            std::to_string(st.epoch) + " this node follows: refused");
      st.epoch = ra.epoch;
      auto rt = st.opts.runtimes.find(ra.runtime);
      if (rt == st.opts.runtimes.end() || !rt->second)
        return fail("no " + ra.runtime.substr(0, 32) + " runtime here");
      auto dir = remote_attempt_dir(
        st.opts.attempt_root, ra.attempt.spec.task_id, ra.attempt.spec.attempt);
      if (dir.empty())
        return fail("the task id is not a plain name");
      node_agent_state::running r;
      r.task_id = ra.attempt.spec.task_id;
      r.attempt = ra.attempt.spec.attempt;
      r.join = st.joins;
      auto w = from_remote(std::move(ra), rt->second);
      w.adopt_grace = st.opts.adopt_grace;
      w.timer = st.timer;
      w.spec.attempt_dir = std::move(dir);
      // The task's state directory on this node, beside its attempts.
      w.spec.state_dir =
        runtime::member_state_dir(st.opts.attempt_root, w.spec.task_id);
      auto worker =
        spawn_container_worker(self->system(), supervisor, std::move(w));
      self->monitor(worker);
      r.worker = worker;
      st.workers.emplace(worker.address(), std::move(r));
      return worker;
    },
    // The coordinator this node joined took over from the one that placed
    // the attempt (or is that one, restarted): the attempt kept for it is
    // its own now.
    [=](adopt_atom, const std::string& task_id, int attempt, std::int64_t epoch,
        attempt_owner_actor& owner) -> caf::result<container_worker_actor> {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || sender->node() != st.coordinator || !owner)
        return make_error(protocol_error::invalid_task,
                          "node " + st.opts.name +
                            ": attempts are adopted by its coordinator only");
      if (epoch < st.epoch)
        return make_error(
          protocol_error::not_leader,
          "node " + st.opts.name + ": an adoption from leadership epoch " +
            std::to_string(epoch) + ", older than epoch " +
            std::to_string(st.epoch) + " this node follows: refused");
      st.epoch = epoch;
      auto kept =
        std::find_if(st.workers.begin(), st.workers.end(), [&](auto& kv) {
          auto& r = kv.second;
          return r.join < st.joins && r.attempt == attempt &&
                 r.task_id == task_id;
        });
      if (kept == st.workers.end())
        return make_error(protocol_error::unknown_task,
                          "worker node " + st.opts.name + " kept no attempt " +
                            std::to_string(attempt) + " of task '" +
                            task_id.substr(0, wire::max_id_bytes) +
                            "' (it was killed when its grace ran out, or "
                            "never ran here)");
      kept->second.join = st.joins;
      self->send(kept->second.worker, adopt_atom::value, std::move(owner));
      return kept->second.worker;
    },
    // The coordinator adopted all it will: what was kept for an earlier
    // one and not adopted ends now rather than when its grace runs out.
    [=](adopt_end_atom) {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || sender->node() != st.coordinator)
        return;
      for (auto& [addr, r] : st.workers)
        if (r.join < st.joins)
          self->send(r.worker, node_lost_atom::value, st.opts.name);
    },
    // The local node is stopping: every attempt here ends, reported to its
    // supervisor as lost with this node (retried elsewhere at once).
    // Answered once all have ended.
    [=](stop_atom) -> caf::result<bool> {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (!sender || sender->node() != self->node())
        return false;
      if (st.workers.empty())
        return true;
      for (auto& [addr, r] : st.workers)
        self->send(r.worker, node_lost_atom::value, st.opts.name);
      auto rp = self->make_response_promise<bool>();
      st.stopping.push_back(rp);
      return rp;
    },
    [=](status_atom) { return static_cast<int>(self->state.workers.size()); },
  };
}

} // namespace

remote_attempt to_remote(worker_options w, std::string runtime) {
  return {std::move(static_cast<attempt_options&>(w)), std::move(runtime)};
}

worker_options from_remote(remote_attempt ra,
                           std::shared_ptr<runtime::container_runtime> rt) {
  worker_options w;
  static_cast<attempt_options&>(w) = std::move(ra.attempt);
  w.runtime = std::move(rt);
  w.adopt_id.reset();
  w.keep = false;
  // The coordinator journals where each remote attempt runs.
  w.report_runtime_id = true;
  return w;
}

std::string remote_attempt_dir(const std::string& root,
                               const std::string& task_id, int attempt) {
  if (!plain_name(task_id) || attempt < 1)
    return {};
  auto base = root + "/" + task_id + "/attempt-" + std::to_string(attempt);
  auto dir = base;
  std::error_code ec;
  for (int k = 1; std::filesystem::exists(dir, ec) && k < 100000; ++k)
    dir = base + "." + std::to_string(k);
  return dir;
}

node_agent_actor spawn_node_agent(caf::actor_system& sys,
                                  node_agent_options opts) {
  return sys.spawn(node_agent, std::move(opts));
}

} // namespace tasksup

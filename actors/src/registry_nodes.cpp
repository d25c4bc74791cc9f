#include "registry_state.hpp"

#include "tasksup/actors/cluster.hpp"

#include <caf/send.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace tasksup::detail {

namespace {

/// Journals the names of the joined worker nodes ("w1, w2"): a coordinator
/// restarted while it had some waits for them (see `restore`).
void save_workers(registry_ptr self) {
  std::string names;
  for (auto& kv : self->state.nodes)
    names += (names.empty() ? "" : ", ") + kv.first;
  save_state(self, "workers", std::move(names));
}

/// Asks worker node `name`'s `agent` for the attempt pending adoption
/// `task_id` waits for. The first node that hands it over answers the
/// adoption; a named node's refusal answers it too (an attempt looked for on
/// any node waits for the others).
void ask_node(registry_ptr self, const std::string& name,
              const node_agent_actor& agent, const std::string& task_id) {
  auto& p = self->state.adopting.at(task_id);
  self
    ->request(agent, remote_start_timeout, adopt_atom::value, task_id,
              p.attempt, self->state.opts.leader_epoch, p.owner)
    .then(
      [self, name, task_id](container_worker_actor& w) {
        auto& st = self->state;
        auto i = st.adopting.find(task_id);
        if (i == st.adopting.end()) {
          // Its owner gave up meanwhile and runs it again: this copy ends.
          self->send(w, stop_atom::value, stop_mode::kill, std::int64_t{0});
          return;
        }
        if (i->second.node.empty()) {
          st.slots.reclaim(task_id, name);
          st.placed_on[task_id] = name;
        }
        i->second.rp.deliver(std::move(w), name);
        st.adopting.erase(i);
      },
      [self, name, task_id](caf::error& err) {
        auto& st = self->state;
        auto i = st.adopting.find(task_id);
        if (i == st.adopting.end() || i->second.node.empty())
          return;
        i->second.rp.deliver(
          make_error(protocol_error::unknown_task,
                     "worker node " + name +
                       " did not hand the attempt over: " + error_text(err)));
        st.adopting.erase(i);
      });
}

/// Tells `agent` that this coordinator claimed every attempt it adopts.
void end_adoptions(registry_ptr self, const node_agent_actor& agent) {
  self->send(agent, adopt_end_atom::value);
}

} // namespace

caf::result<container_worker_actor, std::string>
adopt(registry_ptr self, std::string task_id, std::string node, int attempt,
      attempt_owner_actor owner) {
  auto& st = self->state;
  // Its slot is there (counted once the node joins); on a node not known
  // yet, it is counted where it is found.
  if (!node.empty()) {
    st.slots.reclaim(task_id, node);
    st.placed_on[task_id] = node;
  } else {
    deliver(self, st.slots.release(task_id));
  }
  auto rp = self->make_response_promise<container_worker_actor, std::string>();
  if (st.opts.worker_wait_s <= 0 && st.nodes.count(node) == 0) {
    rp.deliver(make_error(protocol_error::unknown_task,
                          node.empty()
                            ? "no worker node has joined"
                            : "worker node " + node + " has not joined"));
    return rp;
  }
  self->delayed_send(
    self,
    std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(
      std::max(st.opts.worker_wait_s,
               std::chrono::duration<double>(remote_start_timeout).count()))),
    adopt_end_atom::value, task_id);
  st.adopting.insert_or_assign(
    task_id, pending_adoption{node, attempt, std::move(owner), rp});
  for (auto& [name, n] : st.nodes)
    if (node.empty() || name == node)
      ask_node(self, name, n.agent, task_id);
  return rp;
}

void adoption_timed_out(registry_ptr self, const std::string& task_id) {
  auto& st = self->state;
  auto i = st.adopting.find(task_id);
  if (i == st.adopting.end())
    return;
  char wait[32];
  std::snprintf(wait, sizeof(wait), "%g", st.opts.worker_wait_s);
  auto& node = i->second.node;
  i->second.rp.deliver(make_error(
    protocol_error::unknown_task,
    (node.empty() ? std::string{"no worker node handed it over"}
                  : "worker node " + node + " did not hand it over") +
      " within " + wait + " s (--worker-wait)"));
  st.adopting.erase(i);
}

void adoptions_claimed(registry_ptr self) {
  for (auto& [name, node] : self->state.nodes)
    end_adoptions(self, node.agent);
}

/// Worker node `offer.name` joined: the queue is served with its capacity.
void node_joined(registry_ptr self, node_offer& offer,
                 node_agent_actor& agent) {
  auto& st = self->state;
  std::string runtimes;
  for (auto& r : offer.runtimes)
    runtimes += (runtimes.empty() ? "" : ",") + r;
  std::fprintf(stderr,
               "tasksup: worker node %s joined (at most %d attempts, "
               "runtimes %s%s%s)\n",
               offer.name.c_str(), offer.max_concurrent, runtimes.c_str(),
               offer.labels.empty() ? "" : ", labels ",
               to_string(offer.labels).c_str());
  auto name = offer.name;
  // The rebuilt tasks that wait for it (or for any node) ask it for their
  // attempts; once every rebuilt task asked, it stops what nobody adopts.
  for (auto& [task_id, p] : st.adopting)
    if (p.node.empty() || p.node == name)
      ask_node(self, name, agent, task_id);
  if (st.resuming.empty())
    end_adoptions(self, agent);
  st.nodes.insert_or_assign(name, worker_node{std::move(agent), now_s(self)});
  save_workers(self);
  deliver(self, st.slots.add_node(std::move(offer)));
}

/// Worker node `name` is gone: nothing is placed there any more; its
/// attempts are lost and their supervisors retry them elsewhere (each sees
/// its own worker go down).
void node_left(registry_ptr self, const std::string& name,
               const std::string& why) {
  auto& st = self->state;
  if (st.nodes.erase(name) == 0)
    return;
  std::fprintf(stderr,
               "tasksup: worker node %s lost (%s); %d running attempt(s) "
               "there are retried elsewhere\n",
               name.c_str(), why.c_str(), st.slots.running_on(name));
  save_workers(self);
  // Without worker nodes the coordinator runs the queue itself again.
  deliver(self, st.slots.remove_node(name));
}

} // namespace tasksup::detail

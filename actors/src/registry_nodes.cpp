#include "registry_state.hpp"

#include "tasksup/actors/cluster.hpp"

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

} // namespace

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

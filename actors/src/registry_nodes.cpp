#include "registry_state.hpp"

#include "tasksup/actors/cluster.hpp"

#include <cstdio>

namespace tasksup::detail {

/// Forgets worker node `name` (its connection is gone): nothing is placed
/// there any more; its attempts are lost and their supervisors retry them
/// elsewhere (each sees its own worker go down).
void node_lost(registry_ptr self, const std::string& name,
               const std::string& why) {
  auto& st = self->state;
  auto i = st.nodes.find(name);
  if (i == st.nodes.end())
    return;
  std::fprintf(stderr,
               "tasksup: worker node %s lost (%s); %d running attempt(s) "
               "there are retried elsewhere\n",
               name.c_str(), why.c_str(), st.slots.running_on(name));
  self->demonitor(i->second.agent.address());
  st.nodes.erase(i);
  // Without worker nodes the coordinator runs the queue itself again.
  deliver(self, st.slots.remove_node(name));
}

/// A worker node joins (through the door): its offer is checked, its
/// agent monitored, and the queue served with the new capacity.
caf::result<std::string> join(registry_ptr self, node_offer& offer,
                              node_agent_actor& agent) {
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

} // namespace tasksup::detail

#include "node_membership.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/supervisor/placement.hpp"

#include <caf/actor_cast.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <cstdio>
#include <map>
#include <set>
#include <utility>

namespace tasksup::detail {

namespace {

struct membership_state {
  membership_listener_actor listener;
  std::string coordinator;
  /// The coordinator's `--peer-timeout` (0: not stated).
  double peer_timeout_s = 0;
  /// The joined nodes' agents, by node name.
  std::map<std::string, node_agent_actor> nodes;
  /// Names whose joined node is asked whether it is still there, because
  /// another claims its name.
  std::set<std::string> probing;
  static inline const char* name = "tasksup.node_membership";
};

using membership_ptr =
  node_membership_actor::stateful_pointer<membership_state>;

/// How the membership learned that a node is lost.
enum class loss {
  /// Its agent is gone (its connection failed), or it is the node that
  /// joins again right now: nothing to tell it.
  silent,
  /// Its connection may hold: the node's agent is told it was dropped, so
  /// its attempts end and it joins again instead of idling unused.
  told,
};

/// Forgets node `i`: the registry places nothing there any more (and says
/// so in the log).
void lose(membership_ptr self,
          std::map<std::string, node_agent_actor>::iterator i,
          const std::string& why, loss how) {
  self->demonitor(i->second.address());
  if (how == loss::told)
    self->send(i->second, node_left_atom::value, why);
  self->send(self->state.listener, node_left_atom::value, i->first, why);
  self->state.nodes.erase(i);
}

/// Takes node `offer.name` in (its checks passed, its name is free); none
/// when it joined.
caf::error admit(membership_ptr self, node_offer offer,
                 node_agent_actor agent) {
  auto& st = self->state;
  if (st.nodes.size() >= max_nodes)
    return make_error(protocol_error::invalid_task,
                      "this coordinator takes at most " +
                        std::to_string(max_nodes) + " worker nodes");
  self->monitor(agent);
  st.nodes.emplace(offer.name, agent);
  // Before the answer: the node's slots are the registry's before the node
  // hears it joined.
  self->send(st.listener, node_joined_atom::value, std::move(offer),
             std::move(agent));
  return caf::none;
}

/// `x` seconds, for messages ("1.5 s").
std::string seconds_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", x);
  return buf;
}

caf::error duplicate(const std::string& name, const char* why) {
  return make_error(protocol_error::duplicate_task,
                    "a worker node named '" + name + "' " + why +
                      " (start the node with another --name)");
}

caf::result<std::string> join(membership_ptr self, node_offer& offer,
                              node_agent_actor& agent) {
  auto& st = self->state;
  if (auto ok = check_offer(offer); !ok)
    return make_error(protocol_error::invalid_task, ok.error().to_string());
  if (!agent)
    return make_error(protocol_error::invalid_task, "join: no node agent");
  if (offer.lease_s > 0 && st.peer_timeout_s > 0 &&
      offer.lease_s >= st.peer_timeout_s)
    return make_error(
      protocol_error::invalid_task,
      "this node's lease (" + seconds_text(offer.lease_s) +
        ") is not below the coordinator's --peer-timeout (" +
        seconds_text(st.peer_timeout_s) +
        "): the coordinator would retry its attempts elsewhere while they "
        "still run there; start it with a shorter --lease");
  if (st.probing.count(offer.name) != 0)
    return duplicate(offer.name, "is joining already");
  auto i = st.nodes.find(offer.name);
  if (i != st.nodes.end() && i->second.address() == agent.address()) {
    // The same node again (it reconnected before its loss was seen).
    lose(self, i, "it joined again", loss::silent);
    i = st.nodes.end();
  }
  if (i == st.nodes.end()) {
    if (auto err = admit(self, std::move(offer), std::move(agent)))
      return err;
    return st.coordinator;
  }
  // Another process claims a joined node's name: a worker restarted while
  // its old connection still looks open (its machine rebooted, the network
  // between dropped it), or a second node given the same name. The one
  // that joined keeps the name if its agent still answers.
  auto rp = self->make_response_promise<std::string>();
  auto name = offer.name;
  auto old = i->second;
  st.probing.insert(name);
  self->request(old, join_probe_timeout, status_atom::value)
    .then(
      [=](int) mutable {
        self->state.probing.erase(name);
        rp.deliver(duplicate(name, "has joined already and answers"));
      },
      [=](caf::error& err) mutable {
        auto& st = self->state;
        st.probing.erase(name);
        if (auto j = st.nodes.find(name);
            j != st.nodes.end() && j->second.address() == old.address())
          lose(self, j,
               "a node of its name joined, and it did not answer (" +
                 self->system().render(err) + ")",
               loss::told);
        if (st.nodes.count(name) != 0) {
          rp.deliver(duplicate(name, "has joined already"));
          return;
        }
        if (auto refused = admit(self, std::move(offer), std::move(agent)))
          rp.deliver(std::move(refused));
        else
          rp.deliver(st.coordinator);
      });
  return rp;
}

node_membership_actor::behavior_type
membership(membership_ptr self, membership_listener_actor listener,
           std::string coordinator, double peer_timeout_s) {
  self->state.listener = std::move(listener);
  self->state.coordinator = std::move(coordinator);
  self->state.peer_timeout_s = peer_timeout_s;
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& nodes = self->state.nodes;
    for (auto i = nodes.begin(); i != nodes.end(); ++i)
      if (i->second.address() == dm.source) {
        lose(self, i, self->system().render(dm.reason), loss::silent);
        return;
      }
  });
  return {
    [=](join_atom, node_offer& offer, node_agent_actor& agent) {
      return join(self, offer, agent);
    },
    [=](node_lost_atom, const std::string& name, const caf::node_id& nid) {
      auto& nodes = self->state.nodes;
      if (auto i = nodes.find(name);
          i != nodes.end() && i->second.node() == nid)
        lose(self, i, lost_with_connection, loss::told);
    },
  };
}

} // namespace

node_membership_actor spawn_node_membership(caf::local_actor* registry,
                                            membership_listener_actor listener,
                                            std::string coordinator,
                                            double peer_timeout_s) {
  return registry->spawn<caf::linked>(membership, std::move(listener),
                                      std::move(coordinator), peer_timeout_s);
}

} // namespace tasksup::detail

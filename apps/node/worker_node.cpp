#include "worker_node.hpp"

#include "actor_setup.hpp"
#include "exit_status.hpp"
#include "node_address.hpp"
#include "node_client.hpp"
#include "node_setup.hpp"
#include "signal_relay.hpp"
#include "tls_credentials.hpp"

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/runtime/private_files.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

namespace tasksup::app {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0')
    return "worker";
  return buf;
}

/// The longest the worker waits between two tries to reach its coordinator.
constexpr std::chrono::seconds max_reconnect_wait{5};

} // namespace

int run_worker_node(const worker_node_options& opts) {
  auto bad = [](const std::string& text) {
    std::cerr << "tasksup serve: " << text << '\n';
    return exit_status::bad_input;
  };
  std::vector<node_address> coordinators;
  for (std::size_t at = 0; at <= opts.join.size();) {
    auto comma = std::min(opts.join.find(',', at), opts.join.size());
    auto one = parse_node_address(opts.join.substr(at, comma - at));
    if (!one)
      return bad("--join: " + one.error().to_string());
    coordinators.push_back(*one);
    at = comma + 1;
  }
  if (opts.lease < 2 * opts.heartbeat)
    return bad("--lease must be at least twice --heartbeat-ms (a lease "
               "shorter than two heartbeats drops healthy connections)");
  auto cfg = load_node_config(opts.config_dir);
  if (!cfg)
    return bad(cfg.error().to_string());
  node_offer offer;
  offer.name = opts.name.empty() ? host_name() : opts.name;
  offer.max_concurrent = cfg->config.node.max_concurrent;
  // Checked against the coordinator's peer timeout when it joins.
  offer.lease_s = std::chrono::duration<double>(opts.lease).count();
  for (auto& text : opts.labels) {
    auto label = parse_label(text);
    if (!label)
      return bad("--label: " + label.error().to_string());
    offer.labels.insert(std::move(*label));
  }
  // Before any thread starts (logging, the runtimes, the actor system):
  // they inherit the blocked signals, so SIGTERM reaches the watch instead
  // of ending the process by default on some other thread (exit 143).
  // One that comes before there is an actor to tell is remembered.
  signal_relay signals;
  setup_logging(true);
  // Attempts outlive this node's connection to its coordinator only for the
  // adoption grace, inside this process: a worker process that dies takes
  // them with it (its coordinator retries them).
  runtime_owner owner{"worker", runtime::orphan_policy::kill};
  node_agent_options agent_opts;
  agent_opts.name = offer.name;
  agent_opts.adopt_grace = opts.failover_grace;
  auto process = make_named_runtime("process", cfg->config.node, owner);
  if (!process)
    return bad(process.error().to_string());
  agent_opts.runtimes["process"] = *process;
  offer.runtimes.push_back("process");
  if (auto docker = make_named_runtime("docker", cfg->config.node, owner)) {
    agent_opts.runtimes["docker"] = *docker;
    offer.runtimes.push_back("docker");
  } else {
    spdlog::warn("the docker runtime is not available here: {}",
                 docker.error().to_string());
  }
  if (auto ok = check_offer(offer); !ok)
    return bad(ok.error().what);
  auto state_dir =
    absolute_dir(opts.state_dir.empty() ? default_state_dir() : opts.state_dir);
  agent_opts.attempt_root = opts.work_dir.empty() ? state_dir + "/attempts"
                                                  : absolute_dir(opts.work_dir);
  // The attempts' output is this user's only, as on a coordinator.
  if (opts.work_dir.empty())
    if (auto secured = secure_state_dir(state_dir); !secured)
      return bad(secured.error().to_string());
  if (auto err = runtime::make_private_dirs(agent_opts.attempt_root);
      !err.empty())
    return bad(err);
  // What an earlier worker left running here (it was killed: its
  // coordinator has retried those attempts elsewhere long since).
  runtime::reap_spec leftovers;
  leftovers.attempt_root = agent_opts.attempt_root;
  leftovers.owner = owner.name;
  leftovers.dead_owners = true;
  std::set<runtime::container_runtime*> reaped;
  for (auto& [name, rt] : agent_opts.runtimes) {
    if (!reaped.insert(rt.get()).second)
      continue;
    auto report = rt->reap(leftovers);
    for (auto& line : report.reaped)
      spdlog::info("reaped what an earlier worker left: {}", line);
    for (auto& line : report.errors)
      spdlog::warn("reaping what an earlier worker left: {}", line);
  }

  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg, true);
  sys_cfg.set("middleman.heartbeat-interval", caf::timespan{opts.heartbeat});
  sys_cfg.set("middleman.connection-timeout", caf::timespan{opts.lease});
  // The worker joins as a client of the coordinator's door, with the node
  // certificate (mutual TLS) unless --insecure.
  auto creds = joining_credentials(opts.certs, opts.insecure);
  if (auto err = configure_node_client(sys_cfg, creds))
    return bad(err->to_string());
  if (creds.insecure)
    spdlog::warn("--insecure: joining the coordinator over plain TCP; "
                 "anyone on the way can read and forge its attempts");
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  bool stopping = signals.aim(caf::actor_cast<signal_target_actor>(self)) > 0;
  auto agent = spawn_node_agent(sys, agent_opts);
  spdlog::info("worker node {} (at most {} attempts, runtimes {}{}{}), "
               "attempts in {}",
               offer.name, offer.max_concurrent,
               offer.runtimes.size() > 1 ? "process, docker" : "process",
               offer.labels.empty() ? "" : ", labels ", to_string(offer.labels),
               agent_opts.attempt_root);
  int status = exit_status::ok;
  auto wait = std::chrono::milliseconds{250};
  // Sleeps `d` unless a signal comes first.
  auto pause = [&](std::chrono::milliseconds d) {
    self->receive([&](signal_atom, int) { stopping = true; },
                  caf::after(d) >> [] {});
  };
  bool reported_unreachable = false;
  // The coordinator tried next; after a round of them all without a join,
  // the worker waits (doubling, up to max_reconnect_wait).
  std::size_t next = 0;
  std::size_t tried = 0;
  auto try_next = [&] {
    next = (next + 1) % coordinators.size();
    if (++tried < coordinators.size())
      return;
    tried = 0;
    pause(wait);
    wait = std::min(wait * 2, std::chrono::milliseconds{max_reconnect_wait});
  };
  // The coordinator connection that went down last. The middleman keeps a
  // connected endpoint's actor until it sees that actor go down, and this
  // worker may see it first (monitors are told newest first): until the
  // middleman has caught up, connecting again returns the dead actor, whose
  // requests only time out.
  caf::strong_actor_ptr gone;
  int stale_answers = 0;
  // Handshakes CAF cut since the last join (see below).
  int cut_handshakes = 0;
  while (!stopping) {
    auto* addr = &coordinators[next];
    auto door = connect_to_node(sys, *addr, creds);
    if (door && gone && caf::actor_cast<caf::strong_actor_ptr>(*door) == gone &&
        stale_answers < 50) {
      ++stale_answers;
      pause(std::chrono::milliseconds{20});
      continue;
    }
    stale_answers = 0;
    if (!door && door.error() == caf::sec::connection_timeout) {
      // CAF (0.17) opens a connection as last heard from at time zero: the
      // heartbeat tick that comes before the coordinator's handshake cuts
      // it. That says nothing of the coordinator, only of where the tick
      // fell: it is tried again at once, not after the back-off. The
      // failure came at a tick, so the next try has a whole heartbeat for
      // its handshake.
      if (cut_handshakes++ == 0)
        spdlog::info("the coordinator at {} did not answer the connection "
                     "within a heartbeat; trying again",
                     addr->to_string());
      next = (next + 1) % coordinators.size();
      pause(std::chrono::milliseconds{1}); // a signal meanwhile stops it
      continue;
    }
    if (!door) {
      if (!reported_unreachable)
        spdlog::warn("cannot reach the coordinator at {}: {}; trying again",
                     addr->to_string(), sys.render(door.error()));
      reported_unreachable = coordinators.size() == 1;
      try_next();
      continue;
    }
    std::optional<std::string> joined;
    bool refused = false;
    bool standby = false;
    // The agent takes this coordinator's messages from now on: its first
    // placements and adoptions may overtake the join's answer.
    self->send(agent, join_atom::value, door->node());
    self
      ->request(*door, std::chrono::seconds{10}, join_atom::value, offer, agent)
      .receive([&](std::string& coordinator) { joined = coordinator; },
               [&](caf::error& err) {
                 if (is_error(err, protocol_error::not_leader)) {
                   // A standby: the leader is another one of the list.
                   spdlog::info("{}: {}", addr->to_string(), error_text(err));
                   standby = true;
                 } else if (err.category() == protocol_error_category) {
                   spdlog::error("the coordinator at {} refused this node: {}",
                                 addr->to_string(), error_text(err));
                   refused = true;
                 } else {
                   spdlog::warn("joining the coordinator at {} failed: {}",
                                addr->to_string(), error_text(err));
                 }
               });
    if (refused) {
      status = exit_status::bad_input;
      break;
    }
    if (!joined) {
      if (standby || coordinators.size() > 1)
        try_next();
      else
        pause(wait);
      continue;
    }
    reported_unreachable = false;
    wait = std::chrono::milliseconds{250};
    tried = 0;
    cut_handshakes = 0;
    self->monitor(*door);
    spdlog::info("joined the coordinator {} at {}", *joined, addr->to_string());
    bool connected = true;
    while (connected && !stopping)
      self->receive(
        [&](caf::down_msg& dm) {
          if (dm.source != door->address())
            return;
          connected = false;
          gone = caf::actor_cast<caf::strong_actor_ptr>(*door);
          if (opts.failover_grace.count() > 0)
            spdlog::warn(
              "lost the coordinator at {} ({}): the attempts "
              "running here wait up to {} s for a coordinator to "
              "adopt them; reconnecting",
              addr->to_string(), sys.render(dm.reason),
              std::chrono::duration<double>(opts.failover_grace).count());
          else
            spdlog::warn("lost the coordinator at {} ({}): the attempts "
                         "running here were stopped; reconnecting",
                         addr->to_string(), sys.render(dm.reason));
        },
        [&](node_left_atom, std::string& why) {
          // Dropped while the connection holds (an attempt it did not
          // start in time): its agent ended the attempts here; join again.
          self->demonitor(door->address());
          connected = false;
          spdlog::warn("the coordinator at {} dropped this node ({}): the "
                       "attempts running here were stopped; joining again",
                       addr->to_string(), why);
        },
        [&](signal_atom, int) { stopping = true; });
  }
  signals.drop();
  // The attempts here end, reported to the coordinator (while it is still
  // connected) as lost with this node: it retries them elsewhere at once.
  self->request(agent, std::chrono::seconds{30}, stop_atom::value)
    .receive([](bool) {},
             [](caf::error& err) {
               spdlog::warn("not every attempt here ended: {}",
                            error_text(err));
             });
  self->send_exit(agent, caf::exit_reason::user_shutdown);
  spdlog::info("worker node {} stopped", offer.name);
  return status;
}

} // namespace tasksup::app

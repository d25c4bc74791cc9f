#pragma once

// Connecting to a node without CAF 0.17's connection timeout: what the
// commands, worker nodes and the tests' CAF clients share.

#include <caf/actor.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/timespan.hpp>

#include <cstdint>
#include <set>
#include <string>

namespace tasksup {

/// Turns off CAF's connection timeout (heartbeats still go out, so the
/// node keeps the connection). In CAF 0.17 a connection's "last heard
/// from" time starts at zero when we connect and is set only by the peer's
/// first bytes: a heartbeat tick in between (one per heartbeat interval
/// from the actor system's start) finds it older than any timeout and
/// closes the connection, so connecting fails with `connection_timeout`
/// although the peer is up and merely a little slow to answer (a node
/// stopped for 2 s, or busy). Whoever turns it off bounds its waits
/// itself: `connect_within` and a timeout on each request.
void disable_connection_timeout(caf::actor_system_config& cfg);

/// What `remote_actor` does, through `connector` (the middleman's actor,
/// `sys.middleman().actor_handle()`, or CAF's OpenSSL manager's,
/// `sys.openssl_manager().actor_handle()`), with a deadline: a peer that
/// accepts the connection and never answers (stopped, overloaded) fails
/// with `sec::request_timeout` after `deadline` instead of hanging. A port
/// where nothing is published fails with `sec::no_actor_published_at_port`.
/// With `expected` (the message types of a typed handle), an actor published
/// with other ones (a node of another tasksup version) fails with
/// `sec::unexpected_actor_messaging_interface`.
caf::expected<caf::actor>
connect_within(const caf::io::middleman_actor& connector,
               const std::string& host, std::uint16_t port,
               caf::timespan deadline,
               const std::set<std::string>& expected = {});

} // namespace tasksup

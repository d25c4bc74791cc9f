#include "node_client.hpp"

#include "actor_setup.hpp"
#include "current_node.hpp"
#include "exit_status.hpp"
#include "node_address.hpp"
#include "signal_relay.hpp"

#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/remote_connect.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/timespan.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

namespace tasksup::app {

namespace {

/// `--state-dir`, `--certs` and `--insecure` of the one command this
/// program runs.
struct client_flags {
  std::string state_dir;
  std::string certs;
  bool insecure = false;
};

client_flags& flags() {
  static client_flags f;
  return f;
}

} // namespace

std::optional<error> configure_node_client(caf::actor_system_config& cfg,
                                           const node_credentials& creds) {
  if (creds.insecure)
    return std::nullopt;
  if (auto err = check_credentials(creds))
    return err;
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = creds.certificate_file;
  cfg.openssl_key = creds.key_file;
  cfg.openssl_cafile = creds.ca_file;
  return std::nullopt;
}

namespace {

/// `connect_to_node` once the credentials were checked.
caf::expected<node_door_actor> connect_checked(caf::actor_system& sys,
                                               const node_address& addr,
                                               const node_credentials& creds) {
  caf::io::middleman_actor connector;
  if (creds.insecure) {
    connector = sys.middleman().actor_handle();
  } else {
    if (!sys.has_openssl_manager())
      return caf::make_error(caf::sec::runtime_error,
                             "TLS is not configured in this actor system");
    connector = sys.openssl_manager().actor_handle();
  }
  // A node that accepts the connection and never answers (stopped,
  // overloaded) must not hang the command, and commands do not rely on
  // CAF's connection timeout (see disable_connection_timeout).
  auto door = connect_within(connector, addr.host, addr.port,
                             caf::timespan{node_connect_timeout},
                             sys.message_types<node_door_actor>());
  if (!door)
    return std::move(door.error());
  return caf::actor_cast<node_door_actor>(std::move(*door));
}

} // namespace

caf::expected<node_door_actor> connect_to_node(caf::actor_system& sys,
                                               const node_address& addr,
                                               const node_credentials& creds) {
  // The files could have gone since configure_node_client (a worker node
  // reconnects hours later): CAF would abort.
  if (auto err = check_credentials(creds))
    return caf::make_error(caf::sec::runtime_error, err->to_string());
  return connect_checked(sys, addr, creds);
}

void add_node_option(CLI::App* cmd, std::string& node) {
  cmd->add_option("--node", node,
                  "The node to talk to, HOST:PORT (default: $TASKSUP_NODE, "
                  "else the current node, else 127.0.0.1:" +
                    std::to_string(default_node_port) + ")");
  cmd->add_option("--state-dir", flags().state_dir,
                  "The node's state directory, where its client "
                  "certificates and control socket are (default: "
                  "$TASKSUP_STATE_DIR, else the current node's, else the "
                  "default state directory)");
  auto* certs =
    cmd->add_option("--certs", flags().certs,
                    "Directory with ca.crt, client.crt and client.key "
                    "(default: $TASKSUP_CERTS, else <state dir>/certs)");
  cmd
    ->add_flag("--insecure", flags().insecure,
               "Plain TCP, no certificates: only for a node started with "
               "--insecure")
    ->excludes(certs);
}

std::string node_help() {
  return node_target_help() + " " + client_certs_help() +
         " Exit status 3: the node could not be reached (or refused the "
         "certificate), did not answer within " +
         std::to_string(node_request_timeout.count()) +
         "s, or refused the request.";
}

int with_node(const std::string& command, const std::string& node,
              bool watch_signals,
              const std::function<int(node_session&)>& body) {
  auto where = resolve_node_target(node, flags().state_dir);
  auto addr = parse_node_address(where.node);
  if (!addr) {
    std::cerr << "tasksup " << command << ": " << addr.error().to_string()
              << '\n';
    return exit_status::bad_input;
  }
  std::optional<signal_relay> signals;
  if (watch_signals)
    signals.emplace();
  auto certs_dir = client_certs_dir(flags().certs, where.certs_dir);
  auto creds = flags().insecure ? insecure_credentials()
                                : client_credentials_in(certs_dir);
  auto say = [&](const std::string& text) {
    std::cerr << "tasksup " << command << ": " << text << '\n';
    return exit_status::unavailable;
  };
  auto unreachable = [&](const std::string& why) {
    return say("cannot reach the node at " + addr->to_string() + ": " + why);
  };
  // Nothing listening is the first thing to say when it is true: a missing
  // certificate or a refused handshake would only mislead.
  auto nothing_there = [&] {
    return probe_listening(*addr, std::chrono::seconds{2}) ==
           listen_probe::nothing;
  };
  // Where the certificates came from, and what to pass for another node's.
  auto certs_origin = [&] {
    if (!flags().certs.empty())
      return std::string{"--certs"};
    if (auto* env = std::getenv("TASKSUP_CERTS"); env && *env != '\0')
      return std::string{"$TASKSUP_CERTS"};
    if (where.certs_dir != where.state_dir + "/certs")
      return where.certs_dir + " (the current node's --certs)";
    return "the state directory " + where.state_dir + " (" +
           where.state_dir_source + ")";
  };
  auto what_to_pass = std::string{
    "if the node was started with `tasksup serve --state-dir DIR`, pass "
    "--state-dir DIR (or set TASKSUP_STATE_DIR=DIR); with `--certs DIR`, "
    "pass --certs DIR"};
  // The node this user started last says where its state is.
  if (auto current = read_current_node();
      current && current->state_dir != where.state_dir) {
    auto at = parse_node_address(current->node);
    if (at && at->to_string() == addr->to_string())
      what_to_pass += "; the current node, " + current->node +
                      ", was started with --state-dir " + current->state_dir;
  }
  caf::actor_system_config cfg;
  configure_actor_system(cfg, true);
  disable_connection_timeout(cfg);
  // A command's only actor is its scoped actor in this thread: one
  // scheduler thread serves the rest (CAF starts max(cores, 4) otherwise,
  // each created at start and joined at exit).
  cfg.set("scheduler.max-threads", 1);
  if (auto err = configure_node_client(cfg, creds)) {
    if (nothing_there())
      return say(nothing_listening_text(*addr, where.node_source));
    return unreachable(err->to_string() + " (certificates from " +
                       certs_origin() +
                       "; a node started without --certs creates them in "
                       "<state dir>/certs: " +
                       what_to_pass + ")");
  }
  if (creds.insecure)
    std::cerr << "tasksup " << command
              << ": warning: --insecure: plain TCP, the node is not "
                 "authenticated\n";
  caf::actor_system sys{cfg};
  // configure_node_client has just checked the files; checking them again
  // (both certificates and the key parsed once more: about 10 M
  // instructions under callgrind) would only narrow a window of
  // milliseconds in which they could change.
  auto remote = connect_checked(sys, *addr, creds);
  if (!remote && remote.error() == caf::sec::request_timeout) {
    // The connection is still being set up (a stopped node has not
    // finished the TLS handshake): CAF 0.17's OpenSSL module then polls it
    // in a busy loop and its actor system never finishes shutting down.
    // Nothing is left to clean up, so the command ends here.
    unreachable("no answer within " +
                std::to_string(node_connect_timeout.count()) + "s");
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(exit_status::unavailable);
  }
  if (!remote) {
    if (nothing_there())
      return say(nothing_listening_text(*addr, where.node_source));
    return unreachable(
      sys.render(remote.error()) +
      (creds.insecure
         ? " (is `tasksup serve --insecure` running there?)"
         : " (is `tasksup serve` running there, with certificates from the "
           "same CA as " +
             creds.ca_file + "? The certificates came from " + certs_origin() +
             "; " + what_to_pass + ")"));
  }
  caf::scoped_actor self{sys};
  if (signals)
    signals->aim(caf::actor_cast<signal_target_actor>(self));
  node_session session{self, *remote, addr->to_string(), command};
  auto rc = body(session);
  if (signals)
    signals->drop();
  return rc;
}

bool subscribe_to_node(node_session& s, int& rc) {
  bool subscribed = false;
  s.self
    ->request(s.node, node_request_timeout, subscribe_atom::value,
              caf::actor_cast<subscriber_actor>(s.self))
    .receive([&](bool) { subscribed = true; },
             [&](caf::error& err) {
               rc = report_request_error(s, err, exit_status::unavailable);
             });
  if (subscribed)
    s.self->monitor(s.node);
  return subscribed;
}

int report_request_error(const node_session& s, const caf::error& err,
                         int refusal_status) {
  return report_node_failure(
    s.command, s.address, err.category() == protocol_error_category,
    err == caf::sec::request_timeout, error_text(err), refusal_status);
}

} // namespace tasksup::app

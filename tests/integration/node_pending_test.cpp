// What clients leave pending at a node, and who asked for what, on
// loopback with real processes and mutual TLS: 100,000 awaits of one client
// keep neither another client's `status` waiting nor the node's memory
// growing, and are all answered when the task ends; the caps end in errors
// that name them (the CLI prints them); a stop from a client certificate
// of a known subject is audited under that subject.

#include "tasksup_child.hpp"
#include "tls_peer.hpp"

#include "tasksup/actors/protocol.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// A TLS node on a free loopback port with its default certificates, and
/// `extra` serve flags.
class pending_node {
public:
  pending_node(const scratch& dir, std::vector<std::string> extra = {})
    : dir_(dir), child_(dir, "serve", serve_args(dir, std::move(extra))) {
    auto port = listening_port(child_);
    if (!port)
      FAIL("the node did not start: " << child_.err());
    port_ = *port;
  }

  finished cmd(std::vector<std::string> args) {
    args.push_back("--node");
    args.push_back(address());
    return run_to_end(dir_, args, 30s);
  }

  /// VmRSS of the node in kB.
  long rss_kb() const {
    std::ifstream in{"/proc/" + std::to_string(child_.pid()) + "/status"};
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0)
        return std::stol(line.substr(6));
    return -1;
  }

  /// The node's log lines that contain `text`.
  std::vector<std::string> log_lines_with(const std::string& text) const {
    std::istringstream in{child_.err()};
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line))
      if (line.find(text) != std::string::npos)
        out.push_back(line);
    return out;
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

private:
  static std::vector<std::string> serve_args(const scratch& dir,
                                             std::vector<std::string> extra) {
    std::vector<std::string> args{
      "serve",           "--listen",    "127.0.0.1:0",
      "--config",        config_dir(),  "--work-dir",
      dir / "node-work", "--state-dir", dir / "state"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  const scratch& dir_;
  tasksup_child child_;
  int port_ = 0;
};

/// A task file whose agent sleeps for ten minutes (until stopped).
std::string sleeper_task(const scratch& dir, const std::string& id) {
  auto agent = dir.write("sleeper.sh", "#!/bin/sh\nexec sleep 600\n");
  ::chmod(agent.c_str(), 0755);
  return dir.write(id + ".json", R"({"id": ")" + id + R"(", "prompt": "x",
    "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": ")" +
                                   agent + R"(", "cli_flags": ""}]}})");
}

/// The seconds one `status` request to `door` takes, or -1 without an
/// answer within 10 s.
double status_round_trip(caf::actor_system& sys, const caf::actor& door) {
  caf::scoped_actor self{sys};
  auto start = steady::now();
  bool answered = false;
  self->request(door, std::chrono::seconds{10}, status_atom::value)
    .receive([&](std::vector<task_status>&) { answered = true; },
             [&](caf::error&) {});
  if (!answered)
    return -1;
  return std::chrono::duration<double>(steady::now() - start).count();
}

/// Writes a client certificate with the subject `/O=<org>/CN=<cn>`,
/// signed by the CA in `certs`, with the openssl tool; returns its files.
tls_files issue_client_certificate(const scratch& dir, const std::string& certs,
                                   const std::string& org,
                                   const std::string& cn) {
  auto ext = dir.write("client-ext.cnf", "basicConstraints=critical,CA:FALSE\n"
                                         "keyUsage=critical,digitalSignature\n"
                                         "extendedKeyUsage=clientAuth\n");
  auto key = dir / (cn + ".key");
  auto csr = dir / (cn + ".csr");
  auto crt = dir / (cn + ".crt");
  auto run = [](const std::string& cmd) {
    REQUIRE(std::system((cmd + " >/dev/null 2>&1").c_str()) == 0);
  };
  run("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -keyout '" +
      key + "' -subj '/O=" + org + "/CN=" + cn + "' -out '" + csr + "'");
  run("openssl x509 -req -in '" + csr + "' -CA '" + certs +
      "/ca.crt' -CAkey '" + certs + "/ca.key' -CAcreateserial -CAserial '" +
      (dir / "ca.srl") + "' -days 1 -sha256 -extfile '" + ext + "' -out '" +
      crt + "'");
  return {certs + "/ca.crt", crt, key};
}

} // namespace

TEST_CASE("pending: 100,000 awaits from one client keep the node responsive "
          "and its memory bounded, and are all answered when the task ends") {
  scratch dir;
  // The per-client cap is raised so that all 100,000 awaits are taken.
  pending_node n{
    dir, {"--max-pending-per-client", "100000", "--max-pending", "100000"}};
  REQUIRE(n.cmd({"submit", sleeper_task(dir, "long")}).status == 0);
  auto idle_rss_kb = n.rss_kb();

  // The waiting client: one connection (one actor system), 100 actors
  // with 1,000 awaits each (CAF 0.17 finds a reply's handler by a linear
  // search over the actor's pending requests; 1,000 keeps the client's own
  // side cheap).
  caf::actor_system_config wait_cfg;
  configure_caf_client(wait_cfg, client_files(node_certs(dir)));
  caf::actor_system waiting{wait_cfg};
  auto wait_door = caf_connect(waiting, n.port());
  REQUIRE(wait_door);
  constexpr int actors = 100;
  constexpr int per_actor = 1000;
  constexpr int total = actors * per_actor;
  auto sent = std::make_shared<std::atomic<int>>(0);
  auto results = std::make_shared<std::atomic<int>>(0);
  auto errors = std::make_shared<std::atomic<int>>(0);
  for (int a = 0; a < actors; ++a)
    waiting.spawn([=, door = *wait_door](caf::event_based_actor* self) {
      for (int i = 0; i < per_actor; ++i)
        self
          ->request(door, std::chrono::seconds{600}, await_atom::value,
                    std::string{"long"})
          .then([=](task_result&) { ++*results; },
                [=](caf::error&) { ++*errors; });
      *sent += per_actor;
    });
  REQUIRE(eventually([&] { return *sent == total; }, 60s));
  // A reply on the same connection comes after the door handled every
  // await sent before it.
  REQUIRE(status_round_trip(waiting, *wait_door) >= 0);
  CHECK(*results + *errors == 0);

  // Another client, on its own connection.
  caf::actor_system_config other_cfg;
  configure_caf_client(other_cfg, client_files(node_certs(dir)));
  caf::actor_system other{other_cfg};
  auto door = caf_connect(other, n.port());
  REQUIRE(door);
  // 100,000 pending awaits take some tens of MB (the door's record of each
  // and CAF's buffers): 300 MB is far above that and an idle node's ~20 MB,
  // and far below the ~760 MB that a million awaits took when each was its
  // own pending request inside the node.
  constexpr long rss_bound_kb = 300 * 1024;
  for (int i = 0; i < 5; ++i) {
    auto rtt = status_round_trip(other, *door);
    CHECK(rtt >= 0);
    CHECK(rtt < 1.0);
    CHECK(n.rss_kb() < rss_bound_kb);
  }
  INFO("idle RSS " << idle_rss_kb << " kB, with the awaits " << n.rss_kb()
                   << " kB");
  CHECK(n.rss_kb() < rss_bound_kb);

  // The task ends: every await is answered, and the node stays responsive
  // while it answers them and after.
  caf::scoped_actor self{other};
  bool stopped = false;
  self
    ->request(*door, std::chrono::seconds{10}, stop_atom::value,
              std::string{"long"}, stop_mode::kill)
    .receive([&](bool x) { stopped = x; }, [&](caf::error&) {});
  REQUIRE(stopped);
  for (int i = 0; i < 5; ++i) {
    auto rtt = status_round_trip(other, *door);
    CHECK(rtt >= 0);
    CHECK(rtt < 1.0);
  }
  REQUIRE(eventually([&] { return *results + *errors == total; }, 60s));
  CHECK(*results == total);
  for (int i = 0; i < 5; ++i) {
    auto rtt = status_round_trip(other, *door);
    CHECK(rtt >= 0);
    CHECK(rtt < 1.0);
  }
  CHECK(n.rss_kb() < rss_bound_kb);
}

TEST_CASE("pending: a client past the per-connection cap gets an error "
          "naming it, the node-wide cap is named to the CLI") {
  scratch dir;
  pending_node n{dir, {"--max-pending-per-client", "3", "--max-pending", "5"}};
  REQUIRE(n.cmd({"submit", sleeper_task(dir, "long")}).status == 0);
  caf::actor_system_config cfg;
  configure_caf_client(cfg, client_files(node_certs(dir)));
  caf::actor_system sys{cfg};
  auto door = caf_connect(sys, n.port());
  REQUIRE(door);
  // One connection, several actors: they count as one client.
  auto errors = std::make_shared<std::vector<std::string>>();
  auto refusals = std::make_shared<std::atomic<int>>(0);
  auto sent = std::make_shared<std::atomic<int>>(0);
  auto await_from_new_actor = [&](caf::actor_system& from,
                                  const caf::actor& to) {
    from.spawn([=](caf::event_based_actor* self) {
      self
        ->request(to, std::chrono::seconds{600}, await_atom::value,
                  std::string{"long"})
        .then([](task_result&) {},
              [=](caf::error& err) {
                // Written before the count is, read after it.
                errors->push_back(error_text(err));
                ++*refusals;
              });
      ++*sent;
    });
  };
  for (int i = 0; i < 4; ++i) {
    await_from_new_actor(sys, *door);
    // In order: each is at the door before the next is sent.
    REQUIRE(eventually([&] { return *sent == i + 1; }, 10s));
    REQUIRE(status_round_trip(sys, *door) >= 0);
  }
  // The fourth is refused at once.
  REQUIRE(eventually([&] { return *refusals == 1; }, 10s));
  CHECK(errors->front().find("max_pending_per_client = 3") !=
        std::string::npos);
  // Another client's two awaits fill the node-wide cap of 5 (3 + 2); the
  // CLI's `events --follow` is then refused, and says why.
  caf::actor_system_config cfg2;
  configure_caf_client(cfg2, client_files(node_certs(dir)));
  caf::actor_system sys2{cfg2};
  auto door2 = caf_connect(sys2, n.port());
  REQUIRE(door2);
  for (int i = 0; i < 2; ++i)
    await_from_new_actor(sys2, *door2);
  REQUIRE(eventually([&] { return *sent == 6; }, 10s));
  REQUIRE(status_round_trip(sys2, *door2) >= 0);
  CHECK(*refusals == 1);
  auto follow = n.cmd({"events", "--follow"});
  CHECK(follow.status != 0);
  CHECK(follow.err.find("max_pending = 5") != std::string::npos);
  // A stop through the local control socket is audited with the peer's
  // uid.
  CHECK(n.cmd({"stop", "long"}).status == 0);
  CHECK(eventually(
    [&] {
      return !n.log_lines_with("audit: local control socket client (uid " +
                               std::to_string(::geteuid()) +
                               ") asked to stop task 'long'")
                .empty();
    },
    10s));
}

TEST_CASE("pending: a stop by a client certificate is audited under its "
          "subject, with the action and the task") {
  scratch dir;
  pending_node n{dir};
  REQUIRE(n.cmd({"submit", sleeper_task(dir, "audited")}).status == 0);
  auto files =
    issue_client_certificate(dir, node_certs(dir), "acme", "alice-ops");
  caf::actor_system_config cfg;
  configure_caf_client(cfg, files);
  caf::actor_system sys{cfg};
  auto door = caf_connect(sys, n.port());
  REQUIRE(door);
  caf::scoped_actor self{sys};
  bool stopped = false;
  self
    ->request(*door, std::chrono::seconds{10}, stop_atom::value,
              std::string{"audited"}, stop_mode::cancel)
    .receive([&](bool x) { stopped = x; }, [&](caf::error&) {});
  CHECK(stopped);
  REQUIRE(eventually(
    [&] { return !n.log_lines_with("asked to stop task 'audited'").empty(); },
    10s));
  auto lines = n.log_lines_with("asked to stop task 'audited'");
  REQUIRE(lines.size() == 1);
  CHECK(lines.front().find("audit: client 'CN=alice-ops,O=acme'") !=
        std::string::npos);
  // The task's history shows it too.
  auto described = n.cmd({"describe", "audited"});
  CHECK(described.out.find("CN=alice-ops,O=acme") != std::string::npos);
}

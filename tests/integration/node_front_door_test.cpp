// A `tasksup serve` node on loopback against hostile peers: peers holding
// a valid client certificate that misbehave inside TLS (huge length
// prefixes, stalled frames), raw sockets (thousands of idle connections,
// random bytes) and a CAF client linked with the protocol (internal
// messages, forged events, out-of-range enums, event subscribers that stop
// reading). Throughout, the node serves a real client and its resident
// memory stays under `rss_bound_kb`.
// Peers without a valid certificate: node_tls_test.cpp.

#include "tasksup_child.hpp"
#include "tls_peer.hpp"

#include "tasksup/actors/node_door_actor.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/after.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/timespan.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// The bound on the node's resident memory while under attack: a few times
/// an idle node's (~15 MB), far below one announced 4 GiB frame.
constexpr long rss_bound_kb = 150 * 1024;

/// A node on a free loopback port.
class door_node {
public:
  explicit door_node(const scratch& dir)
    : dir_(dir),
      child_(dir, "serve",
             {"serve", "--listen", "127.0.0.1:0", "--config", config_dir(),
              "--work-dir", dir / "node-work", "--state-dir", dir / "state"}) {
    auto port = listening_port(child_);
    if (!port)
      FAIL("the node did not start: " << child_.err());
    port_ = *port;
  }

  finished cmd(std::vector<std::string> args) {
    args.push_back("--node");
    args.push_back(address());
    return run_to_end(dir_, args);
  }

  /// The node answers a real client.
  bool serves() { return cmd({"status"}).status == 0; }

  /// VmRSS of the node in kB.
  long rss_kb() {
    std::ifstream in{"/proc/" + std::to_string(child_.pid()) + "/status"};
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0)
        return std::stol(line.substr(6));
    return -1;
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  tasksup_child& process() { return child_; }

private:
  const scratch& dir_;
  tasksup_child child_;
  int port_ = 0;
};

/// A raw TCP connection to the node.
int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

/// Whether the node closed `fd` within `limit` (reads and discards what
/// the node sends, such as its handshake).
bool closed_by_node(int fd, std::chrono::milliseconds limit) {
  timeval tv{0, 100 * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return eventually(
    [&] {
      char buf[4096];
      auto n = ::recv(fd, buf, sizeof buf, 0);
      return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    },
    limit);
}

/// A BASP header (CAF 0.17: 32 bytes) announcing `payload_len` bytes of a
/// direct message.
std::string basp_header(std::uint32_t payload_len) {
  std::string h(32, '\0');
  h[0] = 2; // direct_message
  h[4] = static_cast<char>(payload_len >> 24);
  h[5] = static_cast<char>(payload_len >> 16);
  h[6] = static_cast<char>(payload_len >> 8);
  h[7] = static_cast<char>(payload_len);
  return h;
}

} // namespace

TEST_CASE("front door: a huge length prefix is refused before any buffer "
          "grows") {
  scratch dir;
  door_node n{dir};
  // A certified peer: the frame checks apply to the decrypted stream.
  auto certs = client_files(node_certs(dir));
  {
    tls_client peer{n.port(), certs};
    REQUIRE(peer.handshake_ok());
    REQUIRE(peer.send(basp_header(0xFFFFFFFFu)));
    CHECK(peer.closed_by_node(5s));
  }
  {
    // Just over the limit, too.
    tls_client peer{n.port(), certs};
    REQUIRE(peer.handshake_ok());
    REQUIRE(peer.send(basp_header((16u << 20) + 1)));
    CHECK(peer.closed_by_node(5s));
  }
  CHECK(n.serves());
  CHECK(n.rss_kb() < rss_bound_kb);
}

TEST_CASE("front door: a stalled frame and random bytes lose their "
          "connection, the node serves on") {
  scratch dir;
  door_node n{dir};
  tls_client stalled{n.port(), client_files(node_certs(dir))};
  REQUIRE(stalled.handshake_ok());
  REQUIRE(stalled.send(basp_header(1000).substr(0, 10)));
  std::mt19937 rng{42};
  std::string noise(64 * 1024, '\0');
  for (auto& c : noise)
    c = static_cast<char>(rng());
  int noisy = raw_connect(n.port());
  ::send(noisy, noise.data(), noise.size(), MSG_NOSIGNAL);
  CHECK(closed_by_node(noisy, 10s));
  // Real clients are served while the stalled frame waits.
  CHECK(n.serves());
  // The frame timeout is 10 s.
  CHECK(stalled.closed_by_node(20s));
  ::close(noisy);
  CHECK(n.serves());
  CHECK(n.rss_kb() < rss_bound_kb);
}

TEST_CASE("front door: 2,000 idle connections do not lock out real clients") {
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  if (lim.rlim_cur < 2100 && lim.rlim_max >= 2100) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  INFO("needs 2,100 descriptors; the limit is " << lim.rlim_cur);
  REQUIRE(lim.rlim_cur >= 2100);
  scratch dir;
  door_node n{dir};
  std::vector<int> idle;
  for (int i = 0; i < 2000; ++i)
    idle.push_back(raw_connect(n.port()));
  CHECK(n.serves());
  CHECK(n.cmd({"submit", example("demo-crash.json")}).status == 0);
  CHECK(n.rss_kb() < rss_bound_kb);
  for (int fd : idle)
    ::close(fd);
  CHECK(n.serves());
}

TEST_CASE("front door: a CAF client cannot reach internal handlers, forge "
          "events or send out-of-range enums") {
  scratch dir;
  door_node n{dir};
  auto follow = std::make_unique<tasksup_child>(
    dir, "follow",
    std::vector<std::string>{"events", "--follow", "--json", "--node",
                             n.address()});
  caf::actor_system_config cfg;
  configure_caf_client(cfg, client_files(node_certs(dir)));
  caf::actor_system sys{cfg};
  auto door = caf_connect(sys, n.port());
  REQUIRE(door);
  caf::scoped_actor self{sys};
  auto refused = [&](auto... xs) {
    bool got_error = false;
    self->request(*door, std::chrono::seconds{5}, xs...)
      .receive([&](caf::message&) {},
               [&](caf::error& err) {
                 got_error = err == caf::sec::unexpected_message;
               });
    return got_error;
  };
  // Internal messages: each refused, none has an effect.
  for (int i = 0; i < 8; ++i)
    CHECK(refused(
      permit_atom::value,
      permit_request{
        "forged-" + std::to_string(i), "codex", "", true, true, {}, false}));
  CHECK(refused(release_atom::value, std::string{"x"}));
  for (int i = 0; i < 5; ++i)
    CHECK(refused(agent_result_atom::value, std::string{"flaky"}, false));
  task_result forged_result;
  forged_result.task_id = "demo-crash";
  CHECK(refused(escalate_atom::value, forged_result));
  // A forged event sent to the door is dropped.
  event forged;
  forged.kind = event_kind::task_done;
  forged.task_id = "FORGED";
  forged.body = json_event_body(
    "", "", R"({"event":"task_done","task_id":"/etc/FORGED-BY-ROGUE"})");
  self->send(*door, event_atom::value, forged);
  // Out-of-range enums never reach a handler: the element fails to load
  // and CAF 0.17 delivers an empty message, which the door refuses
  // (or, for a failure inside a task, the message is dropped and the
  // request times out). Either way nothing is accepted.
  bool answered = false;
  self
    ->request(*door, std::chrono::seconds{2}, stop_atom::value,
              std::string{"x"}, static_cast<stop_mode>(7))
    .receive([&](bool) { answered = true; }, [&](caf::error&) {});
  CHECK_FALSE(answered);
  task_spec bad;
  bad.id = "bad-enum";
  bad.prompt = "x";
  bad.supervisor.backoff[static_cast<error_class>(20)] = backoff_spec{};
  answered = false;
  self->request(*door, std::chrono::seconds{2}, submit_atom::value, bad)
    .receive([&](std::string&) { answered = true; }, [&](caf::error&) {});
  CHECK_FALSE(answered);
  // The real client is still served, and its task runs (every slot free).
  auto sub = n.cmd({"submit", example("demo-crash.json")});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  INFO(n.process().err());
  CHECK(eventually(
    [&] {
      auto r = n.cmd({"status", "demo-crash", "--json"});
      return r.status == 0 && r.out.find("\"succeeded\"") != std::string::npos;
    },
    30s));
  CHECK(n.cmd({"status", "bad-enum"}).status != 0);
  follow->signal(SIGINT);
  follow->wait(10s);
  auto events = follow->out();
  CHECK(events.find("demo-crash") != std::string::npos);
  CHECK(events.find("FORGED") == std::string::npos);
  CHECK(n.process().err().find("FORGED") == std::string::npos);
  CHECK(n.rss_kb() < rss_bound_kb);
}

TEST_CASE("front door: a client learns at connect time whether the door "
          "speaks its interface") {
  scratch dir;
  door_node n{dir};
  caf::actor_system_config cfg;
  configure_caf_client(cfg, client_files(node_certs(dir)));
  caf::actor_system sys{cfg};
  auto connector = sys.openssl_manager().actor_handle();
  auto port = static_cast<std::uint16_t>(n.port());
  // The door's own interface: connected, and it answers typed requests.
  auto door = connect_within(connector, "127.0.0.1", port, caf::timespan{10s},
                             sys.message_types<node_door_actor>());
  REQUIRE(door);
  caf::scoped_actor self{sys};
  bool answered = false;
  self
    ->request(caf::actor_cast<node_door_actor>(*door), 10s, status_atom::value)
    .receive([&](std::vector<task_status>&) { answered = true; },
             [&](caf::error&) {});
  CHECK(answered);
  // Another interface (what a client of another version expects): refused
  // before any request is sent.
  auto other = connect_within(connector, "127.0.0.1", port, caf::timespan{10s},
                              sys.message_types<registry_actor>());
  REQUIRE_FALSE(other);
  CHECK(other.error() == caf::sec::unexpected_actor_messaging_interface);
}

TEST_CASE("front door: a command waits for a node that is slow to answer "
          "instead of failing with connection_timeout") {
  // CAF 0.17 closes a new connection whose first bytes from the node have
  // not arrived by the client's next heartbeat tick (its "last heard" time
  // starts at zero); every command connecting to a node stopped for 2 s
  // failed that way (3 of 3 before commands stopped using CAF's connection
  // timeout). The node is stopped, not slept on: the command must wait.
  scratch dir;
  door_node n{dir};
  for (int round = 0; round < 3; ++round) {
    n.process().signal(SIGSTOP);
    tasksup_child status{dir,
                         "status-" + std::to_string(round),
                         {"status", "--node", n.address()}};
    std::this_thread::sleep_for(2s);
    n.process().signal(SIGCONT);
    INFO(status.err());
    CHECK(status.wait(30s) == 0);
  }
}

TEST_CASE("front door: event subscribers that stop reading are dropped, a "
          "reader gets every event of a 10,000-event burst") {
  scratch dir;
  door_node n{dir};
  // 10,000 output lines: 10,000 log events in one burst (the most one
  // attempt sends by default).
  auto chatty = dir.write("chatty.sh", "#!/bin/sh\nseq -f '%050g' 1 10000\n");
  ::chmod(chatty.c_str(), 0755);
  auto task = [&](const std::string& id, const std::string& agent) {
    return dir.write(id + ".json", R"({"id": ")" + id + R"(", "prompt": "x",
                         "agent_selection": {"agents": [{"agent_id": "a",
                         "agent_cli": ")" +
                                     agent + R"(", "cli_flags": ""}]}})");
  };
  auto follow = std::vector<std::string>{"events", "--follow", "--json",
                                         "--node", n.address()};
  // A reader; `events --follow` writing into a pipe the test stops reading;
  // one that is stopped (SIGSTOP: it reads nothing from its socket, so
  // what the node sends it stays in the node's buffers).
  tasksup_child reader{dir, "reader", follow};
  auto fifo = dir / "stuck.out";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  int pipe_in = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(pipe_in >= 0);
  tasksup_child stuck{dir, "stuck", follow};
  tasksup_child frozen{dir, "frozen", follow};
  std::string head;
  auto read_some = [&] {
    char buf[4096];
    auto k = ::read(pipe_in, buf, sizeof buf);
    if (k > 0)
      head.append(buf, static_cast<std::size_t>(k));
    return k;
  };
  // Their subscriptions are in place once a marker task's end reaches
  // each (a marker that ended before one subscribed is not seen by it:
  // the test submits another).
  auto done_of = [](const std::string& id) {
    return R"("event":"task_done","task_id":")" + id;
  };
  int markers = 0;
  auto last_marker = std::chrono::steady_clock::now() - 1h;
  REQUIRE(eventually(
    [&] {
      read_some();
      if (head.find(done_of("marker")) != std::string::npos &&
          reader.out().find(done_of("marker")) != std::string::npos &&
          frozen.out().find(done_of("marker")) != std::string::npos)
        return true;
      if (std::chrono::steady_clock::now() - last_marker >= 1s) {
        auto id = "marker-" + std::to_string(++markers);
        REQUIRE(n.cmd({"submit", task(id, "/bin/true")}).status == 0);
        last_marker = std::chrono::steady_clock::now();
      }
      return false;
    },
    60s));
  frozen.signal(SIGSTOP);
  // A CAF client that subscribes and never looks at its mailbox.
  caf::actor_system_config cfg;
  configure_caf_client(cfg, client_files(node_certs(dir)));
  caf::actor_system sys{cfg};
  auto door = caf_connect(sys, n.port());
  REQUIRE(door);
  caf::scoped_actor mute{sys};
  bool subscribed = false;
  mute
    ->request(*door, 10s, subscribe_atom::value,
              caf::actor_cast<subscriber_actor>(mute))
    .receive([&](bool) { subscribed = true; }, [&](caf::error&) {});
  REQUIRE(subscribed);
  // The burst; from here on nobody reads the pipe.
  REQUIRE(n.cmd({"submit", task("chatty", chatty)}).status == 0);
  CHECK(eventually(
    [&] {
      return reader.out().find(done_of("chatty") + "\"") != std::string::npos;
    },
    120s));
  // The three that stopped are dropped (10 s after their last
  // acknowledgement), the node says which, and nobody else is.
  auto drops = [&] {
    auto log = n.process().err();
    std::size_t k = 0;
    for (auto at = log.find("dropped: did not keep up");
         at != std::string::npos;
         at = log.find("dropped: did not keep up", at + 1))
      ++k;
    return k;
  };
  CHECK(eventually([&] { return drops() >= 3; }, 60s));
  CHECK(n.serves());
  CHECK(n.rss_kb() < rss_bound_kb);
  // The reader got every event of the burst, in order, and is served on.
  reader.signal(SIGINT);
  INFO(reader.err());
  REQUIRE(reader.wait(30s) == 0);
  auto events = json_lines(reader.out());
  std::size_t logs = 0;
  bool done = false;
  for (auto& e : events) {
    if (e.at("task_id").as_string() != "chatty")
      continue;
    auto kind = e.at("event").as_string();
    if (kind == "log" && e.at("stream").as_string() == "stdout" && !done)
      ++logs;
    done = done || kind == "task_done";
  }
  CHECK(logs == 10000);
  CHECK(done);
  CHECK(drops() == 3);
  // The mute client finds the events sent before the drop, then the
  // notice; its connection still serves requests, but it gets no more
  // events.
  std::size_t mute_events = 0;
  std::optional<std::string> reason;
  for (bool more = true; more && !reason;)
    mute->receive([&](event_atom, const event&) { ++mute_events; },
                  [&](dropped_atom, const std::string& why) { reason = why; },
                  caf::after(std::chrono::seconds{10}) >>
                    [&] { more = false; });
  REQUIRE(reason);
  CHECK(reason->rfind("dropped: did not keep up", 0) == 0);
  CHECK(mute_events < events.size());
  bool still = true;
  mute->request(*door, 10s, ack_atom::value, std::uint64_t{mute_events})
    .receive([&](bool x) { still = x; }, [&](caf::error&) {});
  CHECK_FALSE(still);
  bool answered = false;
  mute->request(*door, 10s, status_atom::value)
    .receive([&](std::vector<task_status>&) { answered = true; },
             [&](caf::error&) {});
  CHECK(answered);
  // The stuck command, once its output drains, shows what it had been
  // sent, then the notice, and exits 3.
  CHECK(eventually(
    [&] {
      while (read_some() > 0) {
      }
      return stuck.exited();
    },
    60s));
  ::close(pipe_in);
  INFO(stuck.err());
  CHECK(stuck.wait(1s) == 3);
  CHECK(stuck.err().find("dropped: did not keep up") != std::string::npos);
  // The stopped one, resumed, ends with status 3 and says why: the
  // notice, or (when the connection guard closed its connection, silent for
  // 30 s, first) a lost connection or a node that does not answer.
  frozen.signal(SIGCONT);
  auto frozen_rc = frozen.wait(30s);
  INFO("frozen: " << frozen.err());
  CHECK(frozen_rc == 3);
  CHECK(frozen.err().find("tasksup events: ") != std::string::npos);
}

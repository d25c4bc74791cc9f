// Mutual TLS at a node's front door, on loopback with real processes: peers
// without a certificate of the node's CA are refused during the handshake
// (CAF clients, the tasksup CLI, raw TLS clients), another local user cannot
// use a node's default certificates, and garbage on the port loses its
// connection while the node serves on and logs refusals at a bounded rate.

#include "tasksup_child.hpp"
#include "tls_peer.hpp"

#include "tasksup/actors/protocol.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;

namespace {

/// A node on a free loopback port with its default certificates (in
/// `<dir>/state/certs`, created on its first start).
class tls_node {
public:
  explicit tls_node(const scratch& dir)
    : dir_(dir),
      child_(dir, "serve",
             {"serve", "--listen", "127.0.0.1:0", "--config", config_dir(),
              "--work-dir", dir / "node-work", "--state-dir", dir / "state"}) {
    auto port = listening_port(child_);
    if (!port)
      FAIL("the node did not start: " << child_.err());
    port_ = *port;
  }

  finished cmd(std::vector<std::string> args,
               const std::vector<std::string>& env = {}) {
    args.push_back("--node");
    args.push_back(address());
    return run_to_end(dir_, args, 30s, env);
  }

  bool serves() { return cmd({"status"}).status == 0; }

  long rss_kb() const {
    std::ifstream in{"/proc/" + std::to_string(child_.pid()) + "/status"};
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0)
        return std::stol(line.substr(6));
    return -1;
  }

  /// Lines of the node's log that contain `text`.
  std::size_t log_lines_with(const std::string& text) const {
    std::istringstream in{child_.err()};
    std::size_t n = 0;
    std::string line;
    while (std::getline(in, line))
      n += line.find(text) != std::string::npos ? 1 : 0;
    return n;
  }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  tasksup_child& process() { return child_; }

private:
  const scratch& dir_;
  tasksup_child child_;
  int port_ = 0;
};

/// Whether the node closed the raw connection `fd` within `limit` (what it
/// sends, such as a TLS alert or ServerHello, is read and dropped).
bool raw_closed_by_node(int fd, std::chrono::milliseconds limit) {
  set_receive_timeout(fd, 100ms);
  return eventually(
    [&] {
      char buf[4096];
      auto n = ::recv(fd, buf, sizeof buf, 0);
      return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    },
    limit);
}

void send_raw(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

/// A BASP header (CAF 0.17: 32 bytes): operation `op`, `payload_len`.
std::string basp_header(std::uint8_t op, std::uint32_t payload_len) {
  std::string h(32, '\0');
  h[0] = static_cast<char>(op);
  h[4] = static_cast<char>(payload_len >> 24);
  h[5] = static_cast<char>(payload_len >> 16);
  h[6] = static_cast<char>(payload_len >> 8);
  h[7] = static_cast<char>(payload_len);
  return h;
}

/// Whether a CAF client with `files` gets the node's door and an answer
/// to `status` from it.
bool caf_client_served(int port, const tls_files& files) {
  caf::actor_system_config cfg;
  configure_caf_client(cfg, files);
  caf::actor_system sys{cfg};
  auto door = caf_connect(sys, port);
  if (!door)
    return false;
  caf::scoped_actor self{sys};
  bool answered = false;
  self->request(*door, std::chrono::seconds{5}, status_atom::value)
    .receive([&](std::vector<task_status>&) { answered = true; },
             [&](caf::error&) {});
  return answered;
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return 0;
  return st.st_mode & 07777;
}

} // namespace

TEST_CASE("tls: a client without a certificate of the node's CA is refused "
          "during the handshake, the node serves on") {
  scratch dir;
  tls_node n{dir};
  auto good = client_files(node_certs(dir));
  // A plain-TCP client starts at once: it waits for the handshake timeout.
  tasksup_child plain{
    dir, "plain", {"status", "--insecure", "--node", n.address()}};
  REQUIRE(run_to_end(dir, {"certs", "init", dir / "foreign"}).status == 0);
  auto foreign = client_files(dir / "foreign");
  tls_files impostor{good.ca, foreign.certificate, foreign.key};

  // Raw TLS: no certificate at all, one signed by another CA.
  {
    tls_client peer{n.port(), std::nullopt};
    CHECK_FALSE(peer.handshake_ok());
  }
  {
    tls_client peer{n.port(), impostor};
    CHECK_FALSE(peer.handshake_ok());
  }
  {
    // TLS 1.3: the client may finish its side before the node has checked
    // its certificate; the node refuses it all the same and closes (a write
    // may already fail on the node's alert).
    tls_client peer{n.port(), impostor, TLS1_3_VERSION};
    peer.send(basp_header(2, 16));
    CHECK(peer.closed_by_node(5s));
  }
  // CAF clients through CAF's OpenSSL module.
  CHECK_FALSE(caf_client_served(n.port(), foreign));
  CHECK_FALSE(caf_client_served(n.port(), impostor));
  // The CLI.
  auto r = n.cmd({"status", "--certs", dir / "foreign"});
  CHECK(r.status == 3);
  CHECK(r.err.find("cannot reach the node at " + n.address()) !=
        std::string::npos);
  r = n.cmd({"submit", example("demo-crash.json")},
            {"TASKSUP_CERTS=" + (dir / "foreign")});
  CHECK(r.status == 3);
  CHECK(plain.wait(30s) == 3);
  CHECK(plain.err().find("cannot reach the node") != std::string::npos);

  // The node is up, and a client with the node's certificates is served;
  // so is one showing the node certificate (a worker joining a coordinator).
  CHECK(caf_client_served(n.port(), good));
  auto certs = node_certs(dir);
  CHECK(caf_client_served(
    n.port(), {certs + "/ca.crt", certs + "/node.crt", certs + "/node.key"}));
  CHECK(n.serves());
  CHECK(n.cmd({"status", "demo-crash"}).status != 0);
  CHECK(n.log_lines_with("refused a TLS connection from 127.0.0.1:") >= 1);
}

TEST_CASE("tls: the CLI names a certificate file it cannot use") {
  scratch dir;
  tls_node n{dir};
  auto r = n.cmd({"status", "--certs", dir / "nowhere"});
  CHECK(r.status == 3);
  CHECK(r.err.find(dir / "nowhere/ca.crt") != std::string::npos);
  CHECK(r.err.find("No such file") != std::string::npos);
  // The node's directory given explicitly works like the default.
  CHECK(n.cmd({"status", "--certs", node_certs(dir)}).status == 0);
}

TEST_CASE("tls: another local user cannot use a node's default "
          "certificates") {
  auto other = other_user();
  if (!other) {
    WARN("skipped: running a command as a second user needs root");
    return;
  }
  auto [other_uid, other_gid] = *other;
  auto uid = std::to_string(other_uid);
  auto gid = std::to_string(other_gid);
  scratch dir;
  // The other user may walk into the scratch directory: only the node's
  // own file modes protect its certificates.
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  tls_node n{dir};
  auto certs = node_certs(dir);
  CHECK(mode_of(certs) == 0700);
  for (auto* key : {"/ca.key", "/node.key", "/client.key"})
    CHECK(mode_of(certs + key) == 0600);
  int runs = 0;
  auto as_other = [&](std::vector<std::string> args,
                      const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv{"--reuid=" + uid, "--regid=" + gid,
                                  "--clear-groups", "--", TASKSUP_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    tasksup_child c{dir,  "other-" + std::to_string(++runs),
                    argv, "/dev/null",
                    env,  "/usr/bin/setpriv"};
    finished f;
    f.status = c.wait(30s);
    f.out = c.out();
    f.err = c.err();
    return f;
  };
  // The way the node's own user finds them (the same state directory).
  auto r = as_other({"status", "--node", n.address()});
  INFO(r.err);
  CHECK(r.status == 3);
  CHECK(r.err.find(certs) != std::string::npos);
  CHECK(r.err.find("Permission denied") != std::string::npos);
  r = as_other({"submit", example("demo-crash.json"), "--node", n.address(),
                "--certs", certs});
  CHECK(r.status == 3);
  // With a CA of its own.
  auto own = dir / "other";
  REQUIRE(::mkdir(own.c_str(), 0700) == 0);
  REQUIRE(::chown(own.c_str(), other_uid, other_gid) == 0);
  r = as_other({"certs", "init", own + "/certs"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  std::vector<std::string> own_env{"TASKSUP_CERTS=" + own + "/certs"};
  r = as_other({"submit", example("demo-crash.json"), "--node", n.address()},
               own_env);
  CHECK(r.status == 3);
  r = as_other({"stop", "demo-crash", "--node", n.address()}, own_env);
  CHECK(r.status == 3);
  r = as_other({"status", "--node", n.address()}, own_env);
  CHECK(r.status == 3);
  CHECK(r.out.empty());
  // Nothing was submitted; the node's user is served.
  CHECK(n.serves());
  CHECK(n.cmd({"status", "demo-crash"}).status != 0);
  CHECK(n.log_lines_with("refused a TLS connection") >= 1);
}

TEST_CASE("tls: garbage on the port loses its connection, the node serves on "
          "and logs refusals at a bounded rate") {
  scratch dir;
  tls_node n{dir};
  auto start = steady::now();
  auto hello = client_hello();
  REQUIRE(hello.size() > 40);
  REQUIRE(hello[0] == 0x16); // a handshake record
  // Slow ones first: they wait for the handshake timeout (10 s).
  int truncated = loopback_connect(n.port());
  REQUIRE(truncated >= 0);
  send_raw(truncated, hello.substr(0, hello.size() / 2));
  int silent = loopback_connect(n.port());
  REQUIRE(silent >= 0);
  send_raw(silent, hello);
  int idle = loopback_connect(n.port());
  REQUIRE(idle >= 0);

  std::mt19937 rng{7};
  auto random_bytes = [&](std::size_t n_bytes) {
    std::string out(n_bytes, '\0');
    for (auto& c : out)
      c = static_cast<char>(rng());
    return out;
  };
  // Each of these is refused at once.
  std::vector<std::string> garbage{
    random_bytes(64 * 1024),
    // A handshake record announcing 65,535 bytes (TLS allows 16 KiB + 2 KiB).
    std::string{"\x16\x03\x03\xff\xff", 5} + random_bytes(1024),
    // A record of a content type TLS does not have.
    std::string{"\x63\x03\x03\x00\x10", 5} + random_bytes(16),
    "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    // A BASP header in the clear.
    basp_header(2, 0xFFFFFFFFu),
  };
  for (auto& bytes : garbage) {
    int fd = loopback_connect(n.port());
    REQUIRE(fd >= 0);
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    CHECK(raw_closed_by_node(fd, 5s));
    ::close(fd);
  }
  // A flood of refusals is logged as one line, not one per connection.
  for (int i = 0; i < 200; ++i) {
    int fd = loopback_connect(n.port());
    REQUIRE(fd >= 0);
    auto bytes = random_bytes(64);
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    CHECK(raw_closed_by_node(fd, 5s));
    ::close(fd);
  }
  // Inside TLS, with the node's own client certificate: an unknown BASP
  // operation and an oversized frame are dropped too.
  auto good = client_files(node_certs(dir));
  {
    tls_client peer{n.port(), good};
    REQUIRE(peer.handshake_ok());
    REQUIRE(peer.send(basp_header(0xEE, 0) + random_bytes(64)));
    CHECK(peer.closed_by_node(5s));
  }
  {
    tls_client peer{n.port(), good};
    REQUIRE(peer.handshake_ok());
    REQUIRE(peer.send(basp_header(2, 0x7FFFFFFF)));
    CHECK(peer.closed_by_node(5s));
  }
  // Peers that leave right after the handshake: the node's own writes to
  // them (CAF's handshake) fail, and must not take the node down.
  for (int i = 0; i < 20; ++i) {
    tls_client peer{n.port(), good};
    CHECK(peer.handshake_ok());
  }
  CHECK(n.serves());
  // The handshakes that never complete end at the timeout.
  CHECK(raw_closed_by_node(truncated, 20s));
  CHECK(raw_closed_by_node(silent, 20s));
  CHECK(raw_closed_by_node(idle, 20s));
  for (int fd : {truncated, silent, idle})
    ::close(fd);
  CHECK(n.serves());
  CHECK(n.rss_kb() < 150 * 1024);
  // At most one line per 10 s (a first at once, then summaries).
  auto seconds =
    std::chrono::duration_cast<std::chrono::seconds>(steady::now() - start)
      .count();
  auto lines = n.log_lines_with("refused");
  INFO(n.process().err());
  CHECK(lines >= 1);
  CHECK(lines <= static_cast<std::size_t>(2 + seconds / 10));
}

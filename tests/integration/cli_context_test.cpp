// The node a command talks to, found as a user expects (issue 36): a node
// with its own state directory is reachable without flags, a command with
// no node to talk to says so, a refused certificate names the directory it
// came from, and a node under systemd says when it is ready and stopping.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <filesystem>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

/// The environment of a user who set nothing: no $TASKSUP_STATE_DIR, and
/// the default state directory and config home in the scratch directory
/// (never the machine's own /var/lib/tasksup: tests run as root).
std::vector<std::string> plain_user(const scratch& dir) {
  return {"TASKSUP_STATE_DIR=", "TASKSUP_NODE=", "TASKSUP_CERTS=",
          "XDG_STATE_HOME=" + (dir / "xdg-state"),
          "XDG_CONFIG_HOME=" + (dir / "xdg-config")};
}

/// A node started as `serve --listen 127.0.0.1:0 ARGS...` with `env`.
struct plain_node {
  plain_node(const scratch& dir, const std::vector<std::string>& args,
             const std::vector<std::string>& env, const std::string& name)
    : child(dir, name, with_defaults(dir, args), "/dev/null", env) {
    auto port = listening_port(child);
    if (!port)
      FAIL("the node did not start: " << child.err());
    address = "127.0.0.1:" + std::to_string(*port);
  }

  static std::vector<std::string>
  with_defaults(const scratch& dir, const std::vector<std::string>& args) {
    std::vector<std::string> out{"serve",          "--listen",   "127.0.0.1:0",
                                 "--config",       config_dir(), "--work-dir",
                                 dir / "node-work"};
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }

  tasksup_child child;
  std::string address;
};

/// A Unix datagram socket bound at `path`, as systemd's $NOTIFY_SOCKET.
class notify_socket {
public:
  explicit notify_socket(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof addr.sun_path);
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  notify_socket(const notify_socket&) = delete;
  notify_socket& operator=(const notify_socket&) = delete;
  ~notify_socket() { ::close(fd_); }

  /// The next datagram, waiting at most `limit`; empty when none came.
  std::string next(std::chrono::milliseconds limit) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(limit.count())) != 1)
      return {};
    char buf[4096];
    auto n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n))
                 : std::string{};
  }

  /// Datagrams until one contains `what` (returned), at most `limit` in
  /// all; every datagram seen is appended to `seen`.
  std::string until(const std::string& what, std::chrono::milliseconds limit,
                    std::vector<std::string>& seen) {
    auto deadline = steady::now() + limit;
    while (steady::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - steady::now());
      auto msg = next(left);
      if (msg.empty())
        continue;
      seen.push_back(msg);
      if (msg.find(what) != std::string::npos)
        return msg;
    }
    return {};
  }

private:
  int fd_ = -1;
};

} // namespace

TEST_CASE("serve: a node with its own state directory is the current node: "
          "commands reach it without --node or --state-dir") {
  scratch dir;
  auto env = plain_user(dir);
  auto own = dir / "own-state";
  plain_node n{dir, {"--state-dir", own}, env, "serve"};
  // It records itself once it answers, and says so.
  REQUIRE(eventually(
    [&] {
      return n.child.err().find("current node for this user's commands: " +
                                n.address) != std::string::npos;
    },
    30s));
  // It says which state directory it uses, and that it made it.
  CHECK(n.child.err().find("created state directory " + own) !=
        std::string::npos);
  auto recorded = slurp(dir / "xdg-config/tasksup/current-node");
  CHECK(recorded.find(own) != std::string::npos);
  auto recorded_mode =
    std::filesystem::status(dir / "xdg-config/tasksup/current-node")
      .permissions() &
    std::filesystem::perms::all;
  CHECK(recorded_mode == (std::filesystem::perms::owner_read |
                          std::filesystem::perms::owner_write));

  // Over the control socket (the thin front program) and over TLS with
  // the node's own client certificate (tasksup-core): no flags at all.
  auto status = run_to_end(dir, {"status"}, 30s, env);
  INFO(status.err);
  CHECK(status.status == 0);
  CHECK(status.out == "no tasks\n");
  auto nodes = run_to_end(dir, {"nodes"}, 30s, env);
  INFO(nodes.err);
  CHECK(nodes.status == 0);
  auto submitted =
    run_to_end(dir, {"submit", example("demo-slow.json")}, 30s, env);
  CHECK(submitted.status == 0);
  auto described = run_to_end(dir, {"describe", "demo-slow"}, 30s, env);
  INFO(described.err);
  CHECK(described.status == 0);

  // `context` shows where that is, for scripts too.
  auto shown = run_to_end(dir, {"context"}, 30s, env);
  CHECK(shown.status == 0);
  CHECK(shown.out.find(n.address + " (the current node)") != std::string::npos);
  CHECK(shown.out.find(own + " (the current node)") != std::string::npos);
  auto only = run_to_end(dir, {"context", "--only", "state-dir"}, 30s, env);
  CHECK(only.out == own + "\n");

  // Flags and the environment come first: another state directory's
  // certificates are not this node's CA.
  auto other = run_to_end(dir, {"certs", "init", dir / "other-certs"});
  REQUIRE(other.status == 0);
  auto refused =
    run_to_end(dir, {"nodes"}, 30s,
               {"TASKSUP_STATE_DIR=" + (dir / "elsewhere"),
                "TASKSUP_CERTS=" + (dir / "other-certs"),
                "TASKSUP_NODE=", "XDG_CONFIG_HOME=" + (dir / "xdg-config")});
  CHECK(refused.status == 3);

  // A clean stop forgets the record: nothing names a node that is gone.
  n.child.signal(SIGTERM);
  REQUIRE(n.child.wait(60s) == 0);
  CHECK_FALSE(std::filesystem::exists(dir / "xdg-config/tasksup/current-node"));
}

TEST_CASE("cli: a node that refuses the certificates is named with the "
          "directory they came from and what to pass") {
  scratch dir;
  auto env = plain_user(dir);
  auto own = dir / "own-state";
  plain_node n{dir, {"--state-dir", own}, env, "serve"};
  REQUIRE(eventually(
    [&] {
      return std::filesystem::exists(dir / "xdg-config/tasksup/current-node");
    },
    30s));
  // The default state directory has a CA of its own, not the node's.
  auto mine = dir / "xdg-state/tasksup";
  REQUIRE(run_to_end(dir, {"certs", "init", mine + "/certs"}).status == 0);
  auto r =
    run_to_end(dir, {"nodes", "--node", n.address}, 30s,
               {"TASKSUP_STATE_DIR=" + mine,
                "TASKSUP_CERTS=", "XDG_CONFIG_HOME=" + (dir / "xdg-config")});
  INFO(r.err);
  CHECK(r.status == 3);
  CHECK(r.err.find("cannot reach the node at " + n.address) !=
        std::string::npos);
  CHECK(r.err.find(mine + " ($TASKSUP_STATE_DIR)") != std::string::npos);
  CHECK(r.err.find("--state-dir DIR") != std::string::npos);
  CHECK(r.err.find("TASKSUP_STATE_DIR=DIR") != std::string::npos);
  // The node recorded itself: the message names its state directory.
  CHECK(r.err.find("was started with --state-dir " + own) != std::string::npos);
  // With the node's state directory named, the same command gets in.
  auto ok =
    run_to_end(dir, {"nodes", "--node", n.address, "--state-dir", own}, 30s,
               {"TASKSUP_STATE_DIR=" + mine,
                "TASKSUP_CERTS=", "XDG_CONFIG_HOME=" + (dir / "xdg-config")});
  INFO(ok.err);
  CHECK(ok.status == 0);
}

TEST_CASE("cli: with no node listening, every client command says so, not "
          "that a certificate is missing") {
  scratch dir;
  auto node = "127.0.0.1:" + std::to_string(unused_port());
  // A state directory without certificates: no node ever ran there.
  auto env = plain_user(dir);
  for (auto cmd : std::vector<std::vector<std::string>>{
         {"status"},
         {"status", "x"},
         {"status", "--watch"},
         {"submit", example("demo-flaky.json")},
         {"events"},
         {"events", "--follow"},
         {"describe", "x"},
         {"wait", "x"},
         {"logs", "x"},
         {"stop", "x"},
         {"kill", "x"},
         {"retry-now", "x"},
         {"forget", "x"},
         {"nodes"},
         {"agents"}}) {
    cmd.push_back("--node");
    cmd.push_back(node);
    auto r = run_to_end(dir, cmd, 30s, env);
    INFO(cmd.front() << " " << cmd[1] << ": " << r.err);
    CHECK(r.status == 3);
    CHECK(r.err.find("cannot reach the node at " + node +
                     ": no tasksup node is listening there") !=
          std::string::npos);
    CHECK(r.err.find("certificate") == std::string::npos);
    CHECK(r.err.find("`tasksup serve`") != std::string::npos);
  }
}

TEST_CASE("serve: under systemd, READY=1 comes once the node answers, and "
          "STOPPING=1 on SIGTERM") {
  scratch dir;
  notify_socket sd{dir / "notify.sock"};
  tasksup_child child{dir,
                      "serve",
                      {"serve", "--listen", "127.0.0.1:0", "--config",
                       config_dir(), "--work-dir", dir / "node-work",
                       "--state-dir", dir / "state"},
                      "/dev/null",
                      {"NOTIFY_SOCKET=" + (dir / "notify.sock")}};
  std::vector<std::string> seen;
  auto ready = sd.until("READY=1", 60s, seen);
  INFO(child.err());
  REQUIRE_FALSE(ready.empty());
  CHECK(ready.find("MAINPID=" + std::to_string(child.pid())) !=
        std::string::npos);
  CHECK(ready.find("STATUS=listening on 127.0.0.1:") != std::string::npos);
  // Ready means ready: the node answers at once.
  auto port = listening_port(child, 1s);
  REQUIRE(port);
  auto r =
    run_to_end(dir, {"nodes", "--node", "127.0.0.1:" + std::to_string(*port)});
  CHECK(r.status == 0);
  CHECK(seen.size() == 1); // nothing before READY=1 said it was ready
  child.signal(SIGTERM);
  auto stopping = sd.until("STOPPING=1", 30s, seen);
  CHECK_FALSE(stopping.empty());
  CHECK(child.wait(60s) == 0);
}

TEST_CASE("status: --outcome lists the finished tasks with that outcome, an "
          "unknown one is refused with the valid ones") {
  scratch dir;
  plain_node n{dir, {"--state-dir", dir / "state"}, {}, "serve"};
  auto failing =
    dir.write("fails.json", R"({"id": "fails", "prompt": "p",
    "agent_selection": {"agents": [{"agent_id": "k", "agent_cli": ")" +
                              example("agents/auth-fail-agent") + R"("}]}})");
  auto passing =
    dir.write("passes.json", R"({"id": "passes", "prompt": "p",
    "agent_selection": {"agents": [{"agent_id": "f", "agent_cli": ")" +
                               example("agents/flaky-agent") +
                               R"(", "cli_flags": "--succeed-at 1"}]}})");
  auto cmd = [&](std::vector<std::string> args) {
    args.push_back("--node");
    args.push_back(n.address);
    return run_to_end(dir, args);
  };
  REQUIRE(cmd({"submit", failing, passing}).status == 0);
  REQUIRE(cmd({"wait", "fails"}).status != -1);
  REQUIRE(cmd({"wait", "passes"}).status == 0);
  auto failed = cmd({"status", "--outcome", "failed"});
  INFO(failed.err);
  CHECK(failed.status == 0);
  CHECK(failed.out.find("fails") != std::string::npos);
  CHECK(failed.out.find("passes") == std::string::npos);
  auto both = cmd(
    {"status", "--state", "done", "--outcome", "succeeded,failed", "--json"});
  // One record per line (JSON Lines), in id order.
  auto records = json_lines(both.out);
  REQUIRE(records.size() == 2);
  CHECK(records[0].at("task_id") == "fails");
  CHECK(records[1].at("task_id") == "passes");
  auto none = cmd({"status", "--outcome", "stopped"});
  CHECK(none.out == "no tasks match the filter\n");
  auto bad = cmd({"status", "--outcome", "crashed"});
  CHECK(bad.status == 2);
  CHECK(bad.err.find("expected succeeded, failed or stopped; got 'crashed'") !=
        std::string::npos);
}

TEST_CASE("status: --watch prints the tasks that change until SIGTERM, and "
          "ends by itself when the watched task is done") {
  scratch dir;
  plain_node n{dir, {"--state-dir", dir / "state"}, {}, "serve"};
  tasksup_child watch{dir, "watch", {"status", "--watch", "--node", n.address}};
  REQUIRE(eventually([&] { return watch.out().find("no tasks") == 0; }, 30s));
  REQUIRE(
    run_to_end(dir, {"submit", example("demo-slow.json"), "--node", n.address})
      .status == 0);
  // The change is printed as it happens, with no request from us.
  CHECK(eventually(
    [&] { return watch.out().find("demo-slow") != std::string::npos; }, 30s));
  CHECK(eventually(
    [&] { return watch.out().find("running") != std::string::npos; }, 30s));
  watch.signal(SIGTERM);
  INFO(watch.err());
  CHECK(watch.wait(30s) == 0);

  // Watching one task: done is the end.
  REQUIRE(
    run_to_end(dir, {"submit", example("demo-flaky.json"), "--node", n.address})
      .status == 0);
  auto one = run_to_end(
    dir, {"status", "demo-flaky", "--watch", "--node", n.address}, 60s);
  INFO(one.err);
  CHECK(one.status == 0);
  CHECK(one.out.find("done") != std::string::npos);
  CHECK(one.out.find("succeeded") != std::string::npos);
}

// The node's local control socket (apps/local_control.hpp): `tasksup status`
// and `tasksup submit` on the node's machine go over it, without the actor
// system or TLS, and print exactly what they print over the TCP port; the
// socket serves only the node's user, a socket planted by another user is
// never used, a stale one is replaced, and bad requests do no harm.
//
// "Alone" below is a copy of the tasksup program in a directory without
// tasksup-core: it can answer only on the socket path (anything else would
// have to exec tasksup-core), so a command it completes went that way.

#include "../socket_read.hpp"
#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

/// A node on a loopback port (a free one, or `port`), waited for until its
/// control socket is there.
class socket_node {
public:
  socket_node(const scratch& dir, const std::string& name, int port = 0)
    : dir_(dir),
      child_(dir, name,
             {"serve", "--listen", "127.0.0.1:" + std::to_string(port),
              "--config", config_dir(), "--work-dir", dir / "node-work",
              "--state-dir", dir / "state"}) {
    auto p = listening_port(child_);
    if (!p)
      FAIL("the node did not start: " << child_.err());
    port_ = *p;
    if (!eventually(
          [&] {
            return child_.err().find("control socket " + socket_path()) !=
                   std::string::npos;
          },
          20s))
      FAIL("no control socket: " << child_.err());
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

  std::string socket_path() const {
    return dir_ / ("state/control-" + std::to_string(port_) + ".sock");
  }

  /// Runs the whole tasksup program (either path) against this node.
  finished cmd(std::vector<std::string> args,
               const std::vector<std::string>& env = {}) {
    args.push_back("--node");
    args.push_back(address());
    return run_to_end(dir_, args, 30s, env);
  }

  /// The same over the TCP port: naming the credentials chooses it.
  finished tcp(std::vector<std::string> args) {
    return cmd(std::move(args), {"TASKSUP_CERTS=" + (dir_ / "state/certs")});
  }

  tasksup_child& process() { return child_; }

private:
  const scratch& dir_;
  tasksup_child child_;
  int port_ = 0;
};

/// A copy of the tasksup program with no tasksup-core beside it.
std::string alone_program(const scratch& dir) {
  auto path = dir / "alone/tasksup";
  std::filesystem::create_directories(dir / "alone");
  std::filesystem::copy_file(TASKSUP_BINARY, path);
  return path;
}

/// Runs `alone` with `args` (and `stdin_path`) to its end.
finished run_alone(const scratch& dir, const std::string& alone,
                   const std::vector<std::string>& args,
                   const std::string& stdin_path = "/dev/null") {
  static int counter = 0;
  tasksup_child c{
    dir, "alone-" + std::to_string(++counter), args, stdin_path, {}, alone};
  finished f;
  f.status = c.wait(30s);
  f.out = c.out();
  f.err = c.err();
  return f;
}

/// A connected Unix socket to `path` (-1 when it cannot connect).
int unix_connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Sends `request` on a fresh connection to `path` and returns the whole
/// answer.
std::string ask(const std::string& path, const std::string& request) {
  int fd = unix_connect(path);
  REQUIRE(fd >= 0);
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  auto answer = read_all(fd);
  ::close(fd);
  return answer;
}

/// A table's lines with its AGE column cut out (the rest of each row, and
/// the lines under the table, whole).
std::vector<std::string> rows_of(const std::string& table) {
  std::vector<std::string> out;
  std::istringstream in{table};
  std::string line;
  std::size_t age = std::string::npos;
  std::size_t next = std::string::npos;
  while (std::getline(in, line)) {
    if (line.rfind("TASK", 0) == 0) {
      age = line.find("AGE");
      next = line.find("NEXT RETRY");
    }
    if (age != std::string::npos && next != std::string::npos &&
        line.size() > next && line.rfind("TASK", 0) != 0 &&
        line.find(' ') < age)
      line = line.substr(0, age) + line.substr(next);
    out.push_back(line);
  }
  return out;
}

std::string post_submit(const std::string& body) {
  return "POST /v1/submit HTTP/1.1\r\nHost: x\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

} // namespace

TEST_CASE("control socket: status, submit and the control commands on the "
          "node's machine use it and print what the TCP port's path prints") {
  scratch dir;
  socket_node n{dir, "serve"};
  struct stat st {};
  REQUIRE(::lstat(n.socket_path().c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_uid == ::geteuid());

  auto alone = alone_program(dir);
  auto node = std::vector<std::string>{"--node", n.address()};
  auto with_node = [&](std::vector<std::string> args) {
    args.insert(args.end(), node.begin(), node.end());
    return args;
  };
  // A good task, an unreadable file: the id, the file named, exit 2.
  auto sub = run_alone(
    dir, alone,
    with_node({"submit", example("demo-crash.json"), dir / "missing.json"}));
  CHECK(sub.status == 2);
  CHECK(sub.out == "demo-crash\n");
  CHECK(sub.err.find(dir / "missing.json") != std::string::npos);
  REQUIRE(eventually(
    [&] {
      return run_alone(dir, alone, with_node({"status", "demo-crash"}))
               .out.find(" done ") != std::string::npos;
    },
    60s));
  // The same task again: rejected by the node, in its words, both ways
  // (once it has finished: the words say whether it has).
  auto again =
    run_alone(dir, alone, with_node({"submit", example("demo-crash.json")}));
  auto again_tcp = n.tcp({"submit", example("demo-crash.json")});
  CHECK(again.status == 2);
  CHECK(again.err.find("rejected by the node: a task with id 'demo-crash' "
                       "exists already") != std::string::npos);
  CHECK(again.status == again_tcp.status);
  CHECK(again.out == again_tcp.out);
  CHECK(again.err == again_tcp.err);

  // A finished task's record is stable: both paths print the same bytes.
  for (auto args : std::vector<std::vector<std::string>>{
         {"status", "--json"},
         {"status", "demo-crash", "--json"},
         {"status", "--state", "running", "--json"},
         {"status", "--state", "running"},
         {"status", "no-such-task"}}) {
    INFO(args[0] << " " << args[1]);
    auto local = run_alone(dir, alone, with_node(args));
    auto tcp = n.tcp(args);
    CHECK(local.status == tcp.status);
    CHECK(local.out == tcp.out);
    CHECK(local.err == tcp.err);
  }
  auto unknown = run_alone(dir, alone, with_node({"status", "no-such-task"}));
  CHECK(unknown.status == 3);
  CHECK(unknown.err == "tasksup status: no task with id 'no-such-task'\n");
  auto table = run_alone(dir, alone, with_node({"status", "demo-crash"}));
  CHECK(table.status == 0);
  CHECK(table.out.rfind("TASK", 0) == 0);
  CHECK(table.out.find("submitted:") != std::string::npos);
  CHECK(table.out.find("last decision:") != std::string::npos);

  // The control commands: no effect on a finished task (exit 1), an
  // unknown task refused (exit 3), the same both ways.
  for (auto verb : {"stop", "kill", "retry-now", "fallback-now"}) {
    for (auto id : {"demo-crash", "no-such-task"}) {
      INFO(verb << " " << id);
      auto local = run_alone(dir, alone, with_node({verb, id}));
      auto tcp = n.tcp({verb, id});
      CHECK(local.status == (id == std::string{"demo-crash"} ? 1 : 3));
      CHECK(local.status == tcp.status);
      CHECK(local.out == tcp.out);
      CHECK(local.err == tcp.err);
    }
  }
  // And one that takes effect: a running task stopped over the socket.
  REQUIRE(
    run_alone(dir, alone, with_node({"submit", example("demo-slow.json")}))
      .status == 0);
  REQUIRE(eventually(
    [&] {
      return run_alone(dir, alone, with_node({"status", "demo-slow"}))
               .out.find(" running ") != std::string::npos;
    },
    60s));
  auto stop = run_alone(dir, alone, with_node({"stop", "demo-slow"}));
  CHECK(stop.status == 0);
  CHECK(stop.out == "stopping demo-slow\n");
  CHECK(eventually(
    [&] {
      return run_alone(dir, alone, with_node({"status", "demo-slow"}))
               .out.find("stopped") != std::string::npos;
    },
    60s));

  // The whole program with the default node ($TASKSUP_NODE) too.
  auto plain = run_to_end(dir, {"status", "demo-crash", "--json"}, 30s,
                          {"TASKSUP_NODE=" + n.address()});
  CHECK(plain.status == 0);
  CHECK(plain.out.find("\"task_id\":\"demo-crash\"") != std::string::npos);
}

TEST_CASE("control socket: tasks from stdin go in batches, in input order, "
          "each bad line named") {
  scratch dir;
  socket_node n{dir, "serve"};
  auto alone = alone_program(dir);
  // 150 lines, more than two batches: line 40 is not JSON, line 100 repeats
  // the id of line 1, line 120 is blank (skipped).
  std::ofstream lines{dir / "tasks.jsonl"};
  std::string expected;
  for (int i = 1; i <= 150; ++i) {
    auto id = "t" + std::to_string(i);
    if (i == 40) {
      lines << "{not json\n";
    } else if (i == 100) {
      lines << R"({"id": "t1", "prompt": "again"})" << '\n';
    } else if (i == 120) {
      lines << "   \n";
    } else {
      lines << R"({"id": ")" << id << R"(", "prompt": "x"})" << '\n';
      expected += id + "\n";
    }
  }
  lines.close();
  auto r = run_alone(dir, alone, {"submit", "-", "--node", n.address()},
                     dir / "tasks.jsonl");
  CHECK(r.status == 2);
  CHECK(r.out == expected);
  CHECK(r.err.find("<stdin>:40:") != std::string::npos);
  CHECK(r.err.find("<stdin>:100: rejected by the node: a task with id 't1' "
                   "exists already") != std::string::npos);
  CHECK(r.err.find("<stdin>:120") == std::string::npos);
  // Every accepted task is on the node.
  auto all = n.tcp({"status", "--json"});
  REQUIRE(all.status == 0);
  for (auto id : {"\"t1\"", "\"t39\"", "\"t41\"", "\"t150\""})
    CHECK(all.out.find(std::string{"\"task_id\":"} + id) != std::string::npos);
}

TEST_CASE("status pages: --limit and --after walk the tasks in id order, "
          "the line under a page names the next, and the socket and the TCP "
          "port print the same") {
  scratch dir;
  socket_node n{dir, "serve"};
  auto alone = alone_program(dir);
  // Five quick tasks, submitted out of order; p3 fails.
  std::ofstream lines{dir / "tasks.jsonl"};
  for (auto id : {"p4", "p1", "p5", "p3", "p2"})
    lines << R"({"id": ")" << id << R"(", "prompt": "x", )"
          << R"("agent_selection": {"agents": [{"agent_id": ")"
          << (id == std::string{"p3"} ? "f" : "t") << R"(", "agent_cli": ")"
          << (id == std::string{"p3"} ? "/bin/false" : "/bin/true")
          << R"("}]}, "supervisor": {"max_retries_per_agent": 0}})" << '\n';
  lines.close();
  REQUIRE(run_alone(dir, alone, {"submit", "-", "--node", n.address()},
                    dir / "tasks.jsonl")
            .status == 0);
  REQUIRE(eventually(
    [&] {
      auto r = n.tcp({"status", "--state", "done", "--json"});
      return std::count(r.out.begin(), r.out.end(), '\n') == 5;
    },
    60s));
  auto both = [&](std::vector<std::string> args) {
    auto node = std::vector<std::string>{"--node", n.address()};
    auto with_node = args;
    with_node.insert(with_node.end(), node.begin(), node.end());
    auto local = run_alone(dir, alone, with_node);
    auto tcp = n.tcp(args);
    INFO(args[0] << " " << args[1] << " " << args[2]);
    CHECK(local.status == tcp.status);
    CHECK(local.err == tcp.err);
    // A table's AGE moves on between the two: its rows are compared, a
    // record (JSON) whole.
    if (std::find(args.begin(), args.end(), "--json") != args.end())
      CHECK(local.out == tcp.out);
    else
      CHECK(rows_of(local.out) == rows_of(tcp.out));
    return tcp;
  };
  auto rows = [](const std::string& out) {
    std::vector<std::string> ids;
    for (auto& row : rows_of(out))
      if (row.rfind("p", 0) == 0)
        ids.push_back(row.substr(0, row.find(' ')));
    return ids;
  };
  auto first = both({"status", "--limit", "2"});
  CHECK(first.status == 0);
  CHECK(rows(first.out) == std::vector<std::string>{"p1", "p2"});
  CHECK_THAT(first.out,
             Catch::EndsWith("\n2 of 5 tasks; 3 more: tasksup status "
                             "--limit 2 --after p2\n"));
  auto second = both({"status", "--limit", "2", "--after", "p2"});
  CHECK(rows(second.out) == std::vector<std::string>{"p3", "p4"});
  CHECK_THAT(second.out, Catch::EndsWith("1 more: tasksup status --limit 2 "
                                         "--after p4\n"));
  auto last = both({"status", "--limit", "2", "--after", "p4"});
  CHECK(rows(last.out) == std::vector<std::string>{"p5"});
  CHECK(last.out.find("more:") == std::string::npos);
  // Filtered on the node: the count is of the tasks that match.
  auto ok = both({"status", "--outcome", "succeeded", "--limit", "3"});
  CHECK(rows(ok.out) == std::vector<std::string>{"p1", "p2", "p4"});
  CHECK_THAT(ok.out, Catch::EndsWith("3 of 4 matching tasks; 1 more: tasksup "
                                     "status --limit 3 --outcome succeeded "
                                     "--after p4\n"));
  auto by_agent = both({"status", "--agent", "f", "--json"});
  CHECK(by_agent.out.find("\"task_id\":\"p3\"") != std::string::npos);
  CHECK(std::count(by_agent.out.begin(), by_agent.out.end(), '\n') == 1);
  // JSON: one record per line on stdout, the rest of the page on stderr.
  auto js = both({"status", "--json", "--limit", "2"});
  auto records = json_lines(js.out);
  REQUIRE(records.size() == 2);
  CHECK(records[0].at("task_id") == "p1");
  CHECK(records[1].at("task_id") == "p2");
  CHECK_THAT(js.err, Catch::Contains("3 more: tasksup status --limit 2 "
                                     "--after p2"));
  // Bad values are named (the whole program says so).
  auto bad = n.tcp({"status", "--limit", "many"});
  CHECK(bad.status == 2);
  CHECK_THAT(bad.err, Catch::Contains("--limit"));
  auto long_after = n.tcp({"status", "--after", std::string(65, 'x')});
  CHECK(long_after.status == 2);
  CHECK_THAT(long_after.err, Catch::Contains("--after: a task id"));
}

TEST_CASE("status without --limit asks a chunk at a time: 2,500 queued "
          "tasks come back once each, in id order, both ways") {
  scratch dir;
  socket_node n{dir, "serve"};
  auto alone = alone_program(dir);
  // More than one chunk (status_chunk, 2,000); all but a few stay queued
  // behind agents that sleep.
  constexpr int count = 2500;
  auto agent = dir.write_script("sleeper", "#!/bin/sh\nexec sleep 600\n");
  std::ofstream lines{dir / "tasks.jsonl"};
  for (int i = count; i >= 1; --i)
    lines << R"({"id": "q)" << 10000 + i << R"(", "prompt": "x", )"
          << R"("agent_selection": {"agents": [{"agent_id": "s", )"
          << R"("agent_cli": ")" << agent << R"("}]}})" << '\n';
  lines.close();
  REQUIRE(run_alone(dir, alone, {"submit", "-", "--node", n.address()},
                    dir / "tasks.jsonl")
            .status == 0);
  auto check = [&](const finished& r) {
    INFO(r.err);
    REQUIRE(r.status == 0);
    auto records = json_lines(r.out);
    REQUIRE(records.size() == count);
    for (int i = 0; i < count; ++i)
      CHECK(records[i].at("task_id").as_string() ==
            ("q" + std::to_string(10001 + i)).c_str());
    CHECK(r.err.empty());
  };
  // Four run (the node's four slots), the rest wait for one.
  REQUIRE(eventually(
    [&] {
      auto r = n.tcp({"status", "--state", "running", "--json"});
      return json_lines(r.out).size() == 4;
    },
    60s));
  auto queued = n.tcp({"status", "--state", "queued", "--json"});
  CHECK(json_lines(queued.out).size() == count - 4);
  check(run_alone(dir, alone, {"status", "--json", "--node", n.address()}));
  check(n.tcp({"status", "--json"}));
  // The table holds them all too, and no line about more.
  auto table = n.tcp({"status"});
  // (A queued task's row has a "waits:" line under the table too.)
  auto rows = rows_of(table.out);
  CHECK(std::count_if(rows.begin(), rows.end(), [](const std::string& r) {
          return r.rfind("q1", 0) == 0 &&
                 r.find(" waits: ") == std::string::npos;
        }) == count);
  CHECK(table.out.find("more:") == std::string::npos);
}

TEST_CASE("control socket: a killed node's socket is stale, commands use the "
          "TCP port, and a restarted node replaces it") {
  scratch dir;
  int port = 0;
  std::string path;
  {
    socket_node n{dir, "first"};
    port = n.port();
    path = n.socket_path();
    n.process().signal(SIGKILL);
    REQUIRE(n.process().wait(20s) == 128 + SIGKILL);
  }
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0); // left behind
  auto addr = "127.0.0.1:" + std::to_string(port);
  auto r = run_to_end(dir, {"status", "--node", addr});
  CHECK(r.status == 3);
  CHECK(r.err.find("cannot reach the node at " + addr) != std::string::npos);
  socket_node again{dir, "second", port};
  auto alone = alone_program(dir);
  auto s = run_alone(dir, alone, {"status", "--node", addr});
  CHECK(s.status == 0);
  CHECK(s.out == "no tasks\n");
  // A node that stops removes its socket.
  again.process().signal(SIGTERM);
  REQUIRE(again.process().wait(30s) == 0);
  CHECK(::lstat(path.c_str(), &st) != 0);
}

TEST_CASE("control socket: bad requests get 4xx and change nothing, and the "
          "node serves on") {
  scratch dir;
  socket_node n{dir, "serve"};
  auto path = n.socket_path();
  auto status_of = [](const std::string& answer) {
    return answer.substr(0, 12);
  };
  CHECK(status_of(ask(path, post_submit("not json"))) == "HTTP/1.1 400");
  CHECK(status_of(ask(path, post_submit(R"({"tasks":[1]})"))) ==
        "HTTP/1.1 400");
  CHECK(status_of(ask(path, post_submit(R"({"tasks":[]})"))) == "HTTP/1.1 400");
  CHECK(status_of(ask(path, post_submit(R"({"replace":1,"tasks":["{}"]})"))) ==
        "HTTP/1.1 400");
  std::string many = R"({"tasks":[)";
  for (int i = 0; i < 65; ++i)
    many += std::string{i ? "," : ""} + R"("{\"id\":\"m)" + std::to_string(i) +
            R"(\",\"prompt\":\"x\"}")";
  many += "]}";
  CHECK(status_of(ask(path, post_submit(many))) == "HTTP/1.1 400");
  CHECK(status_of(ask(path, "GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n")) ==
        "HTTP/1.1 404");
  CHECK(status_of(ask(path, "GET /v1/submit HTTP/1.1\r\nHost: x\r\n\r\n")) ==
        "HTTP/1.1 405");
  CHECK(status_of(ask(path, "POST /v1/submit HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 999999999999\r\n\r\n")) ==
        "HTTP/1.1 413");
  // A task the node refuses is answered per task, in the batch's answer.
  auto mixed =
    ask(path, post_submit(R"({"tasks":["{\"id\":\"ok\",)"
                          R"(\"prompt\":\"x\"}","{\"bogus\":1}"]})"));
  CHECK(status_of(mixed) == "HTTP/1.1 200");
  CHECK(mixed.find(R"([{"id":"ok"},{"rejected":)") != std::string::npos);
  // Nothing of the bad requests reached the node's tasks.
  auto all = n.tcp({"status", "--json"});
  REQUIRE(all.status == 0);
  CHECK(all.out.find("\"task_id\":\"ok\"") != std::string::npos);
  CHECK(all.out.find("\"task_id\":\"m0\"") == std::string::npos);
}

TEST_CASE("control socket: only the node's user is served, and a socket "
          "another user planted is never used") {
  auto other = other_user();
  if (!other) {
    WARN("skipped: a second user needs root");
    return;
  }
  auto [uid, gid] = *other;
  scratch dir;
  socket_node n{dir, "serve"};
  // Only the peer check stands in the way.
  REQUIRE(::chmod(dir.path().c_str(), 0755) == 0);
  REQUIRE(::chmod((dir / "state").c_str(), 0755) == 0);
  REQUIRE(::chmod(n.socket_path().c_str(), 0666) == 0);
  int out[2];
  REQUIRE(::pipe(out) == 0);
  // The child only makes system calls (no allocation after fork).
  auto socket_path = n.socket_path();
  auto pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The other user connects: the node answers 403 at once, before any
    // request, and closes.
    if (::setgid(gid) != 0 || ::setuid(uid) != 0)
      ::_exit(10);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un to{};
    to.sun_family = AF_UNIX;
    std::strncpy(to.sun_path, socket_path.c_str(), sizeof to.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0)
      ::_exit(11);
    char buf[256];
    auto got = ::recv(fd, buf, sizeof buf, 0);
    if (got > 0 && ::write(out[1], buf, static_cast<std::size_t>(got)) < 0)
      ::_exit(13);
    ::_exit(0);
  }
  ::close(out[1]);
  std::string answer;
  char buf[256];
  for (ssize_t got; (got = ::read(out[0], buf, sizeof buf)) > 0;)
    answer.append(buf, static_cast<std::size_t>(got));
  ::close(out[0]);
  int ws = 0;
  REQUIRE(::waitpid(pid, &ws, 0) == pid);
  CHECK(WEXITSTATUS(ws) == 0);
  CHECK(answer.rfind("HTTP/1.1 403", 0) == 0);

  // A socket in the state directory for a port no node serves, made by the
  // other user: the command does not connect to it.
  auto port = unused_port();
  auto planted = dir / ("state/control-" + std::to_string(port) + ".sock");
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, planted.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) ==
          0);
  REQUIRE(::listen(listener, 8) == 0);
  REQUIRE(::chown(planted.c_str(), uid, gid) == 0);
  auto addr_text = "127.0.0.1:" + std::to_string(port);
  auto r = run_to_end(dir, {"status", "--node", addr_text});
  CHECK(r.status == 3);
  CHECK(r.err.find("cannot reach the node at " + addr_text) !=
        std::string::npos);
  CHECK(::accept(listener, nullptr, nullptr) < 0); // nobody connected
  CHECK(errno == EAGAIN);
  ::close(listener);
  ::unlink(planted.c_str());

  // A socket file that is this user's, served by the other user's process
  // (swapped in after the command looked at the file, say): the command
  // connects, sees who serves it, and sends nothing. The directory is one
  // everybody may write to (sticky, like /tmp).
  REQUIRE(::chmod((dir / "state").c_str(), 01777) == 0);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  auto server = ::fork();
  REQUIRE(server >= 0);
  if (server == 0) {
    // The other user's server: 0 when nothing came on the connection, 1
    // when the command sent something; SIGALRM if it never connected.
    ::alarm(20);
    if (::setgid(gid) != 0 || ::setuid(uid) != 0)
      ::_exit(10);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd, 8) != 0)
      ::_exit(11);
    if (::write(ready[1], "r", 1) != 1)
      ::_exit(12);
    int conn = ::accept(fd, nullptr, nullptr);
    if (conn < 0)
      ::_exit(13);
    char byte;
    ::_exit(::read(conn, &byte, 1) > 0 ? 1 : 0);
  }
  ::close(ready[1]);
  char byte;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  REQUIRE(::chown(planted.c_str(), ::geteuid(), ::getegid()) == 0);
  r = run_to_end(dir, {"status", "--node", addr_text});
  CHECK(r.status == 3);
  CHECK(r.err.find("cannot reach the node at " + addr_text) !=
        std::string::npos);
  int served = 0;
  REQUIRE(::waitpid(server, &served, 0) == server);
  CHECK(WIFEXITED(served));
  CHECK(WEXITSTATUS(served) == 0);
}

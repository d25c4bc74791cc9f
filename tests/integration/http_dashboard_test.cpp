// End-to-end: `tasksup serve --http` on loopback. /metrics is read by
// Prometheus' own text parser (python3-prometheus-client), hostile requests
// get their status codes, the control endpoints refuse requests without the
// CSRF header, and the dashboard is loaded in headless Chromium.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

using namespace tasksup::test;

namespace {

/// The HTTP port a `serve --http 127.0.0.1:0` child logged.
std::optional<int> http_port(const tasksup_child& child) {
  std::optional<int> port;
  const std::regex re{"dashboard on http://127\\.0\\.0\\.1:([0-9]+)/"};
  eventually(
    [&] {
      auto err = child.err();
      std::smatch m;
      if (!std::regex_search(err, m, re))
        return false;
      port = std::stoi(m[1].str());
      return true;
    },
    20s);
  return port;
}

/// Connects to 127.0.0.1:port; -1 on failure.
int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Reads until the server closes (or `limit` passes).
std::string read_all(int fd, std::chrono::milliseconds limit = 15s) {
  std::string out;
  auto deadline = steady::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - steady::now());
    if (left.count() <= 0)
      break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      break;
    char buf[8192];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

/// Sends `raw` as is and returns the whole response.
std::string http_exchange(int port, const std::string& raw) {
  int fd = connect_to(port);
  if (fd < 0)
    return {};
  ::send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  auto out = read_all(fd);
  ::close(fd);
  return out;
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12)
    return 0;
  return std::stoi(response.substr(9, 3));
}

std::string body_of(const std::string& response) {
  auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string{} : response.substr(at + 4);
}

std::string get(int port, const std::string& path) {
  return http_exchange(port,
                       "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

/// A node with --http on free loopback ports.
class web_node {
public:
  explicit web_node(const scratch& dir)
    : dir_(dir), child_(dir, "serve",
                        {"serve", "--listen", "127.0.0.1:0", "--http",
                         "127.0.0.1:0", "--config", config_dir(), "--work-dir",
                         dir / "node-work", "--state-dir", dir / "state"}) {
    auto port = listening_port(child_);
    auto web = http_port(child_);
    if (!port || !web)
      FAIL("the node did not start: " << child_.err());
    address_ = "127.0.0.1:" + std::to_string(*port);
    web_ = *web;
  }

  finished cmd(std::vector<std::string> args) {
    args.push_back("--node");
    args.push_back(address_);
    return run_to_end(dir_, args);
  }

  bool wait_done(const std::string& id, std::chrono::milliseconds limit = 30s) {
    return eventually(
      [&] {
        auto r = cmd({"status", id, "--json"});
        return r.status == 0 &&
               r.out.find("\"state\":\"done\"") != std::string::npos;
      },
      limit);
  }

  int web() const { return web_; }
  tasksup_child& process() { return child_; }

private:
  const scratch& dir_;
  tasksup_child child_;
  std::string address_;
  int web_ = 0;
};

/// Runs a shell command line; its exit status.
int shell(const std::string& line) {
  auto rc = std::system(line.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

const char* prometheus_parser = R"py(
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    out[fam.name] = {"type": fam.type,
                     "samples": [[s.name, s.labels, s.value] for s in fam.samples]}
print(json.dumps(out))
)py";

/// The value of the sample `name` whose labels include `labels`; -1 if none.
double sample(const boost::json::object& families, const std::string& family,
              const std::string& name,
              const std::vector<std::pair<std::string, std::string>>& labels) {
  auto* f = families.if_contains(family);
  if (!f)
    return -1;
  for (auto& s : f->at("samples").as_array()) {
    auto& arr = s.as_array();
    if (arr[0].as_string() != name)
      continue;
    auto& l = arr[1].as_object();
    bool match = true;
    for (auto& [k, v] : labels)
      match = match && l.contains(k) && l.at(k).as_string() == v;
    if (match)
      return arr[2].to_number<double>();
  }
  return -1;
}

} // namespace

TEST_CASE("serve --http: /metrics parses with Prometheus' parser and counts "
          "what happened") {
  scratch dir;
  web_node n{dir};
  REQUIRE(n.cmd({"submit", example("demo-recovery.json")}).status == 0);
  REQUIRE(n.wait_done("demo-recovery"));

  auto resp = get(n.web(), "/metrics");
  REQUIRE(status_of(resp) == 200);
  CHECK(resp.find("Content-Type: text/plain; version=0.0.4") !=
        std::string::npos);
  dir.write("metrics.txt", body_of(resp));
  dir.write("parse.py", prometheus_parser);
  REQUIRE(shell("/usr/bin/python3 " + dir / "parse.py" + " < " +
                dir / "metrics.txt" + " > " + dir / "families.json") == 0);
  auto families = boost::json::parse(slurp(dir / "families.json")).as_object();
  // Counter families lose their _total suffix in the parser's naming.
  CHECK(families.at("tasksup_attempts").at("type").as_string() == "counter");
  CHECK(families.at("tasksup_tasks").at("type").as_string() == "gauge");
  CHECK(
    families.at("tasksup_attempt_duration_seconds").at("type").as_string() ==
    "histogram");
  CHECK(families.contains("tasksup_time_to_recovery_seconds"));
  CHECK(families.contains("tasksup_agent_breaker_state"));
  CHECK(families.contains("tasksup_queue_length"));

  // demo-recovery: primary is not installed (agent_failure -> fallback),
  // backup is rate-limited twice, then succeeds (attempt 4).
  CHECK(sample(families, "tasksup_attempts", "tasksup_attempts_total",
               {{"agent", "primary"},
                {"class", "agent_failure"},
                {"decision", "fallback"}}) == 1);
  CHECK(sample(families, "tasksup_attempts", "tasksup_attempts_total",
               {{"agent", "backup"},
                {"class", "rate_limit"},
                {"decision", "retry"}}) == 2);
  CHECK(sample(families, "tasksup_attempts", "tasksup_attempts_total",
               {{"agent", "backup"}, {"decision", "succeeded"}}) == 1);
  CHECK(sample(families, "tasksup_fallbacks", "tasksup_fallbacks_total",
               {{"from", "primary"}, {"to", "backup"}}) == 1);
  CHECK(sample(families, "tasksup_tasks", "tasksup_tasks",
               {{"state", "done"}}) == 1);
  CHECK(sample(families, "tasksup_time_to_recovery_seconds",
               "tasksup_time_to_recovery_seconds_count", {}) == 1);
  CHECK(sample(families, "tasksup_attempt_duration_seconds",
               "tasksup_attempt_duration_seconds_count",
               {{"agent", "backup"}}) == 3);

  // The status view: times, the state filter, plain JSON numbers.
  auto js = n.cmd({"status", "demo-recovery", "--json"});
  REQUIRE(js.status == 0);
  CHECK(js.out.find("E9") == std::string::npos);
  auto st = boost::json::parse(js.out).as_object();
  CHECK(st.at("submitted_ts").as_double() > 1.7e9);
  CHECK(st.at("finished_ts").as_double() >= st.at("submitted_ts").as_double());
  CHECK(st.at("next_retry_ts").is_null());
  auto human = n.cmd({"status", "demo-recovery"});
  CHECK(human.out.find("AGE") != std::string::npos);
  CHECK(human.out.find("NEXT RETRY") != std::string::npos);
  CHECK(std::regex_search(human.out,
                          std::regex{"submitted: +20[0-9]{2}-[0-9]{2}-[0-9]{2}T"
                                     "[0-9]{2}:[0-9]{2}:[0-9]{2}Z"}));
  CHECK(n.cmd({"status", "--state", "done"}).out.find("demo-recovery") !=
        std::string::npos);
  CHECK(n.cmd({"status", "--state", "running,queued"}).out ==
        "no tasks in that state\n");
  CHECK(n.cmd({"status", "--state", "sleeping"}).status == 2);

  // The same figures per agent, from the CLI.
  auto agents = n.cmd({"agents", "--json"});
  INFO(agents.err);
  REQUIRE(agents.status == 0);
  auto doc = boost::json::parse(agents.out);
  CHECK(doc.at("fallback_order").at(0).at("agent_id").as_string() == "backup");
  auto table = n.cmd({"agents"});
  REQUIRE(table.status == 0);
  CHECK(table.out.find("AGENT") == 0);
  CHECK(table.out.find("Suggested fallback order:") != std::string::npos);

  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve --http: /metrics shows the journal's figures") {
  scratch dir;
  web_node n{dir};
  REQUIRE(n.cmd({"submit", example("demo-fatal.json")}).status == 0);
  REQUIRE(n.cmd({"submit", example("demo-flaky.json")}).status == 0);
  REQUIRE(n.wait_done("demo-fatal"));
  REQUIRE(n.wait_done("demo-flaky"));
  dir.write("parse.py", prometheus_parser);
  // The end of a task is journaled as it is reported: scrape until both
  // ends are in (bounded).
  boost::json::object families;
  auto scrape = [&] {
    auto resp = get(n.web(), "/metrics");
    REQUIRE(status_of(resp) == 200);
    dir.write("metrics.txt", body_of(resp));
    REQUIRE(shell("/usr/bin/python3 " + dir / "parse.py" + " < " +
                  dir / "metrics.txt" + " > " + dir / "families.json") == 0);
    families = boost::json::parse(slurp(dir / "families.json")).as_object();
    return sample(families, "tasksup_journal_records_written",
                  "tasksup_journal_records_written_total",
                  {{"kind", "end"}}) == 2;
  };
  REQUIRE(eventually(scrape, 10s));
  auto type = [&](const char* f) {
    return std::string{families.at(f).at("type").as_string()};
  };
  CHECK(type("tasksup_journal_enabled") == "gauge");
  CHECK(type("tasksup_journal_size_bytes") == "gauge");
  CHECK(type("tasksup_journal_records_written") == "counter");
  CHECK(type("tasksup_journal_commits") == "counter");
  CHECK(type("tasksup_journal_commit_failures") == "counter");
  CHECK(type("tasksup_journal_commit_duration_seconds") == "histogram");
  CHECK(type("tasksup_journal_failing") == "gauge");
  CHECK(type("tasksup_journal_disk_full") == "gauge");
  CHECK(type("tasksup_journal_pruned_tasks") == "counter");
  CHECK(sample(families, "tasksup_journal_enabled", "tasksup_journal_enabled",
               {}) == 1);
  CHECK(sample(families, "tasksup_journal_size_bytes",
               "tasksup_journal_size_bytes", {}) > 0);
  CHECK(sample(families, "tasksup_journal_tasks", "tasksup_journal_tasks",
               {{"state", "finished"}}) == 2);
  CHECK(sample(families, "tasksup_journal_tasks", "tasksup_journal_tasks",
               {{"state", "unfinished"}}) == 0);
  auto written = [&](const char* kind) {
    return sample(families, "tasksup_journal_records_written",
                  "tasksup_journal_records_written_total", {{"kind", kind}});
  };
  CHECK(written("task") == 2);
  // demo-fatal: two attempts (fatal, then the fallback succeeds);
  // demo-flaky: three. Each attempt's inputs and events are journaled.
  CHECK(written("input") >= 5);
  CHECK(written("event") >= 5);
  auto commits = sample(families, "tasksup_journal_commits",
                        "tasksup_journal_commits_total", {});
  CHECK(commits > 0);
  // Group commits: never more commits than writes.
  CHECK(commits <= written("task") + written("input") + written("event") +
                     written("end") + written("state"));
  CHECK(sample(families, "tasksup_journal_commit_duration_seconds",
               "tasksup_journal_commit_duration_seconds_count", {}) == commits);
  CHECK(sample(families, "tasksup_journal_commit_duration_seconds",
               "tasksup_journal_commit_duration_seconds_bucket",
               {{"le", "+Inf"}}) == commits);
  CHECK(sample(families, "tasksup_journal_commit_duration_seconds",
               "tasksup_journal_commit_duration_seconds_sum", {}) > 0);
  CHECK(sample(families, "tasksup_journal_commit_failures",
               "tasksup_journal_commit_failures_total", {}) == 0);
  CHECK(sample(families, "tasksup_journal_failing", "tasksup_journal_failing",
               {}) == 0);
  CHECK(sample(families, "tasksup_journal_disk_full",
               "tasksup_journal_disk_full", {}) == 0);
  CHECK(sample(families, "tasksup_journal_pruned_tasks",
               "tasksup_journal_pruned_tasks_total", {}) == 0);
  CHECK(sample(families, "tasksup_queue_length", "tasksup_queue_length", {}) ==
        0);
  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve --http: hostile and wrong requests get their status codes "
          "and the node goes on") {
  scratch dir;
  web_node n{dir};
  auto port = n.web();
  CHECK(status_of(http_exchange(port, "GARBAGE\r\n\r\n")) == 400);
  CHECK(status_of(http_exchange(port, "GET / HTTP/1.1\r\n\r\n")) == 400);
  CHECK(status_of(http_exchange(port, "GET /" + std::string(10000, 'a') +
                                        " HTTP/1.1\r\n")) == 414);
  CHECK(status_of(http_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\nX: " +
                                        std::string(40000, 'b'))) == 431);
  CHECK(
    status_of(http_exchange(port, "POST /api/tasks/x/stop HTTP/1.1\r\nHost: "
                                  "127.0.0.1\r\nContent-Length: 999999\r\n"
                                  "\r\n")) == 413);
  CHECK(status_of(get(port, "/nope")) == 404);
  auto post =
    http_exchange(port, "POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Content-Length: 0\r\n\r\n");
  CHECK(status_of(post) == 405);
  CHECK(post.find("Allow: GET, HEAD") != std::string::npos);
  CHECK(status_of(get(port, "/api/tasks/x/stop")) == 405);
  // DNS rebinding: another site's name as Host.
  CHECK(status_of(http_exchange(port, "GET /api/tasks HTTP/1.1\r\nHost: "
                                      "evil.example:80\r\n\r\n")) == 403);
  // A control request without the CSRF header, or from another origin.
  CHECK(status_of(http_exchange(
          port, "POST /api/tasks/x/stop HTTP/1.1\r\nHost: "
                "127.0.0.1\r\nContent-Length: 0\r\n\r\n")) == 403);
  CHECK(status_of(http_exchange(
          port, "POST /api/tasks/x/stop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Origin: http://evil.example\r\nX-Tasksup-CSRF: 1\r\n"
                "Content-Length: 0\r\n\r\n")) == 403);
  // With it: an unknown task is 404.
  CHECK(
    status_of(http_exchange(port, "POST /api/tasks/x/stop HTTP/1.1\r\nHost: "
                                  "127.0.0.1\r\nX-Tasksup-CSRF: 1\r\n"
                                  "Content-Length: 0\r\n\r\n")) == 404);
  CHECK(status_of(get(port, "/api/agents?window=banana")) == 400);

  // A client that sends half a request and stalls is answered 408 after
  // the request timeout (10 s) and does not block anyone meanwhile.
  int slow = connect_to(port);
  REQUIRE(slow >= 0);
  std::string half = "GET /metrics HTTP/1.1\r\nHost: 127";
  ::send(slow, half.data(), half.size(), MSG_NOSIGNAL);
  CHECK(status_of(get(port, "/metrics")) == 200);
  auto late = read_all(slow, 20s);
  ::close(slow);
  CHECK(status_of(late) == 408);

  // Still serving, and the control node too.
  CHECK(status_of(get(port, "/api/tasks")) == 200);
  CHECK(n.cmd({"status"}).status == 0);
  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve --http: the control endpoints act like the CLI") {
  scratch dir;
  web_node n{dir};
  REQUIRE(n.cmd({"submit", example("demo-slow.json")}).status == 0);
  REQUIRE(eventually(
    [&] {
      return n.cmd({"status", "demo-slow", "--json"})
               .out.find("\"state\":\"running\"") != std::string::npos;
    },
    20s));
  auto resp =
    http_exchange(n.web(), "POST /api/tasks/demo-slow/kill HTTP/1.1\r\n"
                           "Host: 127.0.0.1\r\nX-Tasksup-CSRF: 1\r\n"
                           "Content-Length: 0\r\n\r\n");
  REQUIRE(status_of(resp) == 200);
  CHECK(body_of(resp).find("\"ok\":true") != std::string::npos);
  REQUIRE(n.wait_done("demo-slow"));
  auto task = boost::json::parse(body_of(get(n.web(), "/api/tasks/demo-slow")));
  CHECK(task.at("task").at("outcome").as_string() == "stopped");
  bool saw_stop = false;
  for (auto& e : task.at("events").as_array())
    saw_stop = saw_stop || e.at("event").as_string() == "user_stop";
  CHECK(saw_stop);
  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve --http: the dashboard in headless Chromium shows tasks, "
          "decisions and agents") {
  if (shell("command -v chromium >/dev/null") != 0)
    FAIL("chromium is not installed (scripts/bootstrap.sh installs it)");
  scratch dir;
  web_node n{dir};
  REQUIRE(n.cmd({"submit", example("demo-recovery.json")}).status == 0);
  REQUIRE(n.cmd({"submit", example("demo-flaky.json")}).status == 0);
  REQUIRE(n.wait_done("demo-recovery"));
  REQUIRE(n.wait_done("demo-flaky"));
  REQUIRE(n.cmd({"submit", example("demo-slow.json")}).status == 0);
  // One that fails once and then waits 10 minutes to retry.
  auto waiting = dir.write(
    "demo-waiting.json",
    R"({"id": "demo-waiting", "prompt": "Write the release notes",
        "agent_selection": {"agents": [{"agent_id": "flaky", "agent_cli": ")" +
      example("agents/flaky-agent") + R"(", "cli_flags": "--succeed-at 2"}]},
        "supervisor": {"backoff_base_seconds": 600}})");
  REQUIRE(n.cmd({"submit", waiting}).status == 0);
  REQUIRE(eventually(
    [&] {
      return n.cmd({"status", "demo-waiting", "--json"})
               .out.find("\"state\":\"backoff\"") != std::string::npos;
    },
    20s));

  auto base = "http://127.0.0.1:" + std::to_string(n.web()) + "/";
  auto chromium = [&](const std::string& what, const std::string& url) {
    return "timeout 90 chromium --headless --no-sandbox --disable-gpu "
           "--no-first-run --user-data-dir=" +
           dir / "chromium-profile" + " --virtual-time-budget=4000 " + what +
           " '" + url + "'";
  };
  auto dom = [&](const std::string& url) {
    auto out = dir / "dom.html";
    REQUIRE(shell(chromium("--dump-dom", url) + " > " + out + " 2>/dev/null") ==
            0);
    return slurp(out);
  };

  auto list = dom(base + "#/");
  CHECK(list.find("data-task=\"demo-recovery\"") != std::string::npos);
  CHECK(list.find("data-task=\"demo-flaky\"") != std::string::npos);
  CHECK(list.find("outcome outcome-succeeded") != std::string::npos);
  CHECK(list.find("live · updated") != std::string::npos);
  // The waiting task counts down to its retry.
  CHECK(std::regex_search(
    list, std::regex{"data-task=\"demo-waiting\".*class=\"state "
                     "state-backoff\">backoff<.*data-deadline=\"[0-9.]+\">in "
                     "[0-9]+m"}));

  auto task = dom(base + "#/task/demo-recovery");
  CHECK(task.find("Task demo-recovery") != std::string::npos);
  CHECK(task.find("classified agent_failure by rule") != std::string::npos);
  CHECK(task.find("fallback primary → backup") != std::string::npos);
  CHECK(task.find("delay from retry_after_hint") != std::string::npos);
  CHECK(task.find("class=\"bar ok\"") != std::string::npos);

  auto agents = dom(base + "#/agents");
  CHECK(agents.find("data-agent=\"backup\"") != std::string::npos);
  CHECK(agents.find("id=\"fallback-order\"") != std::string::npos);

  // Screenshots for the README, under the build tree.
  auto shot = std::filesystem::current_path() / "dashboard.png";
  auto shot_task = std::filesystem::current_path() / "dashboard-task.png";
  std::filesystem::remove(shot);
  std::filesystem::remove(shot_task);
  CHECK(shell(chromium("--window-size=1280,640 --screenshot=" + shot.string(),
                       base + "#/") +
              " >/dev/null 2>&1") == 0);
  CHECK(
    shell(chromium("--window-size=1280,900 --screenshot=" + shot_task.string(),
                   base + "#/task/demo-recovery") +
          " >/dev/null 2>&1") == 0);
  CHECK(std::filesystem::exists(shot));
  CHECK(std::filesystem::exists(shot_task));

  n.cmd({"kill", "demo-slow"});
  n.cmd({"kill", "demo-waiting"});
  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

namespace {

/// A loopback HTTP endpoint that answers 503 to the first request and 200
/// to the rest, keeping every body it received.
class hook_server {
public:
  hook_server() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 8);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread{[this] { serve(); }};
  }

  ~hook_server() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }

  int port() const { return port_; }

  std::vector<std::string> bodies() {
    std::lock_guard<std::mutex> guard{mutex_};
    return bodies_;
  }

private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0)
        continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0)
        continue;
      std::string in;
      std::size_t need = std::string::npos;
      auto deadline = steady::now() + 5s;
      while (steady::now() < deadline &&
             (need == std::string::npos || in.size() < need)) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 100) <= 0)
          continue;
        char buf[4096];
        auto n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0)
          break;
        in.append(buf, static_cast<std::size_t>(n));
        auto head = in.find("\r\n\r\n");
        auto cl = in.find("Content-Length: ");
        if (head != std::string::npos && cl != std::string::npos)
          need = head + 4 + std::stoul(in.substr(cl + 16));
      }
      std::string answer;
      {
        std::lock_guard<std::mutex> guard{mutex_};
        answer =
          ++requests_ == 1 ? "HTTP/1.1 503 Busy\r\n" : "HTTP/1.1 200 OK\r\n";
        if (requests_ > 1 && need != std::string::npos)
          bodies_.push_back(in.substr(in.find("\r\n\r\n") + 4));
      }
      answer += "Content-Length: 0\r\nConnection: close\r\n\r\n";
      ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  int requests_ = 0;
  std::vector<std::string> bodies_;
};

} // namespace

TEST_CASE("serve --notify-command/--notify-url: a finished task is handed "
          "to the hook and POSTed, retried after a failure") {
  scratch dir;
  hook_server hook;
  auto hook_file = dir / "hook.jsonl";
  tasksup_child node{
    dir,
    "serve",
    {"serve", "--listen", "127.0.0.1:0", "--config", config_dir(), "--work-dir",
     dir / "node-work", "--state-dir", dir / "state", "--notify-command",
     "sh -c 'cat >> " + hook_file + "'", "--notify-url",
     "http://127.0.0.1:" + std::to_string(hook.port()) + "/hook"}};
  auto port = listening_port(node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  REQUIRE(
    run_to_end(dir, {"submit", example("demo-flaky.json"), "--node", address})
      .status == 0);
  REQUIRE(
    eventually([&] { return !json_lines(slurp(hook_file)).empty(); }, 30s));
  auto lines = json_lines(slurp(hook_file));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].at("event").as_string() == "task_done");
  CHECK(lines[0].at("task_id").as_string() == "demo-flaky");
  CHECK(lines[0].at("outcome").as_string() == "succeeded");
  CHECK(lines[0].at("metadata").at("total_attempts").as_int64() == 3);

  // The first POST got 503; the retry (1 s later) is delivered.
  REQUIRE(eventually([&] { return !hook.bodies().empty(); }, 20s));
  auto posted = boost::json::parse(hook.bodies().front());
  CHECK(posted.at("task_id").as_string() == "demo-flaky");
  CHECK(node.err().find("notification (url) failed (try 1): answered 503") !=
        std::string::npos);
  CHECK(eventually(
    [&] {
      return node.err().find("[demo-flaky] notified (url, try 2)") !=
             std::string::npos;
    },
    5s));
  node.signal(SIGTERM);
  CHECK(node.wait(30s) == 0);
}

TEST_CASE("serve: bad notification settings are refused before the node "
          "starts") {
  scratch dir;
  auto r = run_to_end(dir, {"serve", "--listen", "127.0.0.1:0", "--notify-url",
                            "https://example.com/"});
  CHECK(r.status == 2);
  CHECK(r.err.find("--notify-url") != std::string::npos);
  auto q = run_to_end(dir, {"serve", "--listen", "127.0.0.1:0",
                            "--notify-command", "sh -c 'unbalanced"});
  CHECK(q.status == 2);
  CHECK(q.err.find("--notify-command") != std::string::npos);
  auto h = run_to_end(
    dir, {"serve", "--listen", "127.0.0.1:0", "--http", "10.1.2.3:0"});
  CHECK(h.status == 2);
  CHECK(h.err.find("--allow-remote") != std::string::npos);
}

TEST_CASE("completion scripts and the man page come from the --help texts") {
  scratch dir;
  auto bash = run_to_end(dir, {"completion", "bash"});
  REQUIRE(bash.status == 0);
  auto script = dir.write("tasksup.bash", bash.out);
  // Sourced in bash, it completes commands and each command's options.
  auto probe = dir.write("probe.sh", R"(source ")" + script + R"("
COMP_WORDS=(tasksup sta); COMP_CWORD=1; _tasksup; echo "1: ${COMPREPLY[*]}"
COMP_WORDS=(tasksup status --st); COMP_CWORD=2; _tasksup; echo "2: ${COMPREPLY[*]}"
COMP_WORDS=(tasksup serve --ht); COMP_CWORD=2; _tasksup; echo "3: ${COMPREPLY[*]}"
)");
  REQUIRE(shell("bash " + probe + " > " + dir / "probe.out") == 0);
  auto out = slurp(dir / "probe.out");
  CHECK(out.find("1: status") != std::string::npos);
  CHECK(out.find("2: --state") != std::string::npos);
  CHECK(out.find("3: --http") != std::string::npos);

  auto zsh = run_to_end(dir, {"completion", "zsh"});
  REQUIRE(zsh.status == 0);
  CHECK(zsh.out.rfind("#compdef tasksup\n", 0) == 0);
  CHECK(zsh.out.find("'agents:Show how each agent") != std::string::npos);
  CHECK(zsh.out.find("'--state[Only tasks in this state") != std::string::npos);

  auto man = run_to_end(dir, {"man"});
  REQUIRE(man.status == 0);
  auto page = dir.write("tasksup.1", man.out);
  // groff renders it without warnings, with every command in it.
  REQUIRE(shell("groff -man -Tutf8 -P-cbou -ww " + page + " > " +
                dir / "man.txt" + " 2> " + dir / "man.err") == 0);
  CHECK(slurp(dir / "man.err").empty());
  auto text = slurp(dir / "man.txt");
  for (auto cmd : {"tasksup run", "tasksup serve", "tasksup agents",
                   "tasksup status", "notify-url", "NO_COLOR"})
    CHECK(text.find(cmd) != std::string::npos);
}

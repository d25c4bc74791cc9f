// End-to-end: `tasksup serve --http` on loopback. /metrics is read by
// Prometheus' own text parser (python3-prometheus-client), hostile requests
// get their status codes, the control endpoints refuse requests without the
// CSRF header, and the dashboard is loaded in headless Chromium.

#include "../socket_read.hpp"
#include "process_node.hpp"
#include "tasksup_child.hpp"

#include "tasksup/webhook/signature.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

/// The HTTP port and token a `serve --http 127.0.0.1:0` child logged.
struct web_login {
  int port = 0;
  std::string token;
};

std::optional<web_login> http_login(const tasksup_child& child) {
  std::optional<web_login> out;
  const std::regex re{"dashboard on http://127\\.0\\.0\\.1:([0-9]+)/"
                      "\\?token=([0-9a-f]{64})"};
  eventually(
    [&] {
      auto err = child.err();
      std::smatch m;
      if (!std::regex_search(err, m, re))
        return false;
      out = web_login{std::stoi(m[1].str()), m[2].str()};
      return true;
    },
    20s);
  return out;
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

/// A GET without credentials.
std::string get_anonymous(int port, const std::string& path) {
  return http_exchange(port,
                       "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

/// `raw` with `Authorization: Bearer token` after its request line.
std::string with_bearer(std::string raw, const std::string& token) {
  auto eol = raw.find("\r\n");
  REQUIRE(eol != std::string::npos);
  raw.insert(eol + 2, "Authorization: Bearer " + token + "\r\n");
  return raw;
}

/// The value of header `name` (as sent, e.g. "Set-Cookie") in a response.
std::string header_of(const std::string& response, const std::string& name) {
  auto at = response.find("\r\n" + name + ": ");
  if (at == std::string::npos)
    return {};
  at += name.size() + 4;
  return response.substr(at, response.find("\r\n", at) - at);
}

/// A node with --http on free loopback ports.
class web_node {
public:
  explicit web_node(const scratch& dir, std::vector<std::string> extra = {})
    : dir_(dir), child_(dir, "serve", serve_args(dir, std::move(extra))) {
    auto port = listening_port(child_);
    auto web = http_login(child_);
    if (!port || !web)
      FAIL("the node did not start: " << child_.err());
    address_ = "127.0.0.1:" + std::to_string(*port);
    web_ = web->port;
    token_ = web->token;
  }

  /// `raw` sent with the token.
  std::string exchange(const std::string& raw) {
    return http_exchange(web_, with_bearer(raw, token_));
  }

  /// GET `path` with the token.
  std::string get(const std::string& path) {
    return exchange("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  }

  const std::string& token() const { return token_; }
  const std::string& address() const { return address_; }

  finished cmd(std::vector<std::string> args) {
    args.push_back("--node");
    args.push_back(address_);
    return run_to_end(dir_, args);
  }

  /// Polls `status` until the task is done; on a timeout the report shows
  /// the last answer, the task's events and the node's log.
  bool wait_done(const std::string& id, std::chrono::milliseconds limit = 30s) {
    finished last;
    auto done = eventually(
      [&] {
        last = cmd({"status", id, "--json"});
        return last.status == 0 &&
               last.out.find("\"state\":\"done\"") != std::string::npos;
      },
      limit);
    if (!done) {
      auto evs = cmd({"events", id});
      WARN("task " << id << " not done after " << limit.count()
                   << " ms\nlast status (exit " << last.status
                   << "): " << last.out << last.err << "\nevents:\n"
                   << evs.out << evs.err << "\nnode log:\n"
                   << child_.err());
    }
    return done;
  }

  int web() const { return web_; }
  tasksup_child& process() { return child_; }

private:
  static std::vector<std::string> serve_args(const scratch& dir,
                                             std::vector<std::string> extra) {
    std::vector<std::string> args{
      "serve",           "--listen",    "127.0.0.1:0", "--http",
      "127.0.0.1:0",     "--config",    config_dir(),  "--work-dir",
      dir / "node-work", "--state-dir", dir / "state"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  const scratch& dir_;
  tasksup_child child_;
  std::string address_;
  int web_ = 0;
  std::string token_;
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

/// Drives headless Chromium over its DevTools pipe (fd 3 in, fd 4 out,
/// NUL-separated JSON): opens `url`, waits for each step's JS condition
/// (then runs its `eval`, touches its `touch` file), saves the DOM and a
/// screenshot. A page that keeps an event stream open never goes idle, so
/// --dump-dom with a virtual time budget would wait for it forever.
const char* devtools_script = R"py(
import base64, json, os, subprocess, sys, tempfile, time
spec = json.load(open(sys.argv[1]))
pipes = os.pipe() + os.pipe()
# Above 4 first, so that placing them on 3 and 4 overwrites nothing.
r_cmd, w_cmd, r_out, w_out = [os.dup2(fd, 10 + i) for i, fd in enumerate(pipes)]
for fd in pipes:
    os.close(fd)
def child_fds():
    os.dup2(r_cmd, 3)
    os.dup2(w_out, 4)
    os.set_inheritable(3, True)
    os.set_inheritable(4, True)
profile = tempfile.mkdtemp(prefix="tasksup-chromium-")
proc = subprocess.Popen(
    ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
     "--no-first-run", "--user-data-dir=" + profile,
     "--remote-debugging-pipe", "about:blank"],
    preexec_fn=child_fds, close_fds=False,
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(r_cmd)
os.close(w_out)
deadline = time.time() + spec.get("timeout", 60)
buf = b""
last = 0
def call(method, params=None, session=None):
    global buf, last
    last += 1
    msg = {"id": last, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    os.write(w_cmd, json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in buf:
            if time.time() > deadline:
                raise SystemExit("timed out waiting for " + method)
            chunk = os.read(r_out, 1 << 16)
            if not chunk:
                raise SystemExit("chromium closed its pipe")
            buf += chunk
        raw, buf = buf.split(b"\0", 1)
        reply = json.loads(raw)
        if reply.get("id") == last:
            if "error" in reply:
                raise SystemExit(method + ": " + json.dumps(reply["error"]))
            return reply["result"]
try:
    target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = call("Target.attachToTarget",
                   {"targetId": target, "flatten": True})["sessionId"]
    w, h = spec.get("size", [1280, 800])
    call("Emulation.setDeviceMetricsOverride",
         {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": False},
         session)
    call("Page.navigate", {"url": spec["url"]}, session)
    def value(expr):
        r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                 session)
        return r.get("result", {}).get("value")
    def dump():
        with open(spec["dom"], "w") as f:
            f.write(value("document.documentElement.outerHTML") or "")
    for step in spec.get("steps", []):
        cond = "(() => { try { return !!(" + step["wait"] + \
               "); } catch (e) { return false; } })()"
        while not value(cond):
            if time.time() > deadline:
                dump()
                raise SystemExit("timed out waiting for: " + step["wait"])
            time.sleep(0.1)
        if "eval" in step:
            value(step["eval"])
        if "touch" in step:
            open(step["touch"], "w").close()
    dump()
    if "screenshot" in spec:
        png = call("Page.captureScreenshot", {"format": "png"}, session)["data"]
        with open(spec["screenshot"], "wb") as f:
            f.write(base64.b64decode(png))
finally:
    try:
        call("Browser.close")
    except BaseException:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    subprocess.run(["rm", "-rf", profile])
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

/// /metrics of `n`, read by Prometheus' parser (families by name).
boost::json::object scrape(web_node& n, const scratch& dir) {
  auto resp = n.get("/metrics");
  REQUIRE(status_of(resp) == 200);
  dir.write("metrics.txt", body_of(resp));
  dir.write("parse.py", prometheus_parser);
  REQUIRE(shell("/usr/bin/python3 " + dir / "parse.py" + " < " +
                dir / "metrics.txt" + " > " + dir / "families.json") == 0);
  return boost::json::parse(slurp(dir / "families.json")).as_object();
}

/// A task whose first attempt fails and whose retry waits 10 minutes.
std::string waiting_task(const scratch& dir) {
  return dir.write(
    "demo-waiting.json",
    R"({"id": "demo-waiting", "prompt": "Write the release notes",
        "agent_selection": {"agents": [{"agent_id": "flaky", "agent_cli": ")" +
      example("agents/flaky-agent") + R"(", "cli_flags": "--succeed-at 2"}]},
        "supervisor": {"backoff_base_seconds": 600}})");
}

} // namespace

TEST_CASE("serve --http: /metrics parses with Prometheus' parser and counts "
          "what happened") {
  scratch dir;
  web_node n{dir};
  REQUIRE(n.cmd({"submit", example("demo-recovery.json")}).status == 0);
  REQUIRE(n.wait_done("demo-recovery"));

  auto resp = n.get("/metrics");
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
  // Four attempts within the hour: three restarts, listed as often.
  CHECK(sample(families, "tasksup_tasks_restarting_often",
               "tasksup_tasks_restarting_often", {}) == 1);

  // The status view: times, the state filter, plain JSON numbers.
  auto js = n.cmd({"status", "demo-recovery", "--json"});
  REQUIRE(js.status == 0);
  // Times are plain decimals, never in exponent form (1.7E9). Only the
  // numbers are looked at: paths in the record may hold any letters.
  CHECK(std::regex_search(js.out,
                          std::regex{R"("submitted_ts":[0-9]+(\.[0-9]+)?,)"}));
  CHECK(std::regex_search(js.out,
                          std::regex{R"("finished_ts":[0-9]+(\.[0-9]+)?,)"}));
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
  CHECK(doc.at("restarting_count") == 1);
  auto& often = doc.at("restarting").at(0);
  CHECK(often.at("task_id") == "demo-recovery");
  CHECK(often.at("restarts_last_hour") == 3);
  CHECK(often.at("failing_since_ts").is_null());
  CHECK(often.at("last_recovery_s").as_double() > 0);
  CHECK(std::regex_search(
    table.out, std::regex{"Restarting often \\(3 or more new attempts in the "
                          "last hour\\):\n +TASK +AGENT +RESTARTS +LAST "
                          "RESTART +RECOVERY\n +demo-recovery +backup +3 +"
                          "20[0-9-]+T[0-9:]+Z +recovered in [0-9.]+s\n"}));

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
    auto resp = n.get("/metrics");
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
  CHECK(type("tasksup_journal_syncs") == "counter");
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
  // Sync mode full: the two submissions and the two tasks' ends were put
  // on disk before anyone was told (one sync may cover several).
  CHECK(sample(families, "tasksup_journal_syncs", "tasksup_journal_syncs_total",
               {}) >= 1);
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
                                  "127.0.0.1\r\nContent-Length: 2000000\r\n"
                                  "\r\n")) == 413);
  CHECK(status_of(n.get("/nope")) == 404);
  auto post = n.exchange("POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Length: 0\r\n\r\n");
  CHECK(status_of(post) == 405);
  CHECK(post.find("Allow: GET, HEAD") != std::string::npos);
  CHECK(status_of(n.get("/api/tasks/x/stop")) == 405);
  // DNS rebinding: another site's name as Host.
  CHECK(status_of(n.exchange("GET /api/tasks HTTP/1.1\r\nHost: "
                             "evil.example:80\r\n\r\n")) == 403);
  // A control request without the CSRF header, or from another origin
  // (with the token: a page elsewhere in a logged-in browser).
  CHECK(status_of(n.exchange("POST /api/tasks/x/stop HTTP/1.1\r\nHost: "
                             "127.0.0.1\r\nContent-Length: 0\r\n\r\n")) == 403);
  CHECK(status_of(
          n.exchange("POST /api/tasks/x/stop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Origin: http://evil.example\r\nX-Tasksup-CSRF: 1\r\n"
                     "Content-Length: 0\r\n\r\n")) == 403);
  // Same origin: an unknown task is 404.
  CHECK(status_of(n.exchange(
          "POST /api/tasks/x/stop HTTP/1.1\r\nHost: 127.0.0.1:" +
          std::to_string(port) +
          "\r\nOrigin: http://127.0.0.1:" + std::to_string(port) +
          "\r\nX-Tasksup-CSRF: 1\r\nContent-Length: 0\r\n\r\n")) == 404);
  CHECK(status_of(n.exchange("POST /api/tasks/x/stop HTTP/1.1\r\nHost: "
                             "127.0.0.1\r\nX-Tasksup-CSRF: 1\r\n"
                             "Content-Length: 0\r\n\r\n")) == 404);
  CHECK(status_of(n.get("/api/agents?window=banana")) == 400);
  CHECK(status_of(n.get("/api/tasks?limit=0")) == 400);
  CHECK(status_of(n.get("/api/tasks?limit=1001")) == 400);

  // A client that sends half a request and stalls is answered 408 after
  // the request timeout (10 s) and does not block anyone meanwhile.
  int slow = connect_to(port);
  REQUIRE(slow >= 0);
  std::string half = "GET /metrics HTTP/1.1\r\nHost: 127";
  ::send(slow, half.data(), half.size(), MSG_NOSIGNAL);
  CHECK(status_of(n.get("/metrics")) == 200);
  auto late = read_all(slow, 20s);
  ::close(slow);
  CHECK(status_of(late) == 408);

  // Still serving, and the control node too.
  CHECK(status_of(n.get("/api/tasks")) == 200);
  CHECK(n.cmd({"status"}).status == 0);
  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve --http: every request needs the token, and a browser logs in "
          "with it once") {
  scratch dir;
  std::string token;
  auto token_file = dir / "state/http-token";
  {
    web_node n{dir};
    auto port = n.web();
    token = n.token();
    // The token file: made on the first start, readable by the node's
    // user only, and what the log's URL carries.
    struct stat st {};
    REQUIRE(::stat(token_file.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(slurp(token_file) == token + "\n");

    // Without the token: 401, saying where it is.
    for (auto path : {"/metrics", "/", "/dashboard.js", "/api/tasks",
                      "/api/tasks/x", "/api/agents", "/api/stream"}) {
      auto r = get_anonymous(port, path);
      INFO(path);
      CHECK(status_of(r) == 401);
      CHECK(body_of(r).find(token_file) != std::string::npos);
      CHECK(header_of(r, "WWW-Authenticate") == "Bearer realm=\"tasksup\"");
      CHECK(r.find(token) == std::string::npos);
    }
    CHECK(status_of(http_exchange(
            port, "POST /api/tasks/x/stop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "X-Tasksup-CSRF: 1\r\nContent-Length: 0\r\n\r\n")) == 401);
    // A wrong one: 401 as well, in the header, a cookie or the URL.
    std::string wrong(64, '0');
    CHECK(status_of(http_exchange(
            port, with_bearer("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "\r\n",
                              wrong))) == 401);
    CHECK(status_of(http_exchange(
            port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: "
                  "tasksup_token_" +
                    std::to_string(port) + "=" + wrong + "\r\n\r\n")) == 401);
    CHECK(status_of(get_anonymous(port, "/?token=" + wrong)) == 401);

    // The bearer token (what Prometheus' credentials_file sends).
    CHECK(status_of(n.get("/metrics")) == 200);

    // Browser login: the token in the URL becomes an HttpOnly, SameSite
    // cookie and the browser is sent to the page without it.
    auto login = get_anonymous(port, "/?token=" + token);
    CHECK(status_of(login) == 303);
    CHECK(header_of(login, "Location") == "/");
    auto cookie = header_of(login, "Set-Cookie");
    auto cookie_pair = "tasksup_token_" + std::to_string(port) + "=" + token;
    CHECK(cookie.rfind(cookie_pair + ";", 0) == 0);
    CHECK(cookie.find("; HttpOnly") != std::string::npos);
    CHECK(cookie.find("; SameSite=Strict") != std::string::npos);
    CHECK(cookie.find("; Path=/") != std::string::npos);
    auto page = http_exchange(port, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    "Cookie: " +
                                      cookie_pair + "\r\n\r\n");
    CHECK(status_of(page) == 200);
    CHECK(page.find("<title>tasksup</title>") != std::string::npos);
    // With the cookie, a POST from another origin is refused (CSRF).
    CHECK(status_of(http_exchange(
            port, "POST /api/tasks/x/stop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Cookie: " +
                    cookie_pair +
                    "\r\nOrigin: http://evil.example\r\nX-Tasksup-CSRF: "
                    "1\r\nContent-Length: 0\r\n\r\n")) == 403);
    n.process().signal(SIGTERM);
    CHECK(n.process().wait(30s) == 0);
  }
  // A restart on the same state directory keeps the token.
  {
    web_node again{dir};
    CHECK(again.token() == token);
    CHECK(status_of(again.get("/metrics")) == 200);
    again.process().signal(SIGTERM);
    CHECK(again.process().wait(30s) == 0);
  }
  // --http-token-file keeps it elsewhere, made there on first use.
  {
    auto elsewhere = dir / "tokens-http";
    web_node other{dir, {"--http-token-file", elsewhere}};
    CHECK(other.token() != token);
    CHECK(slurp(elsewhere) == other.token() + "\n");
    struct stat st {};
    REQUIRE(::stat(elsewhere.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    other.process().signal(SIGTERM);
    CHECK(other.process().wait(30s) == 0);
  }
}

TEST_CASE("serve --http: /api/stream tells which tasks changed as they "
          "change, and /api/tasks comes in pages, newest first") {
  scratch dir;
  web_node n{dir};
  int fd = connect_to(n.web());
  REQUIRE(fd >= 0);
  auto ask = with_bearer("GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                         n.token());
  ::send(fd, ask.data(), ask.size(), MSG_NOSIGNAL);
  std::string stream;
  auto read_for = [&](const std::string& what) {
    stream += tasksup::test::read_until(
      fd,
      [&](const std::string& got) {
        return (stream + got).find(what) != std::string::npos;
      },
      30s);
    return stream.find(what) != std::string::npos;
  };
  REQUIRE(read_for("event: hello\n"));
  CHECK(status_of(stream) == 200);
  CHECK(header_of(stream, "Content-Type") ==
        "text/event-stream; charset=utf-8");
  REQUIRE(n.cmd({"submit", example("demo-fatal.json")}).status == 0);
  CHECK(read_for("event: change\ndata: {\"all\":false,\"tasks\":["
                 "\"demo-fatal\"]}\n\n"));
  // The figures count it as an open stream.
  auto metrics = body_of(n.get("/metrics"));
  CHECK(metrics.find("\ntasksup_http_streams 1\n") != std::string::npos);
  ::close(fd);

  REQUIRE(n.cmd({"submit", example("demo-flaky.json")}).status == 0);
  REQUIRE(n.cmd({"submit", example("demo-recovery.json")}).status == 0);
  REQUIRE(n.wait_done("demo-fatal"));
  REQUIRE(n.wait_done("demo-flaky"));
  REQUIRE(n.wait_done("demo-recovery"));
  auto page = boost::json::parse(body_of(n.get("/api/tasks?limit=2")));
  CHECK(page.at("total").as_int64() == 3);
  CHECK(page.at("counts").at("done").as_int64() == 3);
  auto& first = page.at("tasks").as_array();
  REQUIRE(first.size() == 2);
  CHECK(first[0].at("task_id").as_string() == "demo-recovery");
  CHECK(first[1].at("task_id").as_string() == "demo-flaky");
  CHECK(page.at("next").as_string() == "demo-flaky");
  auto rest =
    boost::json::parse(body_of(n.get("/api/tasks?limit=2&after=demo-flaky")));
  auto& second = rest.at("tasks").as_array();
  REQUIRE(second.size() == 1);
  CHECK(second[0].at("task_id").as_string() == "demo-fatal");
  CHECK(rest.at("next").is_null());
  // The default page holds them all.
  CHECK(boost::json::parse(body_of(n.get("/api/tasks")))
          .at("tasks")
          .as_array()
          .size() == 3);
  n.process().signal(SIGTERM);
  CHECK(n.process().wait(30s) == 0);
}

TEST_CASE("serve --http: after a restart the figures count the earlier "
          "attempts of a task the node resumed") {
  scratch dir;
  auto waiting = waiting_task(dir);
  {
    web_node n{dir};
    REQUIRE(n.cmd({"submit", waiting}).status == 0);
    REQUIRE(eventually(
      [&] {
        return n.cmd({"status", "demo-waiting", "--json"})
                 .out.find("\"state\":\"backoff\"") != std::string::npos;
      },
      20s));
    // The journal commits events within 20 ms of their writing (inputs
    // before their effects): a kill in that window would lose the attempt's
    // events, which are what the figures count. So the node is killed once
    // every event it has shown is committed and nothing waits.
    auto shown = n.cmd({"events", "--json", "demo-waiting"});
    REQUIRE(shown.status == 0);
    double events = 0;
    for (std::size_t at = 0;
         (at = shown.out.find("\"event\":", at)) != std::string::npos; ++at)
      if (shown.out.compare(at, 13, "\"event\":\"log\"") != 0)
        ++events;
    REQUIRE(events > 0);
    REQUIRE(eventually(
      [&] {
        auto families = scrape(n, dir);
        return sample(families, "tasksup_journal_records_written",
                      "tasksup_journal_records_written_total",
                      {{"kind", "event"}}) >= events &&
               sample(families, "tasksup_journal_pending_writes",
                      "tasksup_journal_pending_writes", {}) == 0;
      },
      20s));
    // Killed, not stopped: the task stays unfinished in the journal.
    n.process().signal(SIGKILL);
    n.process().wait(30s);
  }
  web_node again{dir};
  auto st = again.cmd({"status", "demo-waiting", "--json"});
  REQUIRE(st.status == 0);
  CHECK(st.out.find("\"state\":\"backoff\"") != std::string::npos);
  // The attempt before the restart counts, once.
  boost::json::object families;
  REQUIRE(eventually(
    [&] {
      families = scrape(again, dir);
      return sample(families, "tasksup_attempts", "tasksup_attempts_total",
                    {{"agent", "flaky"}}) >= 1;
    },
    10s));
  CHECK(sample(families, "tasksup_attempts", "tasksup_attempts_total",
               {{"agent", "flaky"},
                {"class", "retryable"},
                {"decision", "retry"}}) == 1);
  CHECK(sample(families, "tasksup_attempt_duration_seconds",
               "tasksup_attempt_duration_seconds_count",
               {{"agent", "flaky"}}) == 1);
  auto agents = again.cmd({"agents", "--json"});
  REQUIRE(agents.status == 0);
  auto doc = boost::json::parse(agents.out);
  REQUIRE(doc.at("agents").as_array().size() == 1);
  CHECK(doc.at("agents").at(0).at("agent_id").as_string() == "flaky");
  CHECK(doc.at("agents").at(0).at("attempts").as_int64() == 1);
  again.cmd({"kill", "demo-waiting"});
  again.process().signal(SIGTERM);
  CHECK(again.process().wait(30s) == 0);
}

TEST_CASE("serve --http: /metrics shows the cluster: worker nodes, their "
          "slots, and tasks waiting for placement") {
  scratch dir;
  web_node n{dir, {"--heartbeat-ms", "200"}};
  tasksup_child worker{dir,
                       "w1",
                       {"serve", "--join", n.address(), "--name", "w1",
                        "--config", config_dir(), "--state-dir", dir / "w1",
                        "--certs", dir / "state/certs", "--heartbeat-ms", "200",
                        "--work-dir", dir / "w1-work"}};
  REQUIRE(eventually(
    [&] {
      return n.process().err().find("worker node w1 joined") !=
             std::string::npos;
    },
    20s));
  REQUIRE(n.cmd({"submit", example("demo-slow.json")}).status == 0);
  auto gpu = dir.write("needs-gpu.json",
                       R"({"id": "needs-gpu", "prompt": "Train it",
        "agent_selection": {"agents": [{"agent_id": "slow", "agent_cli": ")" +
                         example("agents/slow-agent") +
                         R"(", "cli_flags": "--seconds 1"}]},
        "placement": {"labels": {"gpu": "true"}}})");
  REQUIRE(n.cmd({"submit", gpu}).status == 0);
  boost::json::object families;
  REQUIRE(eventually(
    [&] {
      families = scrape(n, dir);
      return sample(families, "tasksup_node_slots_in_use",
                    "tasksup_node_slots_in_use", {{"node", "w1"}}) == 1;
    },
    20s));
  auto type = [&](const char* f) {
    return std::string{families.at(f).at("type").as_string()};
  };
  CHECK(type("tasksup_cluster_nodes") == "gauge");
  CHECK(type("tasksup_node_slots") == "gauge");
  CHECK(type("tasksup_placement_waiting") == "gauge");
  CHECK(sample(families, "tasksup_cluster_nodes", "tasksup_cluster_nodes",
               {}) == 1);
  // config/node.json: max_concurrent 4.
  CHECK(sample(families, "tasksup_node_slots", "tasksup_node_slots",
               {{"node", "w1"}}) == 4);
  CHECK(sample(families, "tasksup_placement_waiting",
               "tasksup_placement_waiting", {}) == 1);
  n.cmd({"kill", "demo-slow"});
  n.cmd({"kill", "needs-gpu"});
  // (A worker node ends on SIGTERM like one that lost its coordinator.)
  worker.signal(SIGTERM);
  worker.wait(30s);
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
  auto resp = n.exchange("POST /api/tasks/demo-slow/kill HTTP/1.1\r\n"
                         "Host: 127.0.0.1\r\nX-Tasksup-CSRF: 1\r\n"
                         "Content-Length: 0\r\n\r\n");
  REQUIRE(status_of(resp) == 200);
  CHECK(body_of(resp).find("\"ok\":true") != std::string::npos);
  REQUIRE(n.wait_done("demo-slow"));
  auto task = boost::json::parse(body_of(n.get("/api/tasks/demo-slow")));
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
  auto waiting = waiting_task(dir);
  REQUIRE(n.cmd({"submit", waiting}).status == 0);
  REQUIRE(eventually(
    [&] {
      return n.cmd({"status", "demo-waiting", "--json"})
               .out.find("\"state\":\"backoff\"") != std::string::npos;
    },
    20s));

  // Every page is opened with the token in the URL, as the node's log
  // gives it: the browser logs in (cookie) and lands on the page without it.
  auto login =
    "http://127.0.0.1:" + std::to_string(n.web()) + "/?token=" + n.token();
  auto loaded = std::string{"location.search === '' && "
                            "document.body.dataset.stream === 'open' && "
                            "document.getElementById('conn').textContent"
                            ".startsWith('live')"};
  dir.write("cdp.py", devtools_script);
  // Runs one page; its exit status (no Catch2 here: it may run on a thread).
  auto run_page = [&](const std::string& name, boost::json::object spec) {
    spec["dom"] = dir / (name + ".html");
    spec["timeout"] = 90;
    dir.write(name + ".json", boost::json::serialize(spec));
    return shell("timeout 120 /usr/bin/python3 " + dir / "cdp.py" + " " +
                 dir / (name + ".json") + " 2> " + dir / (name + ".err"));
  };
  auto page_text = [&](const std::string& name, int status) {
    INFO(slurp(dir / (name + ".err")));
    CHECK(status == 0);
    return slurp(dir / (name + ".html"));
  };
  auto browse = [&](const std::string& name, boost::json::object spec) {
    auto status = run_page(name, std::move(spec));
    return page_text(name, status);
  };
  auto step = [](const std::string& wait) {
    return boost::json::object{{"wait", wait}};
  };
  // Screenshots for the README, under the build tree.
  auto shot = std::filesystem::current_path() / "dashboard.png";
  auto shot_task = std::filesystem::current_path() / "dashboard-task.png";
  std::filesystem::remove(shot);
  std::filesystem::remove(shot_task);

  // The list, live: the page shows demo-slow running; it is killed from
  // the CLI meanwhile; the same page (no reload: the mark set on it stays)
  // shows it done, told by the event stream.
  auto ready = dir / "page-ready";
  auto slow_state =
    std::string{"document.querySelector('[data-task=\"demo-slow\"] "
                ".state').textContent"};
  auto first = step(loaded + " && " + slow_state + " === 'running'");
  first["eval"] = "window.tasksupMark = 42";
  first["touch"] = ready;
  boost::json::object live{
    {"url", login + "#/"},
    {"size", boost::json::array{1280, 640}},
    {"screenshot", shot.string()},
    {"steps",
     boost::json::array{first, step(slow_state + " === 'done' && "
                                                 "window.tasksupMark === 42 "
                                                 "&& Number(document.body."
                                                 "dataset.streamMessages) >= "
                                                 "1")}}};
  int list_status = -1;
  std::thread page{[&] { list_status = run_page("list", live); }};
  bool page_ready =
    eventually([&] { return std::filesystem::exists(ready); }, 90s);
  if (page_ready)
    n.cmd({"kill", "demo-slow"});
  page.join();
  auto list = page_text("list", list_status);
  REQUIRE(page_ready);
  CHECK(list.find("data-task=\"demo-recovery\"") != std::string::npos);
  CHECK(list.find("data-task=\"demo-flaky\"") != std::string::npos);
  CHECK(list.find("outcome outcome-succeeded") != std::string::npos);
  CHECK(list.find("live · updated") != std::string::npos);
  // Four tasks fit one page: no "more" control, nothing stray after.
  CHECK(list.find("id=\"more\"") == std::string::npos);
  CHECK(list.find("</table></main>") != std::string::npos);
  CHECK(std::regex_search(
    list, std::regex{"data-task=\"demo-slow\".*class=\"state state-done\">"
                     "done<.*outcome-stopped"}));
  // The waiting task counts down to its retry.
  CHECK(std::regex_search(
    list, std::regex{"data-task=\"demo-waiting\".*class=\"state "
                     "state-backoff\">backoff<.*data-deadline=\"[0-9.]+\">in "
                     "[0-9]+m"}));

  // A schedule shows under the tasks, with when it fires next.
  auto nightly = dir.write("nightly.json", R"({"cron": "0 3 * * *",
    "time_zone": "Europe/Berlin", "task": {"prompt": "p"}})");
  REQUIRE(n.cmd({"schedule", "add", nightly}).status == 0);
  auto api = n.get("/api/schedules");
  CHECK(status_of(api) == 200);
  CHECK(body_of(api).find("\"name\":\"nightly\"") != std::string::npos);
  boost::json::object schedules_page{
    {"url", login + "#/"},
    {"size", boost::json::array{1280, 640}},
    {"steps", boost::json::array{
                step(loaded + " && document.getElementById('schedules')")}}};
  auto schedules = browse("schedules", schedules_page);
  CHECK(std::regex_search(
    schedules, std::regex{"data-schedule=\"nightly\".*cron 0 3 \\* \\* \\* "
                          "Europe/Berlin.*class=\"next-run\">[0-9T:-]+Z \\(in "
                          "[0-9]"}));

  boost::json::object task_page{
    {"url", login + "#/task/demo-recovery"},
    {"size", boost::json::array{1280, 900}},
    {"screenshot", shot_task.string()},
    {"steps", boost::json::array{
                step(loaded + " && document.getElementById('task-title')")}}};
  auto task = browse("task", task_page);
  CHECK(task.find("Task demo-recovery") != std::string::npos);
  CHECK(task.find("classified agent_failure by rule") != std::string::npos);
  CHECK(task.find("fallback primary → backup") != std::string::npos);
  CHECK(task.find("delay from retry_after_hint") != std::string::npos);
  CHECK(task.find("class=\"bar ok\"") != std::string::npos);

  boost::json::object agents_page{
    {"url", login + "#/agents"},
    {"steps", boost::json::array{step(
                loaded + " && document.getElementById('fallback-order')")}}};
  auto agents = browse("agents", agents_page);
  CHECK(agents.find("data-agent=\"backup\"") != std::string::npos);
  CHECK(agents.find("id=\"fallback-order\"") != std::string::npos);
  // demo-recovery started four attempts: listed as restarting often.
  CHECK(std::regex_search(
    agents, std::regex{"<table id=\"restarting\">.*data-task=\"demo-"
                       "recovery\".*recovered in"}));
  CHECK(std::filesystem::exists(shot));
  CHECK(std::filesystem::exists(shot_task));

  // A group's page shows its tree, each member a link to its own page, and
  // offers only stop and kill.
  auto slow = example("agents/slow-agent");
  auto member = [&](const std::string& id) {
    return R"({"id": ")" + id +
           R"(", "prompt": "p", "agent_selection": {"agents": [{"agent_id": )"
           R"("slow", "agent_cli": ")" +
           slow + R"(", "cli_flags": "--seconds 600"}]}})";
  };
  REQUIRE(
    n.cmd({"submit",
           dir.write("pair.json", R"({"group": {"id": "pair", "members": [)" +
                                    member("pair-a") +
                                    R"(, {"group": {"id": )"
                                    R"("inner", "members": [)" +
                                    member("pair-b") + "]}}]}}")})
      .status == 0);
  boost::json::object group_page{
    {"url", login + "#/task/pair"},
    {"steps", boost::json::array{
                step(loaded + " && document.querySelector('#tree "
                              "[data-member=\"pair-b\"] .phase-running')")}}};
  auto group = browse("group", group_page);
  CHECK(group.find("Group pair") != std::string::npos);
  CHECK(std::regex_search(
    group, std::regex{"data-member=\"pair-a\".*href=\"#/task/pair-a\""}));
  CHECK(std::regex_search(
    group, std::regex{"data-member=\"inner\".*data-member=\"pair-b\""}));
  CHECK(std::regex_search(group, std::regex{"data-action=\"pause\" disabled"}));
  CHECK(group.find("every member started") != std::string::npos);
  n.cmd({"kill", "pair"});

  // A workflow's page draws its steps as a graph: an arrow for each
  // dependency, each step coloured by how it went; a step's page shows its
  // checked answer.
  auto answering = dir.write_script(
    "answer.sh", "#!/bin/sh\n"
                 "printf '```json\\n{\"summary\": \"plan it\"}\\n```\\n'\n");
  auto failing = dir.write_script("fail.sh", "#!/bin/sh\nexit 1\n");
  auto wf_step = [&](const std::string& id, const std::string& deps,
                     const std::string& cli, const std::string& extra) {
    return R"({"id": ")" + id + R"(", "depends_on": [)" + deps +
           R"(], "task": {"prompt": "p", )" + extra +
           R"("supervisor": {"max_retries_per_agent": 0},
             "agent_selection": {"agents": [{"agent_id": "sh", "agent_cli": ")" +
           cli + R"("}]}}})";
  };
  auto schema =
    std::string{R"("answer_schema": {"type": "object", "required": )"
                R"(["summary"]}, )"};
  REQUIRE(
    n.cmd({"submit",
           dir.write("wf.json",
                     R"({"id": "wf", "steps": [)" +
                       wf_step("plan", "", answering, schema) + ", " +
                       wf_step("code", R"("plan")", failing, "") + ", " +
                       wf_step("docs", R"("plan")", answering, "") + ", " +
                       wf_step("review", R"("code", "docs")", answering, "") +
                       "]}")})
      .status == 0);
  REQUIRE(n.wait_done("wf"));
  boost::json::object graph_page{
    {"url", login + "#/task/wf"},
    {"steps", boost::json::array{
                step(loaded + " && document.querySelectorAll('#graph .step')"
                              ".length === 4")}}};
  auto graph = browse("graph", graph_page);
  CHECK(std::regex_search(graph,
                          std::regex{"class=\"step phase-ended last-normal\" "
                                     "data-step=\"wf.plan\""}));
  CHECK(std::regex_search(graph,
                          std::regex{"class=\"step phase-ended last-failed\" "
                                     "data-step=\"wf.code\""}));
  CHECK(std::regex_search(
    graph, std::regex{"class=\"step phase-skipped\" data-step=\"wf.review\""}));
  // plan -> code, plan -> docs, code -> review, docs -> review.
  for (auto [from, to] :
       {std::pair{"plan", "code"}, std::pair{"plan", "docs"},
        std::pair{"code", "review"}, std::pair{"docs", "review"}})
    CHECK(graph.find(std::string{"class=\"edge\" data-from=\"wf."} + from +
                     "\" data-to=\"wf." + to + "\"") != std::string::npos);
  boost::json::object answer_page{
    {"url", login + "#/task/wf.plan"},
    {"steps", boost::json::array{
                step(loaded + " && document.getElementById('task-answer')")}}};
  auto answered = browse("answer", answer_page);
  // Text in a <pre> keeps its quotes.
  CHECK_THAT(answered, Catch::Contains("\"summary\": \"plan it\""));

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

namespace {

/// GitHub's `issues` event for issue `number` of octo-org/webapp, with
/// `action` and the issue author's `association`.
std::string issue_event(int number, const std::string& action,
                        const std::string& association,
                        const std::string& title) {
  return R"({"action": ")" + action + R"(",
    "issue": {"html_url": "https://github.com/octo-org/webapp/issues/)" +
         std::to_string(number) + R"(", "number": )" + std::to_string(number) +
         R"(, "title": ")" + title + R"(", "state": "open",
      "user": {"login": "alice"}, "author_association": ")" +
         association + R"(", "body": "The button is 3px off."},
    "label": {"name": "agent"},
    "repository": {"full_name": "octo-org/webapp"},
    "sender": {"login": "alice"}})";
}

/// A POST of `body` to `path`, with `headers` ("Name: value\r\n" each).
std::string post(int port, const std::string& path, const std::string& body,
                 const std::string& headers) {
  return http_exchange(port, "POST " + path +
                               " HTTP/1.1\r\nHost: hooks.example.org\r\n" +
                               headers +
                               "Content-Type: application/json\r\n"
                               "Content-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body);
}

/// A config directory for the webhook tests: `agent` the default agent
/// (its prompt as its argument, on the process runtime), `secret` in
/// github.secret, and an empty triggers/.
void webhook_config(const scratch& dir, const std::string& agent,
                    const std::string& secret) {
  std::filesystem::create_directories(dir / "config/triggers");
  dir.write("config/node.json",
            R"({"default_agent": {"agent_id": "sh", "agent_cli": ")" + agent +
              R"(", "cli_flags": "", "prompt_as_argument": true},
               "default_runtime": "process"})");
  dir.write("config/github.secret", secret + "\n");
}

/// GitHub's headers for a delivery of `event` signed with `secret`.
std::string github_headers(const std::string& event,
                           const std::string& delivery,
                           const std::string& signature) {
  return "X-GitHub-Event: " + event + "\r\nX-GitHub-Delivery: " + delivery +
         "\r\nX-Hub-Signature-256: " + signature + "\r\n";
}

} // namespace

TEST_CASE("serve --http: GitHub webhooks signed with a trigger's secret start "
          "and stop tasks, and a replay, a bad signature, a stranger and "
          "another event start none") {
  scratch dir;
  // The agent records its prompt; a title with "hold" keeps it running.
  auto agent = dir.write_script(
    "agent.sh", "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '" + dir / "ran.txt" +
                  "'\ncase \"$1\" in *hold*) exec sleep 60 ;; esac\n");
  std::string secret = "It's a Secret to Everybody";
  webhook_config(dir, agent, secret);
  dir.write("config/triggers/issues.json", R"({
    "source": "github", "secret_file": "github.secret",
    "on": {"event": "issues", "action": "labeled", "label": "agent"},
    "allow": {"author_association": ["OWNER", "MEMBER", "COLLABORATOR"]},
    "task": {"prompt": "{{issue.title}}: {{issue.body}}",
             "supervisor": {"stop_grace_s": 2}}})");
  tasksup_child node{dir,
                     "serve",
                     {"serve", "--listen", "127.0.0.1:0", "--http",
                      "127.0.0.1:0", "--config", dir / "config", "--work-dir",
                      dir / "work", "--state-dir", dir / "state"}};
  auto port = listening_port(node);
  auto web = http_login(node);
  REQUIRE(port);
  REQUIRE(web);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto deliver = [&](const std::string& event, const std::string& delivery,
                     const std::string& body) {
    return post(
      web->port, "/hooks/github", body,
      github_headers(event, delivery, tasksup::sign_body(secret, body)));
  };
  auto results = [](const std::string& response) {
    auto doc = boost::json::parse(body_of(response));
    return doc.at("results").as_array();
  };
  // A member labels issue 7: its task runs with the issue in its prompt.
  auto labeled = issue_event(7, "labeled", "MEMBER", "Fix the login");
  auto first = deliver("issues", "d-1", labeled);
  INFO(first);
  REQUIRE(status_of(first) == 200);
  auto started = results(first);
  REQUIRE(started.size() == 1);
  CHECK(text_at(started[0].as_object(), "action") == "start");
  auto task_id = text_at(started[0].as_object(), "task_id");
  CHECK_THAT(task_id, Catch::Contains("7"));
  REQUIRE(eventually(
    [&] {
      return slurp(dir / "ran.txt") ==
             "Fix the login: The button is 3px off.\n";
    },
    30s));
  // The same delivery again: nothing done. Another delivery about the
  // same issue: no second task.
  auto replay = deliver("issues", "d-1", labeled);
  REQUIRE(status_of(replay) == 200);
  CHECK(boost::json::parse(body_of(replay)).at("replayed") == true);
  auto relabeled = deliver("issues", "d-1b", labeled);
  REQUIRE(status_of(relabeled) == 200);
  CHECK(text_at(results(relabeled)[0].as_object(), "action") == "exists");
  // Signed with another secret, or not at all: 401, nothing runs.
  auto other = issue_event(8, "labeled", "MEMBER", "Other");
  auto forged =
    post(web->port, "/hooks/github", other,
         github_headers("issues", "d-2",
                        tasksup::sign_body("not the secret", other)));
  CHECK(status_of(forged) == 401);
  auto unsigned_ = post(web->port, "/hooks/github", other,
                        "X-GitHub-Event: issues\r\nX-GitHub-Delivery: d-3\r\n");
  CHECK(status_of(unsigned_) == 401);
  // Another event: nothing to do, 204.
  CHECK(status_of(deliver("push", "d-4", R"({"ref": "refs/heads/main"})")) ==
        204);
  CHECK(status_of(deliver("ping", "d-5", R"({"zen": "hi"})")) == 200);
  // A stranger's issue: refused, no task.
  auto stranger = deliver("issues", "d-6",
                          issue_event(9, "labeled", "NONE", "Run this hold"));
  REQUIRE(status_of(stranger) == 200);
  CHECK(text_at(results(stranger)[0].as_object(), "action") == "refuse");
  // Not JSON: 400.
  CHECK(status_of(deliver("issues", "d-7", "{nope")) == 400);
  // A member's issue that holds, then closed: its task is stopped.
  auto held = deliver("issues", "d-8",
                      issue_event(10, "labeled", "OWNER", "Please hold"));
  REQUIRE(status_of(held) == 200);
  auto held_id = text_at(results(held)[0].as_object(), "task_id");
  REQUIRE(eventually(
    [&] {
      return slurp(dir / "ran.txt").find("Please hold") != std::string::npos;
    },
    30s));
  auto closed =
    deliver("issues", "d-9", issue_event(10, "closed", "OWNER", "Please hold"));
  REQUIRE(status_of(closed) == 200);
  CHECK(text_at(results(closed)[0].as_object(), "action") == "stop");
  auto waited = run_to_end(
    dir, std::vector<std::string>{"wait", held_id, "--node", address}, 30s);
  CHECK(waited.status == 130);
  // Two runs in all: issue 7 once, issue 10 once.
  auto ran = slurp(dir / "ran.txt");
  CHECK(std::count(ran.begin(), ran.end(), '\n') == 2);
}

TEST_CASE("serve --http: a trigger's report takes each task's result to its "
          "command and URL once, across a kill -9 of the node, and a "
          "replayed delivery does nothing") {
  scratch dir;
  hook_server hook;
  // The agent records its prompt; a title with "hold" waits for `go`.
  auto agent = dir.write_script(
    "agent.sh", "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '" + dir / "ran.txt" +
                  "'\ncase \"$1\" in *hold*) while [ ! -f '" + dir / "go" +
                  "' ]; do sleep 0.1; done ;; esac\n");
  std::string secret = "It's a Secret to Everybody";
  webhook_config(dir, agent, secret);
  dir.write(
    "config/triggers/issues.json",
    R"({"source": "github", "secret_file": "github.secret",
        "on": {"event": "issues", "action": "labeled", "label": "agent"},
        "allow": {"author_association": ["OWNER", "MEMBER"]},
        "task": {"prompt": "{{issue.title}}"},
        "report": {
          "command": ["sh", "-c", "cat >> ')" +
      dir / "reports.jsonl" +
      R"('; echo {{task.outcome}} {{issue.number}} {{sender.login}} >> ')" +
      dir / "args.txt" + R"('"],
          "url": "http://127.0.0.1:)" +
      std::to_string(hook.port()) + R"(/results"}})");
  std::vector<std::string> args{"serve",        "--listen",    "127.0.0.1:0",
                                "--http",       "127.0.0.1:0", "--config",
                                dir / "config", "--work-dir",  dir / "work",
                                "--state-dir",  dir / "state"};
  auto node = std::make_unique<tasksup_child>(dir, "serve", args);
  auto web = http_login(*node);
  REQUIRE(web);
  auto deliver = [&](const std::string& delivery, const std::string& body) {
    return post(
      web->port, "/hooks/github", body,
      github_headers("issues", delivery, tasksup::sign_body(secret, body)));
  };
  auto reports = [&] { return json_lines(slurp(dir / "reports.jsonl")); };
  auto logged = [&](const std::string& line) {
    return eventually(
      [&] { return node->err().find(line) != std::string::npos; }, 30s);
  };

  // Issue 7 runs and ends: its result goes to the command (the event and
  // the delivery it came from) and, after one 503, to the URL.
  auto first = deliver("d-7", issue_event(7, "labeled", "MEMBER", "Quick"));
  INFO(first);
  REQUIRE(status_of(first) == 200);
  // The node logs the delivery once the command exited: both of its files
  // are complete then.
  REQUIRE(logged("[gh-octo-org-webapp-7] reported (command, try 1)"));
  REQUIRE(reports().size() == 1);
  auto r7 = reports().at(0);
  CHECK(r7.at("event").as_string() == "task_done");
  CHECK(r7.at("task_id").as_string() == "gh-octo-org-webapp-7");
  CHECK(r7.at("outcome").as_string() == "succeeded");
  CHECK(r7.at("trigger") == boost::json::parse(R"({"trigger": "issues",
    "delivery": "d-7", "event": "issues", "repository": "octo-org/webapp",
    "issue_url": "https://github.com/octo-org/webapp/issues/7",
    "sender": "alice", "issue_number": 7})"));
  CHECK(slurp(dir / "args.txt") == "succeeded 7 alice\n");
  REQUIRE(logged("[gh-octo-org-webapp-7] reported (url, try 2)"));
  REQUIRE(hook.bodies().size() == 1);
  CHECK(boost::json::parse(hook.bodies()[0]) == r7);

  // The same delivery again: nothing is done, and the answer says so.
  auto replay = deliver("d-7", issue_event(7, "labeled", "MEMBER", "Quick"));
  REQUIRE(status_of(replay) == 200);
  auto replayed = boost::json::parse(body_of(replay));
  CHECK(replayed.at("replayed") == true);
  CHECK(replayed.at("delivery") == "d-7");
  // Another delivery about issue 7 finds its task.
  auto again = deliver("d-7b", issue_event(7, "labeled", "MEMBER", "Quick"));
  REQUIRE(status_of(again) == 200);
  CHECK(boost::json::parse(body_of(again)).at("results").at(0).at("action") ==
        "exists");

  // Issue 8 holds; the node is killed while it runs.
  auto held = deliver("d-8", issue_event(8, "labeled", "OWNER", "Please hold"));
  REQUIRE(status_of(held) == 200);
  REQUIRE(eventually(
    [&] {
      return slurp(dir / "ran.txt").find("Please hold") != std::string::npos;
    },
    30s));
  // The restarted node remembers the deliveries and the waiting report.
  REQUIRE(kill_and_restart(dir, node, "serve-again", args));
  web = http_login(*node);
  REQUIRE(web);
  auto replay8 =
    deliver("d-8", issue_event(8, "labeled", "OWNER", "Please hold"));
  REQUIRE(status_of(replay8) == 200);
  CHECK(boost::json::parse(body_of(replay8)).at("replayed") == true);
  dir.write("go", "");
  REQUIRE(logged("[gh-octo-org-webapp-8] reported (url, try 1)"));
  REQUIRE(logged("[gh-octo-org-webapp-8] reported (command, try 1)"));
  // One report each: issue 7's, delivered before the kill, not again.
  auto all = reports();
  REQUIRE(all.size() == 2);
  CHECK(all[1].at("task_id").as_string() == "gh-octo-org-webapp-8");
  CHECK(all[1].at("outcome").as_string() == "succeeded");
  CHECK(all[1].at("trigger").at("delivery") == "d-8");
  CHECK(slurp(dir / "args.txt") == "succeeded 7 alice\nsucceeded 8 alice\n");
  CHECK(hook.bodies().size() == 2);
  // Each issue ran once.
  auto ran = slurp(dir / "ran.txt");
  CHECK(std::count(ran.begin(), ran.end(), '\n') == 2);
  node->signal(SIGTERM);
  CHECK(node->wait(30s) == 0);
}

// Coordinators that share a PostgreSQL journal: one leads, the others stand
// by and say who leads; a standby takes over when the leader is killed, the
// workers follow it, and every task ends once; a deposed leader cannot
// write and exits. The real tasksup binary, the tests' PostgreSQL server.

#include "tasksup_child.hpp"

#include "../postgres_server.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

using namespace tasksup::test;
using namespace std::chrono_literals;

namespace {

/// Two coordinators (a, b) on one shared journal, and worker nodes that
/// join them both.
class shared_journal_cluster {
public:
  explicit shared_journal_cluster(double lease_s) : lease_(lease_s) {
    agent_ = dir_.write_script("agent.sh", "#!/bin/sh\n"
                                           "echo \"start $TASKSUP_TASK_ID "
                                           "$TASKSUP_ATTEMPT\" >> '" +
                                             (dir_ / "ran.txt") +
                                             "'\n"
                                             "sleep \"$1\"\n"
                                             "echo \"end $TASKSUP_TASK_ID "
                                             "$TASKSUP_ATTEMPT\" >> '" +
                                             (dir_ / "ran.txt") +
                                             "'\n"
                                             "echo done\n");
    ports_ = {unused_port(), unused_port()};
    // One CA for the coordinators, the workers and the commands (these
    // find it through TASKSUP_STATE_DIR).
    auto certs = run_to_end(dir_, {"certs", "init", dir_ / "state/certs"});
    INFO(certs.err);
    REQUIRE(certs.status == 0);
  }

  std::string address(int i) const {
    return "127.0.0.1:" + std::to_string(ports_.at(i));
  }

  /// Starts coordinator `i` (0: a, 1: b) as its `n`th start.
  tasksup_child& start(int i) {
    std::string name = i == 0 ? "a" : "b";
    std::vector<std::string> args{"serve",
                                  "--listen",
                                  address(i),
                                  "--config",
                                  config("coordinator", 4),
                                  "--state-dir",
                                  dir_ / ("state-" + name),
                                  "--journal",
                                  db_.url,
                                  "--leader-lease",
                                  std::to_string(lease_),
                                  "--heartbeat-ms",
                                  "200",
                                  "--certs",
                                  dir_ / "state/certs"};
    coordinators_[i] = std::make_unique<tasksup_child>(
      dir_, name + "-" + std::to_string(++starts_), args);
    return *coordinators_[i];
  }

  tasksup_child& coordinator(int i) { return *coordinators_.at(i); }

  /// Starts a, waits until it leads at epoch 1, then b, until it stands by
  /// naming a as the leader.
  void start_leader_and_standby() {
    start(0);
    wait_log(0, "leading (epoch 1;");
    start(1);
    wait_log(1, "stands by: " + address(0) + " leads (epoch 1");
  }

  /// Waits until coordinator `i`'s log holds `text`.
  void wait_log(int i, const std::string& text,
                std::chrono::milliseconds limit = 20s) {
    auto& c = coordinator(i);
    auto seen = eventually(
      [&] { return c.err().find(text) != std::string::npos; }, limit);
    INFO(c.err());
    REQUIRE(seen);
  }

  /// Starts worker `name`, joining both coordinators.
  tasksup_child& add_worker(const std::string& name, int slots) {
    workers_.push_back(std::make_unique<tasksup_child>(
      dir_, name,
      std::vector<std::string>{"serve", "--join", address(0) + "," + address(1),
                               "--name", name, "--config", config(name, slots),
                               "--state-dir", dir_ / name, "--heartbeat-ms",
                               "200", "--lease", "1.5"}));
    return *workers_.back();
  }

  /// Submits a task to coordinator `i` whose agent works `seconds`.
  void submit(int i, const std::string& id, double seconds) {
    auto file = dir_.write(
      id + ".json", R"({"id": ")" + id + R"(", "prompt": ")" +
                      std::to_string(seconds) +
                      R"(", "supervisor": {"backoff_base_seconds": 0.2}})");
    auto r = run_to_end(dir_, {"submit", "--node", address(i), file});
    INFO(r.err);
    REQUIRE(r.status == 0);
  }

  /// Task `id`'s outcome at coordinator `i` once done (within `limit`).
  std::string outcome(int i, const std::string& id,
                      std::chrono::seconds limit = 60s) {
    std::string out;
    auto done = eventually(
      [&] {
        auto r =
          run_to_end(dir_, {"status", "--json", "--node", address(i), id});
        auto lines = json_lines(r.out);
        if (r.status != 0 || lines.empty() || lines[0]["state"] != "done")
          return false;
        out = std::string{lines[0].at("result").at("outcome").as_string()};
        return true;
      },
      limit);
    INFO(coordinator(i).err());
    REQUIRE(done);
    return out;
  }

  finished command(const std::vector<std::string>& args) {
    return run_to_end(dir_, args);
  }

  const postgres_database& db() const { return db_; }

  const scratch& dir() const { return dir_; }

  /// How many times task `id`'s agent started (`what` "start") or ran to
  /// its end ("end").
  int count(const std::string& what, const std::string& id) const {
    auto ran = slurp(dir_ / "ran.txt");
    auto needle = what + " " + id + " ";
    int n = 0;
    for (auto at = ran.find(needle); at != std::string::npos;
         at = ran.find(needle, at + 1))
      n += at == 0 || ran[at - 1] == '\n';
    return n;
  }

  /// How many processes run this cluster's agent now.
  int agents_running() const {
    int n = 0;
    auto agent = dir_ / "agent.sh";
    std::error_code ec;
    for (std::filesystem::directory_iterator it{"/proc", ec}, end;
         !ec && it != end; it.increment(ec)) {
      // A process that ended meanwhile has no command line: "".
      auto cmdline = slurp(it->path().string() + "/cmdline");
      if (cmdline.find(agent) != std::string::npos)
        ++n;
    }
    return n;
  }

private:
  std::string config(const std::string& name, int slots) {
    auto dir = dir_ / ("config-" + name);
    std::filesystem::create_directories(dir);
    std::ofstream{dir + "/node.json"}
      << R"({"max_concurrent": )" << slots
      << R"(, "default_agent": {"agent_id": "sh", "agent_cli": ")" << agent_
      << R"(", "cli_flags": "", "prompt_as_argument": true},
            "default_runtime": "process"})";
    return dir;
  }

  postgres_database db_;
  scratch dir_;
  double lease_;
  std::string agent_;
  std::vector<int> ports_;
  int starts_ = 0;
  std::array<std::unique_ptr<tasksup_child>, 2> coordinators_;
  std::vector<std::unique_ptr<tasksup_child>> workers_;
};

} // namespace

// Catch's console reporter indents a long name's later lines by the
// position of its first ": ", and aborts when that passes its 80 columns:
// the colon stays early.
TEST_CASE("failover: a standby says who leads, takes over when the leader is "
          "killed, and the workers follow it, and every task ends once",
          "[postgres]") {
  shared_journal_cluster c{2};
  c.start_leader_and_standby();
  // A standby's status and nodes say who leads and where to ask.
  for (auto* cmd : {"status", "nodes"}) {
    auto r = c.command({cmd, "--node", c.address(1)});
    INFO(cmd << ": " << r.err);
    CHECK(r.status == 3);
    CHECK_THAT(r.err, Catch::Contains(c.address(0) + " leads (epoch 1") &&
                        Catch::Contains("--node " + c.address(0)));
  }
  // Attempts run on workers only: a task waits for one.
  c.submit(0, "early", 0.1);
  c.add_worker("w1", 4);
  c.wait_log(0, "worker node w1 joined");
  CHECK(c.outcome(0, "early") == "succeeded");
  // Tasks running on the worker when the leader dies: the worker keeps
  // them, and the new leader adopts them (their reports held if they
  // ended meanwhile): none runs again.
  for (int i = 0; i < 3; ++i)
    c.submit(0, "t" + std::to_string(i), 2);
  REQUIRE(eventually(
    [&] {
      return c.count("start", "t0") + c.count("start", "t1") +
               c.count("start", "t2") ==
             3;
    },
    10s));
  c.coordinator(0).signal(SIGKILL);
  c.wait_log(1, "leading (epoch 2;", 30s);
  c.wait_log(1, "worker node w1 joined");
  for (int i = 0; i < 3; ++i) {
    auto id = "t" + std::to_string(i);
    INFO(id);
    CHECK(c.outcome(1, id) == "succeeded");
    CHECK(c.count("start", id) == 1);
    CHECK(c.count("end", id) == 1);
  }
  CHECK(c.outcome(1, "early") == "succeeded");
  // The old leader, started again, stands by.
  c.start(0);
  c.wait_log(0, "stands by: " + c.address(1) + " leads (epoch 2");
  auto r = c.command({"status", "--node", c.address(0)});
  CHECK(r.status == 3);
  CHECK_THAT(r.err, Catch::Contains(c.address(1) + " leads"));
}

TEST_CASE("a deposed leader cannot write and exits at once", "[postgres]") {
  shared_journal_cluster c{1};
  c.start_leader_and_standby();
  // The leader freezes past its lease: the standby takes over.
  c.coordinator(0).signal(SIGSTOP);
  c.wait_log(1, "leading (epoch 2;", 30s);
  c.coordinator(0).signal(SIGCONT);
  auto status = c.coordinator(0).wait(20s);
  INFO(c.coordinator(0).err());
  CHECK(status == 75);
  CHECK_THAT(c.coordinator(0).err(),
             Catch::Contains("exiting at once (status 75)"));
  // The new leader works.
  c.add_worker("w1", 2);
  c.wait_log(1, "worker node w1 joined");
  c.submit(1, "after", 0.1);
  CHECK(c.outcome(1, "after") == "succeeded");
}

TEST_CASE("a leader stopped by a signal hands over at once, not when its "
          "lease would expire",
          "[postgres]") {
  // A lease far longer than the wait below: only a release lets b lead.
  shared_journal_cluster c{60};
  c.start_leader_and_standby();
  c.coordinator(0).signal(SIGTERM);
  CHECK(c.coordinator(0).wait(30s) == 0);
  c.wait_log(1, "leading (epoch 2;", 15s);
}

TEST_CASE("repeated failovers while tasks run on two workers: every task "
          "succeeds, none runs to its end twice, nothing is left running",
          "[postgres]") {
  shared_journal_cluster c{1};
  c.start_leader_and_standby();
  c.add_worker("w1", 3);
  c.add_worker("w2", 3);
  c.wait_log(0, "worker node w1 joined");
  c.wait_log(0, "worker node w2 joined");
  constexpr int tasks = 24;
  for (int i = 0; i < tasks; ++i)
    c.submit(0, "t" + std::to_string(i), 0.5);
  // Four kills of the leader, each once the other leads and the killed one
  // stands by again.
  int leader = 0;
  for (int k = 0; k < 4; ++k) {
    int other = 1 - leader;
    c.coordinator(leader).signal(SIGKILL);
    REQUIRE(c.coordinator(leader).wait(10s) == 128 + SIGKILL);
    c.wait_log(other, "leading (epoch " + std::to_string(k + 2) + ";", 30s);
    c.start(leader);
    c.wait_log(leader, "stands by: " + c.address(other) + " leads (epoch " +
                         std::to_string(k + 2));
    leader = other;
  }
  for (int i = 0; i < tasks; ++i)
    CHECK(c.outcome(leader, "t" + std::to_string(i), 120s) == "succeeded");
  // Every task's agent ran to its end exactly once (adopted across the
  // failovers, never run again); every attempt has ended: no agent runs
  // on.
  INFO(slurp(c.dir() / "ran.txt"));
  for (int i = 0; i < tasks; ++i)
    CHECK(c.count("end", "t" + std::to_string(i)) == 1);
  CHECK(eventually([&] { return c.agents_running() == 0; }, 10s));
}

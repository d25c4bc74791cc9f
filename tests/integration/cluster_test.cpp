// A coordinator and worker nodes as real processes on loopback: attempts
// placed by capacity and labels, a worker killed or frozen mid-attempt and
// its attempt finished on another within the bounds, a coordinator killed
// and restarted with its workers joining again and no task lost.

#include "tasksup_child.hpp"
#include "tls_peer.hpp"

#include <boost/json/parse.hpp>

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace tasksup;
using namespace tasksup::test;
using namespace std::chrono_literals;

namespace {

/// One start of an agent, as the agent recorded it.
struct start_line {
  std::string task;
  int attempt = 0;
  /// The worker node it ran on (from its directory).
  std::string node;
  double at = 0;
  /// The agent's process id.
  int pid = 0;
};

/// A coordinator with worker nodes, all in one scratch directory.
class cluster {
public:
  explicit cluster(std::vector<std::string> coordinator_flags = {}) {
    ran_ = dir_ / "ran.txt";
    release_ = dir_ / "release";
    // Records each start (task, attempt, where, when) and each clean end;
    // the prompt says how long to work: "<seconds>" or "<first> <later>"
    // (the first attempt works longer).
    agent_ = dir_.write(
      "agent.sh",
      "#!/bin/sh\n"
      "echo \"start $TASKSUP_TASK_ID $TASKSUP_ATTEMPT $PWD "
      "$(date +%s.%N) $$\" >> '" +
        ran_ +
        "'\n"
        "echo \"working on $TASKSUP_TASK_ID attempt $TASKSUP_ATTEMPT\"\n"
        "set -- $*\n"
        "if [ \"$1\" = hold ]; then\n"
        "  n=0; while [ ! -e '" +
        release_ +
        "' ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done\n"
        "  set -- 0\n"
        "fi\n"
        "t=$1\n"
        "if [ \"$TASKSUP_ATTEMPT\" -gt 1 ] && [ -n \"$2\" ]; then t=$2; fi\n"
        "sleep \"$t\"\n"
        "echo \"end $TASKSUP_TASK_ID $TASKSUP_ATTEMPT\" >> '" +
        ran_ + "'\n");
    ::chmod(agent_.c_str(), 0755);
    port_ = unused_port();
    coordinator_flags_ = std::move(coordinator_flags);
    start_coordinator();
  }

  /// Starts (or starts again) the coordinator on the same port and state.
  void start_coordinator() {
    auto config = write_config("coordinator", 4);
    std::vector<std::string> args{
      "serve",       "--listen",     address(),        "--config", config,
      "--state-dir", dir_ / "state", "--heartbeat-ms", "200"};
    args.insert(args.end(), coordinator_flags_.begin(),
                coordinator_flags_.end());
    coordinator_ = std::make_unique<tasksup_child>(
      dir_, "coordinator-" + std::to_string(++starts_), args);
    INFO(coordinator_->err());
    REQUIRE(listening_port(*coordinator_));
  }

  /// Starts worker node `name` with `slots` attempts at once and `flags`;
  /// returns once the coordinator says it joined.
  tasksup_child& add_worker(const std::string& name, int slots,
                            std::vector<std::string> flags = {}) {
    auto args = worker_args(name, slots);
    args.insert(args.end(), flags.begin(), flags.end());
    auto& w = workers_[name];
    w = std::make_unique<tasksup_child>(dir_, name, args);
    wait_joined(name, 1);
    return *w;
  }

  /// The arguments that start worker node `name` with `slots` attempts at
  /// once.
  std::vector<std::string> worker_args(const std::string& name, int slots,
                                       const std::string& state = {}) {
    auto config = write_config(name, slots);
    return {"serve",
            "--join",
            address(),
            "--name",
            name,
            "--config",
            config,
            "--state-dir",
            dir_ / (state.empty() ? name : state),
            "--heartbeat-ms",
            "200",
            "--lease",
            "1.5"};
  }

  /// Waits until the coordinator's current log says `name` joined `n`
  /// times (a worker the test started itself).
  void wait_joined_log(const std::string& name, int n) {
    auto needle = "worker node " + name + " joined";
    auto joined = eventually(
      [&] {
        auto log = coordinator_->err();
        int count = 0;
        for (auto at = log.find(needle); at != std::string::npos;
             at = log.find(needle, at + 1))
          ++count;
        return count >= n;
      },
      20s);
    INFO(coordinator_->err());
    REQUIRE(joined);
  }

  /// Waits until the coordinator's current log says `name` joined `n`
  /// times.
  void wait_joined(const std::string& name, int n) {
    INFO(workers_.at(name)->err());
    wait_joined_log(name, n);
  }

  tasksup_child& worker(const std::string& name) { return *workers_.at(name); }
  tasksup_child& coordinator() { return *coordinator_; }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  /// Submits one task; returns its id.
  std::string submit(const std::string& id, const std::string& prompt,
                     const std::string& extra = "") {
    auto file = dir_.write(
      id + ".json", R"({"id": ")" + id + R"(", "prompt": ")" + prompt +
                      R"(", "supervisor": {"backoff_base_seconds": 0.2})" +
                      extra + "}");
    auto r = run_to_end(dir_, {"submit", "--node", address(), file});
    INFO(r.err);
    REQUIRE(r.status == 0);
    return id;
  }

  /// The agent starts recorded so far.
  std::vector<start_line> starts() const {
    std::vector<start_line> out;
    std::istringstream in{slurp(ran_)};
    std::string word;
    while (in >> word) {
      if (word == "end") {
        std::string task;
        int attempt = 0;
        in >> task >> attempt;
        continue;
      }
      start_line s;
      std::string pwd;
      in >> s.task >> s.attempt >> pwd >> s.at >> s.pid;
      // <dir>/<node>/attempts/<task>/attempt-<n>/workspace
      for (auto& [name, w] : workers_)
        if (pwd.rfind(dir_ / name + "/", 0) == 0)
          s.node = name;
      out.push_back(s);
    }
    return out;
  }

  /// How many attempts of `task` ended cleanly (their agent finished).
  int clean_ends(const std::string& task) const {
    std::istringstream in{slurp(ran_)};
    std::string line;
    int n = 0;
    while (std::getline(in, line))
      if (line.rfind("end " + task + " ", 0) == 0)
        ++n;
    return n;
  }

  /// The task's status as JSON, once it is done (within `limit`).
  boost::json::object wait_done(const std::string& id,
                                std::chrono::seconds limit = 30s) {
    boost::json::object out;
    auto done = eventually(
      [&] {
        auto r =
          run_to_end(dir_, {"status", "--json", "--node", address(), id});
        if (r.status != 0)
          return false;
        auto lines = json_lines(r.out);
        if (lines.empty())
          return false;
        out = lines.front();
        return out["state"] == "done";
      },
      limit);
    INFO(coordinator_->err());
    REQUIRE(done);
    return out;
  }

  /// The task's events (JSON lines).
  std::vector<boost::json::object> events(const std::string& id) {
    auto r = run_to_end(dir_, {"events", "--json", "--node", address(), id});
    return json_lines(r.out);
  }

  const scratch& dir() const { return dir_; }

  /// Lets the agents prompted "hold" finish.
  void release() { std::ofstream{release_} << "go\n"; }

private:
  std::string write_config(const std::string& name, int slots) {
    auto config = dir_ / ("config-" + name);
    std::filesystem::create_directories(config);
    std::ofstream{config + "/node.json"}
      << R"({"max_concurrent": )" << slots
      << R"(, "default_agent": {"agent_id": "sh", "agent_cli": ")" << agent_
      << R"(", "cli_flags": "", "prompt_as_argument": true},
            "default_runtime": "process"})";
    return config;
  }

  scratch dir_;
  std::string ran_;
  /// Agents prompted "hold" work until this file exists.
  std::string release_;
  std::string agent_;
  int port_ = 0;
  int starts_ = 0;
  std::vector<std::string> coordinator_flags_;
  std::unique_ptr<tasksup_child> coordinator_;
  std::map<std::string, std::unique_ptr<tasksup_child>> workers_;
};

/// The starts of `task`, in order.
std::vector<start_line> starts_of(const cluster& c, const std::string& task) {
  std::vector<start_line> out;
  for (auto& s : c.starts())
    if (s.task == task)
      out.push_back(s);
  return out;
}

/// The first event of `kind`, if any.
const boost::json::object*
find_event(const std::vector<boost::json::object>& evs,
           const std::string& kind) {
  for (auto& e : evs)
    if (e.at("event") == kind.c_str())
      return &e;
  return nullptr;
}

} // namespace

TEST_CASE("cluster: attempts go to the fitting worker with the most free "
          "slots, a task nothing fits waits and status says why",
          "[cluster]") {
  cluster c;
  c.add_worker("w1", 1, {"--label", "gpu=true"});
  c.add_worker("w2", 3);
  c.add_worker("w3", 2);
  // The gpu task holds w1's only slot until the test lets it go.
  c.submit("gpu", "hold", R"(, "placement": {"labels": {"gpu": "true"}})");
  REQUIRE(eventually([&] { return starts_of(c, "gpu").size() == 1; }, 10s));
  CHECK(starts_of(c, "gpu").front().node == "w1");
  // Five more fill w2 (3) and w3 (2); w1 is busy with the gpu task.
  for (int i = 0; i < 5; ++i)
    c.submit("t" + std::to_string(i), "hold");
  REQUIRE(eventually([&] { return c.starts().size() == 6; }, 10s));
  std::map<std::string, int> per_node;
  for (auto& s : c.starts())
    ++per_node[s.node];
  CHECK(per_node["w1"] == 1);
  CHECK(per_node["w2"] == 3);
  CHECK(per_node["w3"] == 2);
  // The coordinator lists its nodes with what runs on each.
  auto listed = run_to_end(c.dir(), {"nodes", "--json", "--node", c.address()});
  REQUIRE(listed.status == 0);
  auto list = boost::json::parse(listed.out).as_array();
  REQUIRE(list.size() == 3);
  CHECK(list[0].at("name") == "w1");
  CHECK(list[0].at("labels").at("gpu") == "true");
  CHECK(list[1].at("running") == 3);
  CHECK(list[2].at("max_concurrent") == 2);
  // Running tasks say where; a task no node fits waits, saying why.
  auto r = run_to_end(c.dir(), {"status", "--node", c.address()});
  CHECK_THAT(r.out, Catch::Contains("NODE") && Catch::Contains("w2"));
  c.submit("tpu", "1", R"(, "placement": {"labels": {"tpu": "v5"}})");
  r = run_to_end(c.dir(), {"status", "--node", c.address(), "tpu"});
  CHECK_THAT(r.out,
             Catch::Contains("no worker node with the process runtime has "
                             "label tpu=v5"));
  c.release();
  for (auto id : {"gpu", "t0", "t1", "t2", "t3", "t4"}) {
    auto st = c.wait_done(id);
    CHECK(st.at("result").at("outcome") == "succeeded");
    CHECK(st.at("total_attempts") == 1);
  }
  // A node with the label joins: the waiting task runs there.
  c.add_worker("w4", 1, {"--label", "tpu=v5"});
  auto st = c.wait_done("tpu");
  CHECK(st.at("result").at("outcome") == "succeeded");
  REQUIRE(starts_of(c, "tpu").size() == 1);
  CHECK(starts_of(c, "tpu").front().node == "w4");
}

TEST_CASE("cluster: a worker killed mid-attempt: the attempt runs again on "
          "another within 2 s, counted once, and the task succeeds",
          "[cluster]") {
  cluster c;
  c.add_worker("w1", 1);
  c.add_worker("w2", 1);
  c.submit("job", "30 1");
  REQUIRE(eventually([&] { return starts_of(c, "job").size() == 1; }, 10s));
  auto first = starts_of(c, "job").front();
  auto other = first.node == "w1" ? "w2" : "w1";
  auto killed_at = std::chrono::system_clock::now();
  c.worker(first.node).signal(SIGKILL);
  REQUIRE(eventually([&] { return starts_of(c, "job").size() == 2; }, 10s));
  auto second = starts_of(c, "job").back();
  CHECK(second.node == other);
  CHECK(second.attempt == 2);
  auto killed_s =
    std::chrono::duration<double>(killed_at.time_since_epoch()).count();
  CHECK(second.at - killed_s < 2.0);
  // The killed node's agent did not outlive it.
  CHECK(eventually([&] { return ::kill(first.pid, 0) != 0; }, 3s));
  auto st = c.wait_done("job");
  CHECK(st.at("result").at("outcome") == "succeeded");
  CHECK(st.at("total_attempts") == 2);
  CHECK(st.at("retry_count") == 1);
  // The lost attempt is an infrastructure failure naming the node; the
  // retry waited for nothing.
  auto evs = c.events("job");
  auto* cls = find_event(evs, "classified");
  REQUIRE(cls);
  CHECK(cls->at("class") == "infrastructure");
  CHECK(cls->at("rule") == ("node_lost:" + first.node).c_str());
  auto* retry = find_event(evs, "retry_scheduled");
  REQUIRE(retry);
  CHECK(retry->at("delay_s").to_number<double>() == 0.0);
  CHECK(c.clean_ends("job") == 1);
}

TEST_CASE("cluster: a frozen worker is detected and its attempt moved, "
          "thawed, it does not finish the attempt a second time",
          "[cluster]") {
  cluster c{{"--peer-timeout", "2"}};
  c.add_worker("w1", 1);
  c.add_worker("w2", 1);
  c.submit("job", "8 1");
  REQUIRE(eventually([&] { return starts_of(c, "job").size() == 1; }, 10s));
  auto first = starts_of(c, "job").front();
  c.worker(first.node).signal(SIGSTOP);
  // Seen after the peer timeout (2 s, checked at each 200 ms heartbeat).
  REQUIRE(eventually([&] { return starts_of(c, "job").size() == 2; }, 10s));
  CHECK(starts_of(c, "job").back().node != first.node);
  c.worker(first.node).signal(SIGCONT);
  auto st = c.wait_done("job");
  CHECK(st.at("result").at("outcome") == "succeeded");
  CHECK(st.at("total_attempts") == 2);
  // The thawed node finds its coordinator gone and keeps its copy (which
  // needed 8 s) for adoption; the coordinator, which never went down,
  // adopts nothing when the node joins again, so the node kills the copy
  // then, long before it could have finished: only the second attempt ever
  // ends cleanly.
  REQUIRE(eventually(
    [&] {
      return c.worker(first.node).err().find("lost the coordinator") !=
             std::string::npos;
    },
    10s));
  bool copy_gone = eventually([&] { return ::kill(first.pid, 0) != 0; }, 3s);
  INFO("worker: " << c.worker(first.node).err());
  INFO("coordinator: " << c.coordinator().err());
  CHECK(copy_gone);
  CHECK(c.clean_ends("job") == 1);
  // It joins again and takes new work.
  c.wait_joined(first.node, 2);
}

TEST_CASE("cluster: the coordinator killed and restarted: its workers join "
          "again, it adopts the attempts they kept running, and every task "
          "ends with one attempt",
          "[cluster]") {
  cluster c;
  c.add_worker("w1", 2);
  c.add_worker("w2", 2);
  for (int i = 0; i < 6; ++i)
    c.submit("t" + std::to_string(i), "3 0.5");
  REQUIRE(eventually([&] { return c.starts().size() >= 4; }, 10s));
  c.coordinator().signal(SIGKILL);
  REQUIRE(c.coordinator().wait(10s) == 128 + SIGKILL);
  // The workers see it go and keep the attempts it placed running.
  for (auto w : {"w1", "w2"})
    REQUIRE(eventually(
      [&] {
        return c.worker(w).err().find("lost the coordinator") !=
               std::string::npos;
      },
      10s));
  for (auto w : {"w1", "w2"})
    CHECK_THAT(c.worker(w).err(),
               Catch::Contains("wait up to 60 s for a coordinator to adopt"));
  auto running = c.starts();
  for (auto& s : running)
    CHECK(::kill(s.pid, 0) == 0);
  c.start_coordinator();
  c.wait_joined("w1", 1);
  c.wait_joined("w2", 1);
  for (int i = 0; i < 6; ++i) {
    auto id = "t" + std::to_string(i);
    auto st = c.wait_done(id, 60s);
    INFO(id);
    CHECK(st.at("result").at("outcome") == "succeeded");
    // Adopted, not run again: one attempt, started once, ended once.
    CHECK(st.at("total_attempts") == 1);
    CHECK(starts_of(c, id).size() == 1);
    CHECK(c.clean_ends(id) == 1);
  }
  // The tasks whose attempts ran through the restart say so.
  for (auto& s : running) {
    INFO(s.task);
    int adopted = 0;
    for (auto& e : c.events(s.task))
      if (e.at("event") == "warning" &&
          std::string{e.at("message").as_string()}.find(
            "adopted from worker node " + s.node) != std::string::npos)
        ++adopted;
    CHECK(adopted == 1);
  }
  // The retries waited for the workers: none ran on the restarted
  // coordinator before they joined again.
  for (auto& s : c.starts()) {
    INFO(s.task << " attempt " << s.attempt);
    CHECK_FALSE(s.node.empty());
  }
  CHECK(c.coordinator().err().find("waiting up to 60s for the worker nodes "
                                   "(w1, w2) to join again") !=
        std::string::npos);
}

TEST_CASE("cluster: a worker node that ran many attempts stops at once, "
          "their adoption graces still pending",
          "[cluster]") {
  cluster c;
  auto& w = c.add_worker("w1", 8);
  // Each attempt leaves a grace pending on the worker's clock (for a
  // report not yet recorded): a hundred of them must not hold its exit.
  constexpr int tasks = 100;
  for (int i = 0; i < tasks; ++i)
    c.submit("q" + std::to_string(i), "0");
  for (int i = 0; i < tasks; ++i) {
    auto id = "q" + std::to_string(i);
    INFO(id);
    CHECK(c.wait_done(id).at("result").at("outcome") == "succeeded");
  }
  w.signal(SIGTERM);
  INFO(w.err());
  CHECK(w.wait(20s) == 0);
}

TEST_CASE("cluster: stop and kill reach an attempt on a worker node",
          "[cluster]") {
  cluster c;
  c.add_worker("w1", 2);
  c.submit("gentle", "30");
  c.submit("hard", "30");
  REQUIRE(eventually([&] { return c.starts().size() == 2; }, 10s));
  auto stop = run_to_end(c.dir(), {"stop", "--node", c.address(), "gentle"});
  INFO(stop.err);
  CHECK(stop.status == 0);
  auto kill = run_to_end(c.dir(), {"kill", "--node", c.address(), "hard"});
  INFO(kill.err);
  CHECK(kill.status == 0);
  for (auto id : {"gentle", "hard"}) {
    auto st = c.wait_done(id);
    INFO(id);
    CHECK(st.at("result").at("outcome") == "stopped");
    CHECK(st.at("total_attempts") == 1);
    REQUIRE(starts_of(c, id).size() == 1);
    auto pid = starts_of(c, id).front().pid;
    CHECK(eventually([&] { return ::kill(pid, 0) != 0; }, 5s));
  }
  CHECK(c.clean_ends("gentle") == 0);
  CHECK(c.clean_ends("hard") == 0);
}

TEST_CASE("cluster: a worker node stopped with SIGTERM reports its attempt "
          "lost and exits 0, as a coordinator does",
          "[cluster]") {
  cluster c;
  auto& w = c.add_worker("w1", 1);
  c.submit("job", "30 0.2");
  REQUIRE(eventually([&] { return starts_of(c, "job").size() == 1; }, 10s));
  w.signal(SIGTERM);
  INFO(w.err());
  CHECK(w.wait(30s) == 0);
  CHECK(w.err().find("worker node w1 stopped") != std::string::npos);
  // Its attempt was reported lost with it and runs again on the
  // coordinator.
  auto st = c.wait_done("job");
  CHECK(st.at("result").at("outcome") == "succeeded");
  CHECK(st.at("total_attempts") == 2);
}

TEST_CASE("cluster: a worker joins a coordinator that is stopped for 2 s as "
          "it connects",
          "[cluster]") {
  // CAF 0.17 closes a new connection whose peer's first bytes have not
  // arrived by the next heartbeat tick (its "last heard" time starts at
  // zero). The worker's lease is CAF's connection timeout, so its
  // connections to a stopped coordinator fail that way; it says so once
  // and tries again at once (no back-off: a handshake cut so says nothing
  // of the coordinator), and joins once the coordinator answers.
  cluster c;
  c.coordinator().signal(SIGSTOP);
  std::thread thaw{[&] {
    std::this_thread::sleep_for(2s);
    c.coordinator().signal(SIGCONT);
  }};
  auto& w1 = c.add_worker("w1", 1);
  thaw.join();
  auto log = w1.err();
  INFO(log);
  auto said = log.find("did not answer the connection within a heartbeat; "
                       "trying again");
  CHECK(said != std::string::npos);
  CHECK(log.find("did not answer the connection", said + 1) ==
        std::string::npos);
  CHECK(log.find("cannot reach the coordinator") == std::string::npos);
  // It works as a worker.
  c.submit("job", "0.1");
  CHECK(c.wait_done("job").at("result").at("outcome") == "succeeded");
  REQUIRE(starts_of(c, "job").size() == 1);
  CHECK(starts_of(c, "job").front().node == "w1");
}

TEST_CASE("cluster: a client certificate of the coordinator's CA cannot join "
          "as a worker node, a node certificate can",
          "[cluster]") {
  cluster c;
  // A certificate directory whose "node" certificate is the client's.
  namespace fs = std::filesystem;
  auto certs = c.dir() / "state/certs";
  auto borrowed = c.dir() / "client-as-node";
  fs::create_directories(borrowed);
  fs::permissions(borrowed, fs::perms::owner_all);
  fs::copy_file(certs + "/ca.crt", borrowed + "/ca.crt");
  fs::copy_file(certs + "/client.crt", borrowed + "/node.crt");
  fs::copy_file(certs + "/client.key", borrowed + "/node.key");
  auto args = c.worker_args("impostor", 1);
  args.insert(args.end(), {"--certs", borrowed});
  tasksup_child impostor{c.dir(), "impostor", args};
  // Refused for good: the worker exits with bad input, and says why.
  CHECK(impostor.wait(30s) == 2);
  INFO(impostor.err());
  CHECK(impostor.err().find("refused this node") != std::string::npos);
  CHECK(impostor.err().find("client certificate") != std::string::npos);
  auto log = c.coordinator().err();
  INFO(log);
  CHECK(log.find("worker node impostor joined") == std::string::npos);
  CHECK(log.find("refused a worker node's join") != std::string::npos);
  auto r = run_to_end(c.dir(), {"nodes", "--node", c.address()});
  CHECK(r.out.find("impostor") == std::string::npos);
  // The node certificate joins.
  c.add_worker("w1", 1);
}

TEST_CASE("cluster: a worker restarted under its name while its old "
          "connection still looks open joins, instead of being refused",
          "[cluster]") {
  // The coordinator would notice the old connection only after a minute.
  cluster c{{"--peer-timeout", "60"}};
  auto& old = c.add_worker("w1", 1);
  // Its process stops answering, its connection stays open (as when its
  // machine rebooted without a word on the wire).
  old.signal(SIGSTOP);
  tasksup_child restarted{c.dir(), "w1-restarted",
                          c.worker_args("w1", 2, "w1-restarted")};
  auto joined_twice = [&] {
    auto log = c.coordinator().err();
    auto first = log.find("worker node w1 joined");
    return first != std::string::npos &&
           log.find("worker node w1 joined", first + 1) != std::string::npos;
  };
  // The old node has join_probe_timeout (2 s) to answer; then it is gone.
  auto joined = eventually(joined_twice, 20s);
  INFO(c.coordinator().err());
  INFO(restarted.err());
  REQUIRE(joined);
  CHECK(c.coordinator().err().find("worker node w1 lost (a node of its name "
                                   "joined, and it did not answer") !=
        std::string::npos);
  CHECK_FALSE(restarted.exited());
  // Its slots are the node's now: work goes there.
  c.submit("after", "0.1");
  auto st = c.wait_done("after");
  CHECK(st.at("result").at("outcome") == "succeeded");
  old.signal(SIGCONT);
}

TEST_CASE("cluster: a worker that does not start an attempt in time is "
          "dropped, told so while its connection holds, and joins again, "
          "its late attempt is stopped",
          "[cluster]") {
  cluster c{{"--peer-timeout", "60"}};
  // A lease long enough that its connection outlives the freeze below.
  auto args = c.worker_args("w1", 1);
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--lease")
      args[i + 1] = "40";
  tasksup_child w1{c.dir(), "w1", args};
  c.wait_joined_log("w1", 1);
  // Frozen: the start request reaches it, its answer cannot come within
  // the 10 s the coordinator allows.
  w1.signal(SIGSTOP);
  c.submit("job", "3 0.2");
  auto log_has = [&](const std::string& text) {
    return c.coordinator().err().find(text) != std::string::npos;
  };
  auto dropped = eventually(
    [&] { return log_has("worker node w1 lost (an attempt there was lost"); },
    30s);
  INFO(c.coordinator().err());
  REQUIRE(dropped);
  w1.signal(SIGCONT);
  // Told it was dropped, it stops the late attempt and joins again.
  REQUIRE(eventually(
    [&] { return w1.err().find("dropped this node") != std::string::npos; },
    20s));
  c.wait_joined_log("w1", 2);
  auto st = c.wait_done("job", 60s);
  CHECK(st.at("result").at("outcome") == "succeeded");
  // Only one copy ran to its end (the late one was stopped within its 3 s).
  CHECK(c.clean_ends("job") == 1);
  // Its slots are used again.
  c.submit("after", "0.1");
  CHECK(c.wait_done("after").at("result").at("outcome") == "succeeded");
}

TEST_CASE("cluster: connections past the cap push out anonymous ones, never "
          "a joined worker",
          "[cluster]") {
  cluster c{{"--max-connections", "4"}};
  c.add_worker("w1", 1);
  // Twelve connections that never finish a handshake, held open: each one
  // past the cap closes another.
  std::vector<int> held;
  for (int i = 0; i < 12; ++i) {
    auto port = std::stoi(c.address().substr(c.address().rfind(':') + 1));
    auto fd = loopback_connect(port);
    REQUIRE(fd >= 0);
    held.push_back(fd);
  }
  // The worker is still joined, and takes the next attempt.
  c.submit("after", "0.1");
  auto st = c.wait_done("after");
  CHECK(st.at("result").at("outcome") == "succeeded");
  auto runs = starts_of(c, "after");
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].node == "w1");
  INFO(c.coordinator().err());
  CHECK(c.coordinator().err().find("worker node w1 lost") == std::string::npos);
  for (auto fd : held)
    ::close(fd);
}

TEST_CASE("cluster: logs of an attempt that ran on a worker node come from "
          "that node, or say where they are once it is gone",
          "[cluster]") {
  cluster c;
  auto& w = c.add_worker("w1", 1);
  c.submit("job", "0.1");
  CHECK(c.wait_done("job").at("result").at("outcome") == "succeeded");
  auto r = run_to_end(c.dir(), {"logs", "--node", c.address(), "job"});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.out.find("working on job attempt 1") != std::string::npos);
  // The node gone, the coordinator says where the output stays.
  w.signal(SIGTERM);
  REQUIRE(w.wait(30s) == 0);
  REQUIRE(eventually(
    [&] {
      return c.coordinator().err().find("worker node w1 lost") !=
             std::string::npos;
    },
    10s));
  r = run_to_end(c.dir(), {"logs", "--node", c.address(), "job"});
  CHECK(r.status != 0);
  CHECK(r.err.find("ran on worker node w1, which has not joined now") !=
        std::string::npos);
}

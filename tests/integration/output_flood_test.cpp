// End-to-end: an agent printing a gigabyte as fast as it can, under the real
// `tasksup run` and a real `tasksup serve`. The output reaches the log up to
// its cap and the console and events up to their limits, with back-pressure
// in between: memory stays bounded, the rest is counted, and the classifier
// still sees the real last line.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

constexpr std::uint64_t gib = 1024ull * 1024 * 1024;

/// The output.log cap the tests configure.
constexpr std::uint64_t log_cap = 8 * 1024 * 1024;

/// What `tasksup run` and the node may use at most while the agent floods
/// them (resident set, from /proc/PID/status). Idle, each is 10-20 MB.
constexpr long rss_bound_kb = 48 * 1024;

/// A config directory with an output cap on the log and the default
/// classifier rules (the agent's last line matches `fatal`).
std::string flood_config(const scratch& dir) {
  std::filesystem::create_directories(dir / "config");
  dir.write("config/node.json",
            R"({"output": {"log_max_bytes": )" + std::to_string(log_cap) +
              R"(, "line_max_bytes": 256, "attempt_max_bytes": 65536}})");
  std::filesystem::copy_file(config_dir() + "/classifier.json",
                             dir / "config/classifier.json");
  return dir / "config";
}

std::string flood_task(const scratch& dir, const std::string& id,
                       const std::string& mode, std::uint64_t bytes) {
  return dir.write(id + ".json", R"({"id": ")" + id + R"(", "prompt": "flood",
    "agent_selection": {"agents": [{"agent_id": "flood", "agent_cli": ")" +
                                   std::string{TASKSUP_FIXTURES_DIR} +
                                   R"(/flood.sh", "cli_flags": ")" + mode +
                                   " " + std::to_string(bytes) +
                                   R"(", "prompt_as_argument": false}]},
    "supervisor": {"max_retries_per_agent": 0}})");
}

/// VmRSS of `pid` in kB, 0 once it is gone.
long rss_kb(int pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stol(line.substr(6));
  return 0;
}

/// The one output.log under `root` (recursively), empty if none.
std::string find_log(const std::string& root) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator{root, ec};
       !ec && it != std::filesystem::recursive_directory_iterator{};
       it.increment(ec))
    if (it->path().filename() == "output.log")
      return it->path().string();
  return {};
}

/// Checks the log: under its cap (plus tasksup's two notes), saying so.
void check_log(const std::string& path) {
  REQUIRE_FALSE(path.empty());
  auto size = std::filesystem::file_size(path);
  CHECK(size > log_cap);
  CHECK(size < log_cap + 512);
  auto text = slurp(path);
  CHECK(text.find("[tasksup: output.log reached its cap of " +
                  std::to_string(log_cap) + " bytes") != std::string::npos);
  CHECK(text.find("more bytes of output were not logged]") !=
        std::string::npos);
}

/// Checks the events of the flood task: log events bounded by the attempt's
/// limit, with streams; one note counting what was held back; the class
/// found from the real last line, which is shown as a stderr line when the
/// attempt's limit was not reached before it (`last_shown`).
void check_events(const std::vector<boost::json::object>& evs,
                  bool last_shown) {
  std::uint64_t log_bytes = 0;
  std::size_t notes = 0;
  std::string note;
  bool saw_stderr = false;
  for (auto& e : evs) {
    if (e.at("event").as_string() != "log")
      continue;
    auto stream = std::string{e.at("stream").as_string()};
    auto line = std::string{e.at("line").as_string()};
    if (stream == "tasksup") {
      ++notes;
      note = line;
      continue;
    }
    CHECK((stream == "stdout" || stream == "stderr"));
    saw_stderr = saw_stderr || stream == "stderr";
    CHECK(line.size() <= 256);
    log_bytes += line.size();
  }
  CHECK(log_bytes <= 65536);
  CHECK(notes == 1);
  CHECK(note.find("bytes of output in") != std::string::npos);
  CHECK(note.find("were not shown") != std::string::npos);
  // The last line went to stderr after the flood: past the attempt's limit
  // it is counted, not shown, yet the classifier finds it in the tail.
  CHECK(saw_stderr == last_shown);
  auto classified =
    std::find_if(evs.begin(), evs.end(), [](const boost::json::object& e) {
      return e.at("event").as_string() == "classified";
    });
  REQUIRE(classified != evs.end());
  CHECK(classified->at("class").as_string() == "fatal");
  CHECK(std::string{classified->at("line").as_string()}.find(
          "the real last line") != std::string::npos);
}

/// Samples the RSS of `pid` every 20 ms until `done`; returns the peak.
template<class Done>
long peak_rss_until(int pid, Done done, std::chrono::seconds limit) {
  long peak = 0;
  auto deadline = steady::now() + limit;
  while (!done() && steady::now() < deadline) {
    peak = std::max(peak, rss_kb(pid));
    std::this_thread::sleep_for(20ms);
  }
  return peak;
}

} // namespace

TEST_CASE("run: an agent printing 1 GiB of short lines stays within bounded "
          "memory, a capped log and limited events",
          "[flood]") {
  scratch dir;
  auto config = flood_config(dir);
  auto task = flood_task(dir, "flood-lines", "lines", gib);
  tasksup_child run{dir,
                    "run",
                    {"run", "--config", config, "--events", dir / "ev.jsonl",
                     "--work-dir", dir / "work", task}};
  auto peak = peak_rss_until(
    run.pid(), [&] { return run.exited(); }, 600s);
  INFO(run.err());
  REQUIRE(run.wait(1s) == 3); // the agent's code: its last line is fatal
  CHECK(peak > 0);
  CHECK(peak < rss_bound_kb);
  check_log(find_log(dir / "work"));
  check_events(json_lines(slurp(dir / "ev.jsonl")), false);
  // The console shows lines cut to the limit, never the flood.
  CHECK(run.out().size() + run.err().size() < 1024 * 1024);
}

TEST_CASE("run: one 256 MiB line is cut for the console and the events",
          "[flood]") {
  scratch dir;
  auto config = flood_config(dir);
  auto task = flood_task(dir, "flood-line", "line", 256ull * 1024 * 1024);
  tasksup_child run{dir,
                    "run",
                    {"run", "--config", config, "--events", dir / "ev.jsonl",
                     "--work-dir", dir / "work", task}};
  auto peak = peak_rss_until(
    run.pid(), [&] { return run.exited(); }, 300s);
  INFO(run.err());
  REQUIRE(run.wait(1s) == 3);
  CHECK(peak < rss_bound_kb);
  check_log(find_log(dir / "work"));
  auto evs = json_lines(slurp(dir / "ev.jsonl"));
  check_events(evs, true);
  CHECK(std::filesystem::file_size(dir / "ev.jsonl") < 256 * 1024);
}

TEST_CASE("serve: a node running an agent printing 1 GiB stays within "
          "bounded memory and keeps serving",
          "[flood]") {
  scratch dir;
  auto config = flood_config(dir);
  tasksup_child node{dir,
                     "serve",
                     {"serve", "--listen", "127.0.0.1:0", "--config", config,
                      "--work-dir", dir / "node-work", "--state-dir",
                      dir / "state"}};
  auto port = listening_port(node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  auto task = flood_task(dir, "flood-node", "lines", gib);
  auto sub = run_to_end(dir, {"submit", task, "--node", address});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  auto done = [&] {
    auto st =
      run_to_end(dir, {"status", "flood-node", "--json", "--node", address});
    if (st.status != 0)
      return false;
    auto obj = boost::json::parse(st.out).as_object();
    return obj.contains("state") && obj.at("state").as_string() == "done";
  };
  auto peak = peak_rss_until(node.pid(), done, 600s);
  REQUIRE(done());
  CHECK(peak < rss_bound_kb);
  // Held after the task ended? The node's memory goes back down, not up.
  CHECK(rss_kb(node.pid()) < rss_bound_kb);
  check_log(find_log(dir / "node-work"));
  // The node keeps no event history; its log shows the events (not the
  // agents' lines) as they happened: the class was found from the real last
  // line, and the flood is not in it.
  auto log = node.err();
  CHECK(log.find("the real last line") != std::string::npos);
  CHECK(log.size() < 2 * 1024 * 1024);
  node.signal(SIGTERM);
  CHECK(node.wait(20s) == 0);
}

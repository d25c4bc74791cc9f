// Schedules on a real node: a schedule file of the config directory fires
// every second, `tasksup schedule` adds, lists, pauses and deletes one,
// `status` shows their next runs, and after kill -9 the node keeps the
// schedule it was given and runs no fire twice.

#include "process_node.hpp"
#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <csignal>

#include <boost/json/parse.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

using namespace tasksup::test;
using namespace std::chrono_literals;

namespace {

/// `tasksup schedule list --json` of the node at `address`, by name.
std::map<std::string, boost::json::object>
schedules_of(const scratch& dir, const std::string& address) {
  std::map<std::string, boost::json::object> out;
  auto r = run_to_end(dir, {"schedule", "list", "--json", "--node", address});
  if (r.status != 0)
    return out;
  boost::system::error_code ec;
  auto doc = boost::json::parse(r.out, ec);
  if (ec || !doc.is_array())
    return out;
  for (auto& x : doc.get_array())
    if (x.is_object())
      out[text_at(x.get_object(), "name")] = x.get_object();
  return out;
}

/// The lines of DIR/ran.txt (task ids, one per run).
std::vector<std::string> runs_in(const scratch& dir) {
  std::vector<std::string> out;
  auto text = slurp(dir / "ran.txt");
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos;
       at = nl + 1)
    out.push_back(text.substr(at, nl - at));
  return out;
}

std::size_t count_prefix(const std::vector<std::string>& xs,
                         const std::string& prefix) {
  std::size_t n = 0;
  for (auto& x : xs)
    n += x.rfind(prefix, 0) == 0;
  return n;
}

} // namespace

TEST_CASE("a node runs its schedules: a config file's fires every second, "
          "one added by `schedule` is listed, paused, kept across kill -9 "
          "and deleted, status shows the next runs, and no fire runs "
          "twice") {
  scratch dir;
  // Every run records its task id.
  auto serve = process_node(dir, "#!/bin/sh\necho \"$TASKSUP_TASK_ID\" >> '" +
                                   dir / "ran.txt" + "'\n");
  std::filesystem::create_directories(dir / "config/schedules");
  dir.write("config/schedules/tick.json",
            R"({"every": "1s", "task": {"prompt": "tick"}})");
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  REQUIRE(
    eventually([&] { return count_prefix(runs_in(dir), "tick-") >= 2; }, 30s));
  auto tick = schedules_of(dir, address)["tick"];
  CHECK(text_at(tick, "source") == "file");
  CHECK(text_at(tick, "timing") == "every 1s");
  CHECK(tick.at("next_ts").is_double());
  CHECK(tick.at("runs").to_number<double>() >= 2);
  // One added by command, from a file.
  auto file = dir.write("nightly.json", R"({"cron": "0 3 * * *",
    "time_zone": "Europe/Berlin", "overlap": "buffer_one",
    "task": {"prompt": "nightly"}})");
  auto added = run_to_end(
    dir, {"schedule", "add", file, "--name", "nightly", "--node", address});
  INFO(added.out << added.err);
  REQUIRE(added.status == 0);
  CHECK_THAT(added.out, Catch::Contains("added schedule 'nightly'"));
  auto nightly = schedules_of(dir, address)["nightly"];
  CHECK(text_at(nightly, "source") == "command");
  CHECK(text_at(nightly, "timing") == "cron 0 3 * * * Europe/Berlin");
  CHECK(text_at(nightly, "overlap") == "buffer_one");
  CHECK(nightly.at("next_ts").is_double());
  // status lists both under the tasks, with when they fire next.
  auto status = run_to_end(dir, {"status", "--node", address});
  INFO(status.out << status.err);
  CHECK(status.status == 0);
  CHECK_THAT(status.out, Catch::Contains("schedules:"));
  CHECK_THAT(status.out, Catch::Contains("cron 0 3 * * * Europe/Berlin"));
  CHECK_THAT(status.out, Catch::Contains("every 1s"));
  // Refusals say why.
  auto again = run_to_end(
    dir, {"schedule", "add", file, "--name", "nightly", "--node", address});
  CHECK(again.status == 2);
  CHECK_THAT(again.err, Catch::Contains("exists already"));
  auto bad =
    run_to_end(dir, {"schedule", "add",
                     dir.write("bad.json", R"({"every": "0s", "task": {}})"),
                     "--node", address});
  CHECK(bad.status == 2);
  CHECK_THAT(bad.err, Catch::Contains("/every"));
  auto file_delete =
    run_to_end(dir, {"schedule", "delete", "tick", "--node", address});
  CHECK(file_delete.status == 2);
  CHECK_THAT(file_delete.err, Catch::Contains("remove the file"));
  REQUIRE(run_to_end(dir, {"schedule", "pause", "nightly", "--node", address})
            .status == 0);
  CHECK(schedules_of(dir, address)["nightly"].at("paused").as_bool());
  CHECK(schedules_of(dir, address)["nightly"].at("next_ts").is_null());
  // kill -9: the added schedule comes back paused; tick goes on.
  auto before = count_prefix(runs_in(dir), "tick-");
  auto restarted = kill_and_restart(dir, node, "node-1", serve);
  REQUIRE(restarted);
  address = *restarted;
  auto back = schedules_of(dir, address);
  REQUIRE(back.count("nightly") == 1);
  CHECK(back["nightly"].at("paused").as_bool());
  CHECK(text_at(back["nightly"], "source") == "command");
  REQUIRE(eventually(
    [&] { return count_prefix(runs_in(dir), "tick-") >= before + 2; }, 30s));
  // Every fire ran once: no task id twice, before or after the restart.
  auto all = runs_in(dir);
  CHECK(std::set<std::string>(all.begin(), all.end()).size() == all.size());
  CHECK(count_prefix(all, "nightly-") == 0);
  auto deleted =
    run_to_end(dir, {"schedule", "delete", "nightly", "--node", address});
  CHECK(deleted.status == 0);
  CHECK(schedules_of(dir, address).count("nightly") == 0);
}

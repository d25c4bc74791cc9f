// What a node keeps for its tasks (the journal with its write-ahead log,
// attempt directories, output logs, exit records) is its user's only, even
// in a state directory that was created open to others, and so is what
// `tasksup run` leaves in its work directory.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

namespace fs = std::filesystem;

constexpr const char* secret = "s3cr3t-token-4f9a";

/// A config directory whose default agent is `agent`, run with the prompt
/// as its argument.
std::string config_with(const scratch& dir, const std::string& agent) {
  auto config = dir / "config";
  fs::create_directories(config);
  std::ofstream{config + "/node.json"}
    << R"({"default_agent": {"agent_id": "sh", "agent_cli": ")" << agent
    << R"(", "cli_flags": "", "prompt_as_argument": true},
          "default_runtime": "process"})";
  return config;
}

/// An agent that prints the secret it was given in its environment.
std::string secret_agent(const scratch& dir) {
  auto agent = dir.write("agent.sh", "#!/bin/sh\n"
                                     "echo \"working on $1 with $API_TOKEN\"\n"
                                     "echo done >&2\n");
  ::chmod(agent.c_str(), 0755);
  return agent;
}

std::string task_file(const scratch& dir, const std::string& id) {
  return dir.write(id + ".json",
                   R"({"id": ")" + id +
                     R"(", "prompt": "work", "env": {"API_TOKEN": ")" + secret +
                     R"("}})");
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0)
    return 07777;
  return st.st_mode & 07777;
}

/// Every path under `root` (and `root` itself) that group or others may
/// read, write or enter, with its mode. Certificates (`*.crt`) are public
/// by design and left out; their keys are not.
std::vector<std::string> open_to_others(const std::string& root) {
  std::vector<std::string> out;
  auto check = [&](const fs::path& p) {
    if (p.extension() == ".crt")
      return;
    auto mode = mode_of(p.string());
    if ((mode & 077) != 0) {
      char text[8];
      std::snprintf(text, sizeof text, "%04o", mode);
      out.push_back(p.string() + " " + text);
    }
  };
  check(root);
  std::error_code ec;
  for (fs::recursive_directory_iterator it{root, ec}, end; !ec && it != end;
       it.increment(ec))
    check(it->path());
  if (ec)
    out.push_back(root + ": cannot walk: " + ec.message());
  return out;
}

/// The paths under `root` named `name`.
std::vector<std::string> named(const std::string& root,
                               const std::string& name) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it{root, ec}, end; !ec && it != end;
       it.increment(ec))
    if (it->path().filename() == name)
      out.push_back(it->path().string());
  return out;
}

} // namespace

TEST_CASE("serve: an existing 0755 state directory is made private with a "
          "warning, and nothing the node keeps there is open to others") {
  scratch dir;
  auto state = dir / "state";
  REQUIRE(::mkdir(state.c_str(), 0755) == 0);
  REQUIRE(::chmod(state.c_str(), 0755) == 0);
  auto config = config_with(dir, secret_agent(dir));
  tasksup_child node{dir,
                     "serve",
                     {"serve", "--listen", "127.0.0.1:0", "--config", config,
                      "--state-dir", state}};
  auto port = listening_port(node);
  INFO(node.err());
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  CHECK(node.err().find("state directory " + state + " was mode 0755") !=
        std::string::npos);
  CHECK(mode_of(state) == 0700);

  auto sub =
    run_to_end(dir, {"submit", "--node", address, task_file(dir, "secret")});
  INFO(sub.err);
  REQUIRE(sub.status == 0);
  std::string last_status;
  CHECK(eventually(
    [&] {
      auto r =
        run_to_end(dir, {"status", "secret", "--json", "--node", address});
      last_status = r.out;
      return r.status == 0 &&
             last_status.find("\"succeeded\"") != std::string::npos;
    },
    30s));
  INFO(last_status);

  // The agent saw its secret, and its output log holds it.
  auto logs = named(state, "output.log");
  REQUIRE(logs.size() == 1);
  CHECK(slurp(logs.front()).find(secret) != std::string::npos);
  // The node still runs: its journal's write-ahead log and shared memory
  // index exist, and hold what the last commits wrote.
  for (auto* name : {"journal.db", "journal.db-wal", "journal.db-shm"}) {
    INFO(name);
    CHECK(fs::exists(state + "/" + name));
  }
  CHECK(fs::is_directory(state + "/attempts/secret/attempt-1"));
  CHECK(open_to_others(state) == std::vector<std::string>{});

  node.signal(SIGTERM);
  CHECK(node.wait(30s) == 0);
  // What the node leaves behind after it stops is private too.
  CHECK(open_to_others(state) == std::vector<std::string>{});
}

TEST_CASE("serve: another user's state directory that is open to others is "
          "refused, and left as it was") {
  auto other = other_user();
  if (!other) {
    WARN("skipped: a second user needs root");
    return;
  }
  scratch dir;
  auto state = dir / "theirs";
  REQUIRE(::mkdir(state.c_str(), 0700) == 0);
  REQUIRE(::chmod(state.c_str(), 0755) == 0);
  REQUIRE(::chown(state.c_str(), other->first, other->second) == 0);
  auto r = run_to_end(
    dir, {"serve", "--listen", "127.0.0.1:0", "--state-dir", state}, 30s);
  CHECK(r.status != 0);
  CHECK(r.err.find(state) != std::string::npos);
  CHECK(r.err.find("chmod 700") != std::string::npos);
  CHECK(mode_of(state) == 0755);
  CHECK_FALSE(fs::exists(state + "/journal.db"));
}

TEST_CASE("run: the attempts and logs in the default work directory are "
          "private, whatever the umask left open") {
  scratch dir;
  // The default work directory is under $TMPDIR/tasksup.
  auto tmp = dir / "tmp";
  REQUIRE(::mkdir(tmp.c_str(), 0755) == 0);
  REQUIRE(::chmod(tmp.c_str(), 0755) == 0);
  auto config = config_with(dir, secret_agent(dir));
  auto r = run_to_end(dir, {"run", "--config", config, task_file(dir, "job")},
                      60s, {"TMPDIR=" + tmp});
  INFO(r.err);
  REQUIRE(r.status == 0);
  auto logs = named(tmp + "/tasksup", "output.log");
  REQUIRE(logs.size() == 1);
  CHECK(slurp(logs.front()).find(secret) != std::string::npos);
  CHECK(open_to_others(tmp + "/tasksup") == std::vector<std::string>{});
}

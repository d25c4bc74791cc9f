// The real agent CLIs (installed by scripts/agent-clis.sh) under the real
// `tasksup run`, against tests/fixtures/fake_provider.py on a loopback port:
// a bad key stops at once, a rate limit is waited out, an empty account or a
// broken CLI falls back, overload and network errors are retried, a silent
// attempt is stopped by idle_timeout_s. Skipped, with a message on stderr,
// when the CLIs or python3 are not installed.

#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

using namespace tasksup::test;

namespace {

std::string clis_bin() {
  if (const char* dir = std::getenv("TASKSUP_AGENT_CLIS_DIR"))
    return std::string{dir} + "/node_modules/.bin";
  // TASKSUP_BINARY is <build>/apps/tasksup; the CLIs live in <build>.
  std::filesystem::path bin{TASKSUP_BINARY};
  return (bin.parent_path().parent_path() / "agent-clis/node_modules/.bin")
    .string();
}

/// The CLI's path, or "" (and a visible skip message) when not installed.
std::string cli(const std::string& name) {
  auto path = clis_bin() + "/" + name;
  if (::access(path.c_str(), X_OK) != 0) {
    std::cerr << "SKIPPED: real agent CLI '" << name << "' not installed at "
              << path << " (run scripts/agent-clis.sh; needs npm)\n";
    WARN("skipped: " << name << " not installed");
    return {};
  }
  return path;
}

/// tests/fixtures/fake_provider.py on 127.0.0.1, a random port; stopped by
/// closing its stdin when this goes out of scope.
class fake_provider {
public:
  fake_provider() {
    int in[2];
    int out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0)
      throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    std::string script = TASKSUP_FIXTURES_DIR "/fake_provider.py";
    std::vector<std::string> store{"python3", script, "0"};
    std::vector<char*> argv;
    for (auto& s : store)
      argv.push_back(s.data());
    argv.push_back(nullptr);
    int rc =
      ::posix_spawnp(&pid_, "python3", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    if (rc != 0) {
      ::close(out[0]);
      pid_ = 0;
      return;
    }
    // "PORT <n>\n", within 10 s.
    std::string line;
    pollfd p{out[0], POLLIN, 0};
    auto deadline = steady::now() + 10s;
    while (line.find('\n') == std::string::npos && steady::now() < deadline) {
      if (::poll(&p, 1, 100) <= 0)
        continue;
      char buf[64];
      auto n = ::read(out[0], buf, sizeof buf);
      if (n <= 0)
        break;
      line.append(buf, static_cast<std::size_t>(n));
    }
    ::close(out[0]);
    if (line.rfind("PORT ", 0) == 0)
      port_ = std::atoi(line.c_str() + 5);
  }
  fake_provider(const fake_provider&) = delete;
  fake_provider& operator=(const fake_provider&) = delete;
  ~fake_provider() {
    ::close(stdin_);
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int ws = 0;
      ::waitpid(pid_, &ws, 0);
    }
  }
  int port() const { return port_; }
  /// The base URL answering with `scenario`.
  std::string url(const std::string& scenario) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/s/" + scenario;
  }

private:
  pid_t pid_ = 0;
  int stdin_ = -1;
  int port_ = 0;
};

struct run_result {
  finished run;
  std::vector<boost::json::object> events;
};

/// A backup agent that always succeeds, for fallback checks.
const char* backup_agent =
  R"({"agent_id": "backup", "agent_cli": "/bin/sh", "cli_flags": "-c 'echo backup done'", "prompt_as_argument": false})";

/// Runs a task whose chain is `agent_json` then the backup agent.
run_result run_chain(const scratch& dir, const std::string& name,
                     const std::string& agent_json,
                     const std::string& supervisor_extra = "",
                     std::chrono::milliseconds limit = 120s, int retries = 1) {
  auto task =
    dir.write(name + ".json", R"({"id": ")" + name +
                                R"(", "prompt": "say hi", "runtime": "process",
  "agent_selection": {"agents": [)" +
                                agent_json + ", " + backup_agent + R"(],
    "agent_fallbacks": {"primary": "backup"}},
  "supervisor": {"max_retries_per_agent": )" +
                                std::to_string(retries) +
                                R"(, "backoff_base_seconds": 0.2,
                 "rate_limit_backoff_base": 0.5, "stop_grace_s": 1)" +
                                supervisor_extra + "}}");
  auto events = dir / (name + ".jsonl");
  run_result r;
  r.run = run_to_end(dir,
                     {"run", "--config", config_dir(), "--events", events,
                      "--work-dir", dir / "work", task},
                     limit);
  r.events = json_lines(slurp(events));
  return r;
}

std::string text(const boost::json::object& e, const char* key) {
  const auto& v = e.at(key);
  return v.is_string() ? std::string{v.as_string()} : std::string{};
}

std::string outcome(const run_result& r) {
  auto done = of_kind(r.events, "task_done");
  return done.empty() ? std::string{} : text(done.at(0), "outcome");
}

/// Sets the variables the agents' env_passthrough lists, for one run.
void provider_env(const scratch& dir, const fake_provider& fp,
                  const std::string& scenario) {
  ::setenv("HOME", dir.path().c_str(), 1);
  ::setenv("ANTHROPIC_BASE_URL", fp.url(scenario).c_str(), 1);
  ::setenv("ANTHROPIC_API_KEY", "sk-ant-fake", 1);
  ::setenv("CLAUDE_CODE_MAX_RETRIES", "0", 1);
  ::setenv("OPENAI_API_KEY", "sk-fake", 1);
  ::setenv("GEMINI_API_KEY", "fake", 1);
  ::setenv("GOOGLE_GEMINI_BASE_URL", fp.url(scenario).c_str(), 1);
}

std::string claude_agent(const std::string& path,
                         const std::string& extra = "") {
  return R"({"agent_id": "primary", "profile": "claude", "agent_cli": ")" +
         path + "\"" + extra + "}";
}

/// codex has no base-URL variable: its provider comes from -c flags.
std::string codex_agent(const std::string& path, const fake_provider& fp,
                        const std::string& scenario,
                        const std::string& more_flags = "") {
  auto provider = "model_providers.fake={name=\\\"fake\\\",base_url=\\\"" +
                  fp.url(scenario) +
                  "/v1\\\",env_key=\\\"OPENAI_API_KEY\\\",wire_api="
                  "\\\"responses\\\",request_max_retries=0,stream_max_"
                  "retries=0}";
  return R"({"agent_id": "primary", "profile": "codex", "agent_cli": ")" +
         path + R"(", "cli_flags": "-c model_provider=fake -c ')" + provider +
         "'" + more_flags + "\"}";
}

struct fixture_guard {
  scratch dir;
  fake_provider fp;
  bool ok() {
    if (fp.port() > 0)
      return true;
    std::cerr << "SKIPPED: python3 cannot run the fake provider\n";
    WARN("skipped: no fake provider");
    return false;
  }
};

} // namespace

TEST_CASE("real claude: a bad key stops the task at once", "[agent_cli]") {
  auto claude = cli("claude");
  if (claude.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "auth");
  auto r = run_chain(g.dir, "claude-auth", claude_agent(claude),
                     R"(, "fatal_scope": "task")");
  INFO(r.run.out << r.run.err);
  CHECK(r.run.status == 1);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "fatal");
  CHECK(text(classified[0], "rule") == "structured:authentication_error");
  CHECK(of_kind(r.events, "retry_scheduled").empty());
  CHECK(of_kind(r.events, "agent_switched").empty());
  CHECK(outcome(r) == "failed");
  // Readable progress, not raw stream-json.
  for (const auto& log : of_kind(r.events, "log"))
    CHECK(text(log, "line").rfind("{\"type\"", 0) != 0);
}

TEST_CASE("real claude: a rate limit is retried with the rate-limit backoff",
          "[agent_cli]") {
  auto claude = cli("claude");
  if (claude.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "rate");
  auto r = run_chain(g.dir, "claude-rate", claude_agent(claude));
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 2);
  for (const auto& c : classified) {
    CHECK(text(c, "class") == "rate_limit");
    CHECK(text(c, "rule") == "structured:rate_limit_error");
  }
  auto retries = of_kind(r.events, "retry_scheduled");
  REQUIRE(retries.size() == 1);
  CHECK(retries[0].at("delay_s").to_number<double>() == Approx(0.5));
  // Its retries spent, the chain falls back and succeeds.
  CHECK(of_kind(r.events, "agent_switched").size() == 1);
  CHECK(outcome(r) == "succeeded");
  CHECK(r.run.status == 0);
}

TEST_CASE("real claude: overload and a dropped connection are retried",
          "[agent_cli]") {
  auto claude = cli("claude");
  if (claude.empty())
    return;
  for (auto scenario : {"overloaded", "drop", "unavailable"}) {
    INFO(scenario);
    fixture_guard g;
    if (!g.ok())
      return;
    provider_env(g.dir, g.fp, scenario);
    auto r =
      run_chain(g.dir, std::string{"claude-"} + scenario, claude_agent(claude));
    INFO(r.run.out << r.run.err);
    auto classified = of_kind(r.events, "classified");
    REQUIRE(classified.size() == 2);
    CHECK(text(classified[0], "class") == "retryable");
    CHECK(of_kind(r.events, "retry_scheduled").size() == 1);
    CHECK(outcome(r) == "succeeded");
  }
}

TEST_CASE("real claude: out of credit falls back without retrying",
          "[agent_cli]") {
  auto claude = cli("claude");
  if (claude.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "billing");
  auto r = run_chain(g.dir, "claude-billing", claude_agent(claude));
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "agent_failure");
  CHECK(text(classified[0], "rule") == "structured:billing_error");
  CHECK(of_kind(r.events, "retry_scheduled").empty());
  REQUIRE(of_kind(r.events, "agent_switched").size() == 1);
  CHECK(outcome(r) == "succeeded");
}

TEST_CASE("real claude: a silent attempt is stopped by idle_timeout_s",
          "[agent_cli]") {
  auto claude = cli("claude");
  if (claude.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "hang");
  auto r = run_chain(g.dir, "claude-hang",
                     claude_agent(claude, R"(, "idle_timeout_s": 3)"));
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE_FALSE(classified.empty());
  CHECK(text(classified[0], "class") == "retryable");
  CHECK(text(classified[0], "rule") == "idle_timeout");
  CHECK(outcome(r) == "succeeded"); // after the fallback
}

TEST_CASE("real codex: billing falls back, a bad key is fatal, a dropped "
          "connection is retried",
          "[agent_cli]") {
  auto codex = cli("codex");
  if (codex.empty())
    return;
  struct row {
    const char* scenario;
    const char* cls;
  };
  for (auto c : {row{"billing", "agent_failure"}, row{"auth", "fatal"},
                 row{"drop", "retryable"}, row{"overloaded", "retryable"}}) {
    INFO(c.scenario);
    fixture_guard g;
    if (!g.ok())
      return;
    provider_env(g.dir, g.fp, c.scenario);
    auto r = run_chain(g.dir, std::string{"codex-"} + c.scenario,
                       codex_agent(codex, g.fp, c.scenario),
                       R"(, "fatal_scope": "task")");
    INFO(r.run.out << r.run.err);
    auto classified = of_kind(r.events, "classified");
    REQUIRE_FALSE(classified.empty());
    CHECK(text(classified[0], "class") == c.cls);
  }
}

TEST_CASE("real codex: the old --full-auto flag is a broken agent, not a "
          "retry",
          "[agent_cli]") {
  auto codex = cli("codex");
  if (codex.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "ok");
  auto r = run_chain(g.dir, "codex-fullauto",
                     codex_agent(codex, g.fp, "ok", " --full-auto"));
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "agent_failure");
  CHECK(of_kind(r.events, "agent_switched").size() == 1);
  CHECK(outcome(r) == "succeeded");
}

TEST_CASE("real codex: the shipped profile succeeds", "[agent_cli]") {
  auto codex = cli("codex");
  if (codex.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "ok");
  auto r = run_chain(g.dir, "codex-ok", codex_agent(codex, g.fp, "ok"));
  INFO(r.run.out << r.run.err);
  CHECK(r.run.status == 0);
  CHECK(of_kind(r.events, "classified").empty());
  bool answered = false;
  for (const auto& log : of_kind(r.events, "log"))
    answered = answered || text(log, "line") ==
                             "assistant: Done: the fake provider says hello.";
  CHECK(answered);
  // The tokens the provider reported for this attempt, in its
  // attempt_exited event (codex reports no cost) and the task's metadata.
  auto exited = of_kind(r.events, "attempt_exited");
  REQUIRE(exited.size() == 1);
  REQUIRE(exited[0].contains("usage"));
  const auto& usage = exited[0].at("usage").as_object();
  CHECK(usage.at("input_tokens").as_int64() == 12);
  CHECK(usage.at("output_tokens").as_int64() == 8);
  CHECK_FALSE(exited[0].contains("cost_usd"));
  auto done = of_kind(r.events, "task_done");
  REQUIRE(done.size() == 1);
  CHECK(done[0].at("metadata").at("usage").at("input_tokens").as_int64() == 12);
  // The human view says so too.
  CHECK_THAT(r.run.out + r.run.err, Catch::Contains("(12 tokens in, 8 out)"));
}

/// A loopback port nothing listens on (bound, then closed): connections to
/// it are refused.
int refused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST_CASE("real codex offline: its Reconnecting loop does not keep it alive, "
          "idle_noise stops it",
          "[agent_cli]") {
  // With nothing listening codex never exits: it prints "Reconnecting...
  // waiting for network" every few seconds. Those lines are the codex
  // profile's idle_noise, so idle_timeout_s fires all the same.
  auto codex = cli("codex");
  if (codex.empty())
    return;
  scratch dir;
  ::setenv("HOME", dir.path().c_str(), 1);
  ::setenv("OPENAI_API_KEY", "sk-fake", 1);
  auto url = "http://127.0.0.1:" + std::to_string(refused_port()) + "/v1";
  auto provider = "model_providers.fake={name=\\\"fake\\\",base_url=\\\"" +
                  url +
                  "\\\",env_key=\\\"OPENAI_API_KEY\\\",wire_api="
                  "\\\"responses\\\",request_max_retries=0,stream_max_"
                  "retries=0}";
  auto agent = R"({"agent_id": "primary", "profile": "codex", "agent_cli": ")" +
               codex + R"(", "idle_timeout_s": 15, )" +
               R"("cli_flags": "-c model_provider=fake -c ')" + provider +
               "'\"}";
  auto r = run_chain(dir, "codex-offline", agent, "", 120s, 0);
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "retryable");
  CHECK(text(classified[0], "rule") == "idle_noise");
  CHECK_THAT(text(classified[0], "line"), Catch::Contains("Reconnecting..."));
  // It printed the loop more than once before it was stopped.
  std::size_t loops = 0;
  for (const auto& log : of_kind(r.events, "log"))
    loops += text(log, "line").find("Reconnecting") != std::string::npos;
  CHECK(loops >= 2);
  CHECK(outcome(r) == "succeeded"); // the backup
}

TEST_CASE("real gemini: a bad key is fatal", "[agent_cli]") {
  auto gemini = cli("gemini");
  if (gemini.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "auth");
  // gemini 0.61 rejects the auth type it derives from a base URL; pick the
  // API key explicitly, and no retries of its own.
  std::filesystem::create_directories(g.dir / ".gemini");
  g.dir.write(".gemini/settings.json",
              R"({"security": {"auth": {"selectedType": "gemini-api-key"}},
                  "general": {"maxAttempts": 1}})");
  auto r =
    run_chain(g.dir, "gemini-auth",
              R"({"agent_id": "primary", "profile": "gemini", "agent_cli": ")" +
                gemini + R"(", "cli_flags": "-m gemini-2.5-pro"})",
              R"(, "fatal_scope": "task")");
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "fatal");
  CHECK(text(classified[0], "rule") == "structured:API_KEY_INVALID");
  CHECK(outcome(r) == "failed");
}

TEST_CASE("real qwen: a bad key is fatal, a rate limit waits, out of credit "
          "falls back, overload is retried",
          "[agent_cli]") {
  // qwen-code speaks the OpenAI API: OPENAI_BASE_URL points it at the fake
  // provider (the shipped profile passes OPENAI_* through; qwen picks the
  // OpenAI auth type from them by itself). Its own retries cannot all be
  // turned down: `model.generationConfig.maxRetries: 0` in its settings
  // stops the stream-level rate-limit retries (10, from 60 s), but its
  // request retry (7 attempts, 1.5 s doubling to 30 s, or retry-after) is
  // hard-wired in 0.24.4, so a 429 or 5xx attempt takes about a minute and
  // each class is run once here, with no retry of tasksup's own.
  auto qwen = cli("qwen");
  if (qwen.empty())
    return;
  struct row {
    const char* scenario;
    const char* cls;
    const char* rule;
  };
  for (auto c : {row{"auth", "fatal", "fatal"},
                 row{"rate", "rate_limit", "rate_limit_per_minute"},
                 row{"billing", "agent_failure", "billing"},
                 row{"overloaded", "retryable", "transient"}}) {
    INFO(c.scenario);
    fixture_guard g;
    if (!g.ok())
      return;
    provider_env(g.dir, g.fp, c.scenario);
    ::setenv("OPENAI_BASE_URL", (g.fp.url(c.scenario) + "/v1").c_str(), 1);
    ::setenv("OPENAI_MODEL", "gpt-5", 1);
    std::filesystem::create_directories(g.dir / ".qwen");
    g.dir.write(".qwen/settings.json",
                R"({"model": {"generationConfig": {"maxRetries": 0}}})");
    auto r = run_chain(g.dir, std::string{"qwen-"} + c.scenario,
                       R"({"agent_id": "primary", "profile": "qwen", )"
                       R"("agent_cli": ")" +
                         qwen + R"("})",
                       R"(, "fatal_scope": "task")", 300s, 0);
    INFO(r.run.out << r.run.err);
    auto classified = of_kind(r.events, "classified");
    REQUIRE(classified.size() == 1);
    CHECK(text(classified[0], "class") == c.cls);
    CHECK(text(classified[0], "rule") == c.rule);
    CHECK_THAT(text(classified[0], "line"), Catch::Contains("API Error"));
    if (std::string{c.scenario} == "rate") {
      // The hint in OpenAI's message ("Please try again in 7s").
      CHECK(classified[0].at("retry_after_s").to_number<double>() == 7);
    }
    // fatal ends the task; every other class hands over to the backup.
    bool fatal = std::string{c.cls} == "fatal";
    CHECK(of_kind(r.events, "agent_switched").size() == (fatal ? 0u : 1u));
    CHECK(outcome(r) == (fatal ? "failed" : "succeeded"));
  }
}

TEST_CASE("real qwen: the shipped profile succeeds", "[agent_cli]") {
  auto qwen = cli("qwen");
  if (qwen.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "ok");
  ::setenv("OPENAI_BASE_URL", (g.fp.url("ok") + "/v1").c_str(), 1);
  ::setenv("OPENAI_MODEL", "gpt-5", 1);
  auto r = run_chain(g.dir, "qwen-ok",
                     R"({"agent_id": "primary", "profile": "qwen", )"
                     R"("agent_cli": ")" +
                       qwen + R"("})");
  INFO(r.run.out << r.run.err);
  CHECK(r.run.status == 0);
  CHECK(of_kind(r.events, "classified").empty());
  bool answered = false;
  for (const auto& log : of_kind(r.events, "log"))
    answered =
      answered || text(log, "line") == "Done: the fake provider says hello.";
  CHECK(answered);
}

TEST_CASE("a user profile in the config's profiles directory runs end to end",
          "[agent_cli][profile]") {
  // A CLI of the user's own, described by a profile file the user wrote:
  // its command (relative to the profiles directory), its flags, where its
  // prompt goes and which variable it needs. No real CLI needed.
  scratch dir;
  std::filesystem::create_directories(dir / "cfg/profiles");
  dir.write("cfg/profiles/scripted.json", R"({
    "agent_cli": "./scripted-agent", "cli_flags": "--mode 'very strict'",
    "prompt_flag": "--prompt", "env_passthrough": ["SCRIPTED_TOKEN"],
    "idle_timeout_s": 30, "provider": "acme"})");
  auto agent = dir.write("cfg/profiles/scripted-agent", R"(#!/bin/sh
echo "args: $*"
[ "$#" -eq 6 ] && [ "$1" = --mode ] && [ "$2" = "very strict" ] &&
  [ "$3" = --extra ] && [ "$4" = on ] && [ "$5" = --prompt ] &&
  [ "$6" = "say hi" ] || { echo "unexpected arguments" >&2; exit 3; }
[ "$SCRIPTED_TOKEN" = t0k3n ] || { echo "no token" >&2; exit 4; }
[ -z "$NOT_PASSED" ] || { echo "a variable leaked" >&2; exit 5; }
echo "scripted agent done"
)");
  std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
  auto task = dir.write("task.json", R"({"id": "user-profile",
    "prompt": "say hi", "runtime": "process",
    "agent_selection": {"agents": [
      {"agent_id": "mine", "profile": "scripted", "cli_flags": "--extra on"}]},
    "supervisor": {"max_retries_per_agent": 0}})");
  auto events = dir / "events.jsonl";
  auto r = run_to_end(dir,
                      {"run", "--config", dir / "cfg", "--events", events,
                       "--work-dir", dir / "work", task},
                      60s, {"SCRIPTED_TOKEN=t0k3n", "NOT_PASSED=secret"});
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  auto evs = json_lines(slurp(events));
  auto started = of_kind(evs, "attempt_started");
  REQUIRE(started.size() == 1);
  CHECK(text(started[0], "agent_cli") == agent);
  std::vector<std::string> lines;
  for (const auto& log : of_kind(evs, "log"))
    lines.push_back(text(log, "line"));
  CHECK(std::find(lines.begin(), lines.end(),
                  "args: --mode very strict --extra on --prompt say hi") !=
        lines.end());
  CHECK(std::find(lines.begin(), lines.end(), "scripted agent done") !=
        lines.end());
  CHECK(of_kind(evs, "classified").empty());

  // `validate` resolves the profile the same way, and names the file and
  // the field of a profile nobody defined.
  auto ok = run_to_end(dir, {"validate", "--config", dir / "cfg", task});
  INFO(ok.out << ok.err);
  CHECK(ok.status == 0);
  auto typo = dir.write("typo.json", R"({"prompt": "p", "agent_selection":
    {"agents": [{"agent_id": "mine", "profile": "scriptd"}]}})");
  auto bad = run_to_end(dir, {"validate", "--config", dir / "cfg", typo});
  CHECK(bad.status == 2);
  CHECK_THAT(bad.err,
             Catch::Contains(typo + ": /agent_selection/agents/0/profile: "
                                    "unknown agent profile \"scriptd\"") &&
               Catch::Contains("scripted"));
  // `run` refuses it before running anything.
  auto refused = run_to_end(
    dir, {"run", "--config", dir / "cfg", "--work-dir", dir / "work2", typo});
  CHECK(refused.status == 2);
  CHECK_THAT(refused.err, Catch::Contains("/agent_selection/agents/0/profile"));
}

TEST_CASE("real codex: an install without its native binary is a broken "
          "agent",
          "[agent_cli]") {
  // npm install --omit=optional (or a platform npm has no package for)
  // leaves @openai/codex without @openai/codex-linux-x64: its launcher then
  // throws "Missing optional dependency". Made here by copying the
  // launcher alone.
  auto codex = cli("codex");
  if (codex.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  namespace fs = std::filesystem;
  auto installed = fs::canonical(codex).parent_path().parent_path();
  auto copy = fs::path{g.dir / "lonely/node_modules/@openai/codex"};
  fs::create_directories(copy / "bin");
  fs::copy_file(installed / "package.json", copy / "package.json");
  fs::copy_file(installed / "bin/codex.js", copy / "bin/codex.js");
  provider_env(g.dir, g.fp, "ok");
  auto r = run_chain(g.dir, "codex-nobinary",
                     codex_agent((copy / "bin/codex.js").string(), g.fp, "ok"));
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "agent_failure");
  CHECK(text(classified[0], "line").find("Missing optional dependency") !=
        std::string::npos);
  CHECK(of_kind(r.events, "retry_scheduled").empty());
  CHECK(of_kind(r.events, "agent_switched").size() == 1);
  CHECK(outcome(r) == "succeeded");
}

TEST_CASE("real codex: without its API key the task fails at once",
          "[agent_cli]") {
  auto codex = cli("codex");
  if (codex.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "ok");
  ::unsetenv("OPENAI_API_KEY");
  auto r = run_chain(g.dir, "codex-nokey", codex_agent(codex, g.fp, "ok"),
                     R"(, "fatal_scope": "task")");
  ::setenv("OPENAI_API_KEY", "sk-fake", 1);
  INFO(r.run.out << r.run.err);
  auto classified = of_kind(r.events, "classified");
  REQUIRE(classified.size() == 1);
  CHECK(text(classified[0], "class") == "fatal");
  CHECK(text(classified[0], "line").find("OPENAI_API_KEY") !=
        std::string::npos);
  CHECK(of_kind(r.events, "retry_scheduled").empty());
  CHECK(outcome(r) == "failed");
}

TEST_CASE("real codex and claude: a usage limit is quota_exhausted with its "
          "reset, not retried",
          "[agent_cli]") {
  auto codex = cli("codex");
  auto claude = cli("claude");
  if (codex.empty() || claude.empty())
    return;
  fixture_guard g;
  if (!g.ok())
    return;
  provider_env(g.dir, g.fp, "quota");
  // A subscription login: Claude Code shows its plan limit and reset only
  // then ("You've hit your 5-hour limit · resets 3:10am (UTC)").
  ::setenv("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-fake", 1);
  ::unsetenv("ANTHROPIC_API_KEY");
  auto by_claude = run_chain(g.dir, "claude-quota", claude_agent(claude));
  ::unsetenv("CLAUDE_CODE_OAUTH_TOKEN");
  auto by_codex =
    run_chain(g.dir, "codex-quota", codex_agent(codex, g.fp, "quota"));
  for (const auto* r : {&by_claude, &by_codex}) {
    INFO(r->run.out << r->run.err);
    auto classified = of_kind(r->events, "classified");
    REQUIRE(classified.size() == 1);
    CHECK(text(classified[0], "class") == "quota_exhausted");
    // The fake server's reset is 2 h 13 min after the request; the CLIs
    // print it to the minute.
    REQUIRE(classified[0].at("retry_after_s").is_number());
    auto secs = classified[0].at("retry_after_s").to_number<double>();
    CHECK(secs > 2 * 3600 + 11 * 60);
    CHECK(secs < 2 * 3600 + 14 * 60);
    CHECK(of_kind(r->events, "retry_scheduled").empty());
  }
}

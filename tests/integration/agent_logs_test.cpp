// `tasksup classify` on what the real agent CLIs printed: every saved log in
// tests/fixtures/agent-logs/ (captured from claude, codex and gemini run
// against tests/fixtures/fake_provider.py) must get the class a user wants.

#include "cli_runner.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using tasksup::test::run_tasksup;

namespace {

const std::string logs_dir = TASKSUP_FIXTURES_DIR "/agent-logs";

struct log_case {
  std::string file;
  std::string agent_cli;
  int exit_code = 0;
  std::string cls;
  std::string rule;
};

std::vector<log_case> read_cases() {
  std::ifstream in{logs_dir + "/cases.txt"};
  REQUIRE(in);
  std::vector<log_case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream fields{line};
    log_case c;
    fields >> c.file >> c.agent_cli >> c.exit_code >> c.cls >> c.rule;
    INFO(line);
    REQUIRE_FALSE(fields.fail());
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string str(const boost::json::value& v) {
  return std::string{v.as_string().c_str(), v.as_string().size()};
}

} // namespace

TEST_CASE("classify: each real CLI log gets the class a user wants") {
  auto cases = read_cases();
  // Every class of the issue is covered for all three CLIs.
  REQUIRE(cases.size() >= 50);
  for (const auto& c : cases) {
    INFO(c.file);
    auto res = run_tasksup({"classify", "--json", "--exit-code",
                            std::to_string(c.exit_code), "--agent-cli",
                            c.agent_cli, logs_dir + "/" + c.file});
    INFO(res.err);
    REQUIRE(res.status == 0);
    boost::system::error_code ec;
    auto doc = boost::json::parse(res.out, ec);
    REQUIRE_FALSE(ec);
    const auto& obj = doc.as_object();
    CHECK(str(obj.at("class")) == c.cls);
    if (c.cls != "success")
      CHECK(str(obj.at("rule")) == c.rule);
  }
}

TEST_CASE("classify: network and overload failures of real CLIs are never "
          "fatal") {
  // The worst case: a transient failure classified fatal stops a
  // task that would have succeeded a minute later.
  for (const auto& c : read_cases()) {
    if (c.rule != "transient" && c.cls != "rate_limit")
      continue;
    INFO(c.file);
    auto res = run_tasksup({"classify", "--json", "--exit-code",
                            std::to_string(c.exit_code), "--agent-cli",
                            c.agent_cli, logs_dir + "/" + c.file});
    REQUIRE(res.status == 0);
    auto doc = boost::json::parse(res.out);
    CHECK(str(doc.as_object().at("class")) != "fatal");
  }
}

TEST_CASE("classify: a quota's reset is read from what the real CLIs print") {
  // The quota logs were captured at about this Unix time (2026-11-27
  // 23:26:40 UTC); the fake server's reset was 02:10 UTC the next night,
  // which claude printed as "resets 3:10am (Europe/Berlin)" and codex as
  // "try again at Nov 28th, 2026 2:10 AM".
  const std::string now = "1795822000";
  struct expectation {
    std::string file;
    std::string agent_cli;
    bool has_reset;
  };
  for (const auto& e : std::vector<expectation>{
         {"claude-quota.log", "claude", true},
         {"claude-quota-json.log", "claude", true},
         {"codex-quota.log", "codex", true},
         {"codex-quota-json.log", "codex", true},
         // gemini and qwen say the quota is used up but not when it resets.
         {"gemini-quota.log", "gemini", false},
         {"qwen-quota.log", "qwen", false},
       }) {
    INFO(e.file);
    auto res =
      run_tasksup({"classify", "--json", "--now", now, "--exit-code", "1",
                   "--agent-cli", e.agent_cli, logs_dir + "/" + e.file});
    REQUIRE(res.status == 0);
    auto doc = boost::json::parse(res.out);
    const auto& obj = doc.as_object();
    CHECK(str(obj.at("class")) == "quota_exhausted");
    if (e.has_reset) {
      REQUIRE(obj.at("retry_after_s").is_number());
      auto secs = obj.at("retry_after_s").to_number<double>();
      // 02:10:00 or (the epoch in claude's JSON) 02:10:37 UTC.
      CHECK(secs >= 9800);
      CHECK(secs <= 9837);
      CHECK(str(obj.at("reset_at")).rfind("2026-11-28T02:10:", 0) == 0);
    } else {
      CHECK(obj.at("retry_after_s").is_null());
      CHECK(obj.at("reset_at").is_null());
    }
  }
}

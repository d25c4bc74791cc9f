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

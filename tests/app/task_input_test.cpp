#include "task_input.hpp"

#include <boost/json/parse.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using namespace tasksup::app;

namespace {

std::string cli_of(const boost::json::value& doc, std::size_t i) {
  return std::string{
    doc.at("agent_selection").at("agents").at(i).at("agent_cli").as_string()};
}

} // namespace

TEST_CASE("relative agent paths are taken from the task file's directory") {
  auto doc = boost::json::parse(R"({"prompt": "p", "agent_selection":
    {"agents": [{"agent_id": "a", "agent_cli": "./agents/flaky-agent"},
                {"agent_id": "b", "agent_cli": "codex"},
                {"agent_id": "c", "agent_cli": "/usr/bin/claude"},
                {"agent_id": "d", "agent_cli": "tools/../bin/gemini"}]}})");
  resolve_agent_paths(doc, "/srv/tasks");
  CHECK(cli_of(doc, 0) == "/srv/tasks/agents/flaky-agent");
  CHECK(cli_of(doc, 1) == "codex"); // left to PATH
  CHECK(cli_of(doc, 2) == "/usr/bin/claude");
  CHECK(cli_of(doc, 3) == "/srv/tasks/bin/gemini");
}

TEST_CASE("values of the wrong type are left for validation to report") {
  auto doc = boost::json::parse(R"({"agent_selection":
    {"agents": [{"agent_cli": 5}, "x", {"agent_id": "a"}]}})");
  auto before = doc;
  resolve_agent_paths(doc, "/srv");
  CHECK(doc == before);
  auto scalar = boost::json::parse("[1, 2]");
  resolve_agent_paths(scalar, "/srv");
  CHECK(scalar == boost::json::parse("[1, 2]"));
}

TEST_CASE("a task file is read with its paths resolved, errors name it") {
  auto dir = std::filesystem::temp_directory_path() / "tasksup-task-input";
  std::filesystem::create_directories(dir);
  auto path = (dir / "t.json").string();
  {
    std::ofstream out{path};
    out << R"({"prompt": "p", "agent_selection": {"agents":
      [{"agent_id": "a", "agent_cli": "./x"}]}})";
  }
  auto in = read_task_input(path);
  REQUIRE(in);
  CHECK(cli_of(in->doc, 0) == (dir / "x").string());
  CHECK(boost::json::parse(in->text) == in->doc);
  {
    std::ofstream out{path};
    out << "{\"prompt\": ";
  }
  auto bad = read_task_input(path);
  REQUIRE(!bad);
  CHECK(bad.error().to_string().find(path) != std::string::npos);
  std::filesystem::remove_all(dir);
}

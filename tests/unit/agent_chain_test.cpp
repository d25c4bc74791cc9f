#include "tasksup/supervisor/agent_chain.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace tasksup;

namespace {

agent_spec agent(std::string id) {
  agent_spec out;
  out.agent_id = id;
  out.agent_cli = id + "-cli";
  return out;
}

agent_selection selection(std::vector<std::string> ids,
                          std::map<std::string, std::string> fallbacks) {
  agent_selection out;
  for (auto& id : ids)
    out.agents.push_back(agent(id));
  out.agent_fallbacks = std::move(fallbacks);
  return out;
}

std::vector<std::string> ids(const agent_chain& chain) {
  std::vector<std::string> out;
  for (auto& ag : chain.agents)
    out.push_back(ag.agent_id);
  return out;
}

using strings = std::vector<std::string>;

} // namespace

TEST_CASE("no selection or no agents gives the default agent") {
  auto def = agent("default");
  auto chain = build_agent_chain(std::nullopt, def);
  CHECK(ids(chain) == strings{"default"});
  CHECK(chain.agents[0].agent_cli == "default-cli");
  CHECK(chain.warnings.empty());
  chain = build_agent_chain(selection({}, {{"a", "b"}}), def, "a");
  CHECK(ids(chain) == strings{"default"});
  CHECK(chain.warnings.empty());
}

TEST_CASE("the chain follows agent_fallbacks from the first agent") {
  auto def = agent("default");
  auto chain = build_agent_chain(
    selection({"a", "b", "c"}, {{"a", "b"}, {"b", "c"}}), def);
  CHECK(ids(chain) == strings{"a", "b", "c"});
  CHECK(chain.agents[2].agent_cli == "c-cli");
  CHECK(chain.warnings.empty());
  SECTION("agents without a link to them are not in the chain") {
    chain = build_agent_chain(selection({"a", "b", "c"}, {{"a", "c"}}), def);
    CHECK(ids(chain) == strings{"a", "c"});
    chain = build_agent_chain(selection({"a", "b", "c"}, {}), def);
    CHECK(ids(chain) == strings{"a"});
    CHECK(chain.warnings.empty());
  }
}

TEST_CASE("a fallback cycle stops the chain with a warning") {
  auto def = agent("default");
  auto chain = build_agent_chain(
    selection({"a", "b", "c"}, {{"a", "b"}, {"b", "c"}, {"c", "a"}}), def);
  CHECK(ids(chain) == strings{"a", "b", "c"});
  REQUIRE(chain.warnings.size() == 1);
  CHECK(chain.warnings[0] == "fallback cycle: c -> a stops the chain");
  SECTION("an agent falling back to itself") {
    chain = build_agent_chain(selection({"a"}, {{"a", "a"}}), def);
    CHECK(ids(chain) == strings{"a"});
    CHECK(chain.warnings == strings{"fallback cycle: a -> a stops the chain"});
  }
}

TEST_CASE("a fallback to an unknown agent stops the chain with a warning") {
  auto chain = build_agent_chain(
    selection({"a", "b", "c"}, {{"a", "b"}, {"b", "z"}}), agent("default"));
  CHECK(ids(chain) == strings{"a", "b"});
  REQUIRE(chain.warnings.size() == 1);
  CHECK_THAT(chain.warnings[0],
             Catch::StartsWith("fallback of b names unknown agent \"z\""));
}

TEST_CASE("round-robin start picks the starting agent") {
  auto sel = selection({"a", "b", "c"}, {{"a", "b"}, {"b", "c"}, {"c", "a"}});
  auto chain = build_agent_chain(sel, agent("default"), std::string{"b"});
  CHECK(ids(chain) == strings{"b", "c", "a"});
  CHECK(chain.warnings == strings{"fallback cycle: a -> b stops the chain"});
  SECTION("an unknown start agent warns and starts with the first") {
    chain = build_agent_chain(sel, agent("default"), std::string{"q"});
    CHECK(ids(chain) == strings{"a", "b", "c"});
    REQUIRE(chain.warnings.size() == 2);
    CHECK_THAT(chain.warnings[0],
               Catch::Contains("\"q\"") && Catch::Contains("unknown"));
  }
}

TEST_CASE("a duplicated agent id warns and the first definition wins") {
  auto sel = selection({"a", "b"}, {{"a", "b"}});
  auto dup = agent("a");
  dup.agent_cli = "other";
  sel.agents.push_back(dup);
  auto chain = build_agent_chain(sel, agent("default"));
  CHECK(ids(chain) == strings{"a", "b"});
  CHECK(chain.agents[0].agent_cli == "a-cli");
  REQUIRE(chain.warnings.size() == 1);
  CHECK_THAT(chain.warnings[0], Catch::Contains("\"a\" is defined twice"));
}

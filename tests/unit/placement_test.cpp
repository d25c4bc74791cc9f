#include "tasksup/supervisor/placement.hpp"

#include "tasksup/supervisor/config.hpp"

#include <boost/json/parse.hpp>

#include <catch2/catch.hpp>

using namespace tasksup;

namespace {

expected<task_spec> parse_task_text(const char* text, const char* where) {
  static const config_set defaults;
  return parse_task(boost::json::parse(text), where, defaults);
}

node_load node(std::string name, int max, int running,
               std::vector<std::string> runtimes = {"process"},
               label_map labels = {}) {
  node_load n;
  n.offer.name = std::move(name);
  n.offer.max_concurrent = max;
  n.offer.runtimes = std::move(runtimes);
  n.offer.labels = std::move(labels);
  n.running = running;
  return n;
}

placement_request wants(std::string runtime, label_map labels = {}) {
  return placement_request{std::move(runtime), std::move(labels)};
}

} // namespace

TEST_CASE("placement: the fitting node with the most free slots wins") {
  std::vector<node_load> nodes{node("a", 4, 3), node("b", 8, 2),
                               node("c", 2, 0)};
  auto i = choose_node(nodes, wants("process"));
  REQUIRE(i);
  CHECK(nodes[*i].offer.name == "b");
  SECTION("ties go to the first node") {
    nodes[1].running = 6; // b: 2 free, c: 2 free
    nodes[0].running = 4; // a: full
    i = choose_node(nodes, wants("process"));
    REQUIRE(i);
    CHECK(nodes[*i].offer.name == "b");
  }
  SECTION("full nodes are never chosen") {
    for (auto& n : nodes)
      n.running = n.offer.max_concurrent;
    CHECK_FALSE(choose_node(nodes, wants("process")));
    CHECK_THAT(unplaced_reason(nodes, wants("process")),
               Catch::Contains("busy") && Catch::Contains("3 node(s)") &&
                 Catch::Contains("14 of 14"));
  }
}

TEST_CASE("placement: runtimes and labels must all match") {
  std::vector<node_load> nodes{
    node("cpu", 8, 0, {"process", "docker"}, {{"zone", "eu"}}),
    node("gpu", 1, 0, {"process"}, {{"gpu", "true"}, {"zone", "us"}})};
  auto i = choose_node(nodes, wants("process", {{"gpu", "true"}}));
  REQUIRE(i);
  CHECK(nodes[*i].offer.name == "gpu");
  CHECK_FALSE(choose_node(nodes, wants("docker", {{"gpu", "true"}})));
  CHECK_FALSE(choose_node(nodes, wants("process", {{"gpu", "false"}})));
  CHECK_FALSE(
    choose_node(nodes, wants("process", {{"gpu", "true"}, {"zone", "eu"}})));
  SECTION("the reason names what nothing offers") {
    CHECK(unplaced_reason({}, wants("process")) == "no worker node has joined");
    CHECK(unplaced_reason(nodes, wants("process", {{"tpu", "v5"}})) ==
          "no worker node with the process runtime has label tpu=v5");
    CHECK_THAT(unplaced_reason(nodes, wants("docker", {{"gpu", "true"}})),
               Catch::Contains("label gpu=true"));
    CHECK_THAT(unplaced_reason(
                 nodes, wants("process", {{"gpu", "true"}, {"zone", "eu"}})),
               Catch::Contains("no single worker node has all of") &&
                 Catch::Contains("gpu=true,zone=eu"));
    auto only_process = nodes;
    only_process[0].offer.runtimes = {"process"};
    CHECK(unplaced_reason(only_process, wants("docker")) ==
          "no worker node has the docker runtime");
  }
  SECTION("a busy fitting node makes the task wait, not go elsewhere") {
    nodes[1].running = 1;
    CHECK_FALSE(choose_node(nodes, wants("process", {{"gpu", "true"}})));
    CHECK_THAT(unplaced_reason(nodes, wants("process", {{"gpu", "true"}})),
               Catch::Contains("1 of 1 attempts running"));
  }
}

TEST_CASE("placement: labels from the command line are checked") {
  auto l = parse_label("gpu=true");
  REQUIRE(l);
  CHECK(l->first == "gpu");
  CHECK(l->second == "true");
  auto empty_value = parse_label("pool=");
  REQUIRE(empty_value);
  CHECK(empty_value->second.empty());
  CHECK_THAT(parse_label("gpu").error().to_string(),
             Catch::Contains("KEY=VALUE"));
  CHECK_FALSE(parse_label("=x"));
  CHECK_FALSE(parse_label("-gpu=x"));
  CHECK_FALSE(parse_label("g pu=x"));
  CHECK_FALSE(parse_label(std::string(64, 'k') + "=x"));
  CHECK(parse_label(std::string(63, 'k') + "=x"));
  CHECK_FALSE(parse_label("k=" + std::string(256, 'v')));
  CHECK_FALSE(parse_label("k=tab\there"));
}

TEST_CASE("placement: a node's offer from the network is bounds-checked") {
  node_offer o;
  o.name = "w1";
  o.max_concurrent = 4;
  o.runtimes = {"process"};
  CHECK(check_offer(o));
  auto bad = o;
  bad.max_concurrent = 0;
  CHECK_FALSE(check_offer(bad));
  bad = o;
  bad.runtimes = {"process", "lxc"};
  CHECK_THAT(check_offer(bad).error().to_string(), Catch::Contains("lxc"));
  bad = o;
  bad.runtimes.clear();
  CHECK_FALSE(check_offer(bad));
  bad = o;
  bad.name = "../etc";
  CHECK_FALSE(check_offer(bad));
  bad = o;
  for (int i = 0; i < 40; ++i)
    bad.labels["k" + std::to_string(i)] = "v";
  CHECK_THAT(check_offer(bad).error().to_string(),
             Catch::Contains("at most 32 labels"));
}

TEST_CASE("placement: a task file's placement labels are read and checked") {
  auto ok = parse_task_text(
    R"({"prompt": "p", "placement": {"labels": {"gpu": "true"}}})", "t.json");
  REQUIRE(ok);
  CHECK(ok->placement.labels == label_map{{"gpu", "true"}});
  auto bad_key = parse_task_text(
    R"({"prompt": "p", "placement": {"labels": {"g pu": "true"}}})", "t.json");
  REQUIRE_FALSE(bad_key);
  CHECK_THAT(bad_key.error().to_string(),
             Catch::Contains("t.json") &&
               Catch::Contains("/placement/labels/g pu"));
  auto not_string = parse_task_text(
    R"({"prompt": "p", "placement": {"labels": {"gpu": true}}})", "t.json");
  REQUIRE_FALSE(not_string);
  CHECK_THAT(not_string.error().to_string(),
             Catch::Contains("/placement/labels/gpu"));
  auto unknown = parse_task_text(
    R"({"prompt": "p", "placement": {"node": "w1"}})", "t.json");
  REQUIRE_FALSE(unknown);
  CHECK_THAT(unknown.error().to_string(), Catch::Contains("node"));
}

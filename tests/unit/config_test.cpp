#include "tasksup/supervisor/config.hpp"
#include "tasksup/supervisor/group_spec.hpp"

#include <boost/json/parse.hpp>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace tasksup;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

json::value doc(std::string_view text) {
  auto res = parse_json_text(text, "test.json");
  INFO(text);
  REQUIRE(res.has_value());
  return *res;
}

/// Checks that `res` failed with exactly this file, path and message.
template<class T>
void check_error(const expected<T>& res, std::string_view where,
                 std::string_view path, std::string_view what) {
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == where);
  CHECK(res.error().path == path);
  CHECK(res.error().what == what);
}

/// Checks file and path, and that the message contains `fragment`.
template<class T>
void check_error_contains(const expected<T>& res, std::string_view path,
                          std::string_view fragment) {
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().path == path);
  CHECK_THAT(res.error().what, Catch::Contains(std::string{fragment}));
}

expected<supervisor_config> sup(std::string_view text,
                                const supervisor_config& base = {}) {
  return parse_supervisor_config(doc(text), "sup.json", base);
}

expected<std::vector<classifier_rule>> rules(std::string_view text) {
  return parse_classifier_rules(doc(text), "classifier.json");
}

expected<node_config> node(std::string_view text) {
  return parse_node_config(doc(text), "node.json");
}

expected<environment_config> env(std::string_view text) {
  return parse_environment(doc(text), "env.json", "team-a");
}

expected<task_spec> task(std::string_view text,
                         const config_set& cfg = builtin_config()) {
  return parse_task(doc(text), "task.json", cfg);
}

/// A scratch directory, removed with everything in it at scope exit.
class temp_dir {
public:
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "tasksup-cfg-XXXXXX");
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }

  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }

  const std::string& path() const { return path_; }

  std::string write(const std::string& rel, std::string_view content) const {
    auto full = fs::path{path_} / rel;
    fs::create_directories(full.parent_path());
    std::ofstream out{full, std::ios::binary};
    out << content;
    return full.string();
  }

private:
  std::string path_;
};

void check_same_backoff(const backoff_spec& a, const backoff_spec& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.table_s == b.table_s);
  CHECK(a.initial_s == b.initial_s);
  CHECK(a.multiplier == b.multiplier);
  CHECK(a.max_s == b.max_s);
  CHECK(a.jit == b.jit);
}

void check_same_supervisor(const supervisor_config& a,
                           const supervisor_config& b) {
  CHECK(a.max_retries_per_agent == b.max_retries_per_agent);
  CHECK(a.enable_fallback == b.enable_fallback);
  CHECK(a.backoff_base_seconds == b.backoff_base_seconds);
  CHECK(a.rate_limit_backoff_base == b.rate_limit_backoff_base);
  CHECK(a.max_total_attempts == b.max_total_attempts);
  CHECK(a.max_crash_restarts == b.max_crash_restarts);
  CHECK(a.actions == b.actions);
  CHECK(a.restart == b.restart);
  CHECK(a.intensity.max_restarts == b.intensity.max_restarts);
  CHECK(a.intensity.period_s == b.intensity.period_s);
  CHECK(a.intensity.reset_after_s == b.intensity.reset_after_s);
  REQUIRE(a.backoff.size() == b.backoff.size());
  for (const auto& [cls, spec] : a.backoff) {
    REQUIRE(b.backoff.count(cls) == 1);
    check_same_backoff(spec, b.backoff.at(cls));
  }
  CHECK(a.deadline_s == b.deadline_s);
  CHECK(a.stop_grace_s == b.stop_grace_s);
  CHECK(a.fatal == b.fatal);
}

void check_same_rules(const std::vector<classifier_rule>& a,
                      const std::vector<classifier_rule>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("rule " << i);
    CHECK(a[i].id == b[i].id);
    CHECK(a[i].cls == b[i].cls);
    CHECK(a[i].exit_codes == b[i].exit_codes);
    CHECK(a[i].oom_killed == b[i].oom_killed);
    CHECK(a[i].signals == b[i].signals);
    CHECK(a[i].patterns == b[i].patterns);
    CHECK(a[i].window_lines == b[i].window_lines);
    CHECK(a[i].match_all == b[i].match_all);
  }
}

const std::string repo_config = TASKSUP_SOURCE_DIR "/config";

} // namespace

// -- the shipped config directory ---------------------------------------------

TEST_CASE("config/: supervisor.json and classifier.json are the built-in "
          "defaults") {
  auto cfg = load_config_dir(repo_config);
  INFO((cfg ? "" : cfg.error().to_string()));
  REQUIRE(cfg.has_value());
  check_same_supervisor(cfg->supervisor, supervisor_config{});
  check_same_rules(cfg->classifier_rules, default_classifier_rules());
  // Everything in node.json but the example default agent is the default too.
  node_config builtin;
  CHECK(cfg->node.max_concurrent == builtin.max_concurrent);
  CHECK(cfg->node.breaker.max_failures == builtin.breaker.max_failures);
  CHECK(cfg->node.breaker.reset_timeout_s == builtin.breaker.reset_timeout_s);
  CHECK(cfg->node.breaker.stale_after_s == builtin.breaker.stale_after_s);
  CHECK(cfg->node.retry_budget_capacity == builtin.retry_budget_capacity);
  CHECK(cfg->node.retry_budget_refill_per_s ==
        builtin.retry_budget_refill_per_s);
  CHECK(cfg->node.default_runtime == builtin.default_runtime);
  REQUIRE(cfg->environments.count("default") == 1);
  CHECK(cfg->environments.at("default").selection.agents.size() >= 2);
}

TEST_CASE("config/: every JSON file validates") {
  auto cfg = load_config_dir(repo_config);
  REQUIRE(cfg.has_value());
  std::size_t tasks = 0;
  for (const auto& entry : fs::recursive_directory_iterator(repo_config)) {
    if (entry.path().extension() != ".json")
      continue;
    auto path = entry.path().string();
    INFO(path);
    auto parent = entry.path().parent_path().filename();
    if (parent == "config" || parent == "environments" ||
        parent == "profiles" || // profiles: agent_profile_test.cpp
        parent == "roles") {    // roles: role_test.cpp
      CHECK(read_json_file(path).has_value());
      continue; // checked by load_config_dir above
    }
    // A group or workflow file is read as `run` reads it.
    auto doc = read_json_file(path);
    REQUIRE(doc);
    if (is_group_document(*doc)) {
      auto group = load_group_file(path, *cfg);
      INFO((group ? "" : group.error().to_string()));
      CHECK(group.has_value());
      ++tasks;
      continue;
    }
    auto res = load_task_file(path, *cfg);
    INFO((res ? "" : res.error().to_string()));
    CHECK(res.has_value());
    ++tasks;
  }
  CHECK(tasks >= 1);
}

TEST_CASE("builtin_config holds the default rules and no environments") {
  auto cfg = builtin_config();
  check_same_rules(cfg.classifier_rules, default_classifier_rules());
  CHECK(cfg.environments.empty());
}

// -- JSON text
// ------------------------------------------------------------------

TEST_CASE("JSON syntax errors name line and column") {
  auto res = parse_json_text("{\n  \"a\": 1,\n  \"b\" 2\n}", "x.json");
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == "x.json");
  CHECK(res.error().path.empty());
  CHECK_THAT(res.error().what,
             Catch::StartsWith("invalid JSON at line 3, column 7: "));
  auto trailing = parse_json_text("{\"a\": 1,}", "y.json");
  REQUIRE_FALSE(trailing.has_value());
  CHECK_THAT(trailing.error().what,
             Catch::StartsWith("invalid JSON at line 1, column 9: "));
  auto incomplete = parse_json_text("{\"a\": ", "z.json");
  REQUIRE_FALSE(incomplete.has_value());
  CHECK_THAT(incomplete.error().what, Catch::StartsWith("invalid JSON at "));
  CHECK_FALSE(parse_json_text("", "e.json").has_value());
  CHECK_FALSE(parse_json_text("{} extra", "e.json").has_value());
  CHECK_FALSE(parse_json_text("[\"\xff\"]", "e.json").has_value());
}

TEST_CASE("JSON nesting is bounded") {
  std::string deep(10000, '[');
  auto res = parse_json_text(deep, "deep.json");
  REQUIRE_FALSE(res.has_value());
  CHECK_THAT(res.error().what, Catch::StartsWith("invalid JSON at line 1"));
}

TEST_CASE("read_json_file names the file on every failure") {
  temp_dir dir;
  auto missing = dir.path() + "/missing.json";
  auto res = read_json_file(missing);
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == missing);
  CHECK_THAT(res.error().what, Catch::StartsWith("cannot open: "));
  auto is_dir = read_json_file(dir.path());
  REQUIRE_FALSE(is_dir.has_value());
  CHECK(is_dir.error().where == dir.path());
  auto bad = dir.write("bad.json", "{\"a\": tru}");
  auto bad_res = read_json_file(bad);
  REQUIRE_FALSE(bad_res.has_value());
  CHECK(bad_res.error().where == bad);
  CHECK_THAT(bad_res.error().what, Catch::StartsWith("invalid JSON at line 1"));
  auto huge = dir.write("huge.json", std::string(17 * 1024 * 1024, ' '));
  auto huge_res = read_json_file(huge);
  REQUIRE_FALSE(huge_res.has_value());
  CHECK_THAT(huge_res.error().what, Catch::Contains("larger than"));
}

TEST_CASE("duplicate keys are errors naming the key and its JSON pointer") {
  // Boost.JSON alone keeps the last value: {"id": "../../etc", "id": "x1"}
  // would read as a valid id.
  auto top = parse_json_text(R"({"id": "../../etc", "id": "x1"})", "t.json");
  REQUIRE_FALSE(top.has_value());
  CHECK(top.error().where == "t.json");
  CHECK(top.error().path == "/id");
  CHECK(top.error().what ==
        "duplicate key \"id\" (a key may appear only once in an object)");
  auto deep = parse_json_text(R"({"agent_selection": {"agents": [
    {"agent_id": "a", "agent_cli": "x"},
    {"agent_id": "b", "agent_cli": "y", "agent_cli": "z"}]}})",
                              "t.json");
  REQUIRE_FALSE(deep.has_value());
  CHECK(deep.error().path == "/agent_selection/agents/1/agent_cli");
  // Keys are compared after unescaping; `/` and `~` are escaped in the
  // pointer (RFC 6901).
  auto escaped =
    parse_json_text(R"({"x": [1, {"a/b": 1, "a\/b": 2}]})", "t.json");
  REQUIRE_FALSE(escaped.has_value());
  CHECK(escaped.error().path == "/x/1/a~1b");
  auto tilde = parse_json_text(R"({"m~/n": {"k": 1, "k": 2}})", "t.json");
  REQUIRE_FALSE(tilde.has_value());
  CHECK(tilde.error().path == "/m~0~1n/k");
  // Equal keys in different objects are fine.
  CHECK(parse_json_text(R"({"a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 3}]})",
                        "t.json")
          .has_value());
}

TEST_CASE("read_json_file refuses what is not a regular file without "
          "blocking") {
  temp_dir dir;
  auto fifo = dir.path() + "/task.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO for reading blocks until a writer comes; this must not.
  auto res = read_json_file(fifo);
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == fifo);
  CHECK(res.error().what == "not a regular file, expected a JSON file");
  auto dev = read_json_file("/dev/null");
  REQUIRE_FALSE(dev.has_value());
  CHECK(dev.error().what == "not a regular file, expected a JSON file");
}

TEST_CASE("errors about huge keys and values stay readable") {
  auto key = std::string(1024 * 1024, 'k');
  auto res = task("{\"prompt\": \"p\", \"env\": {\"" + key + "=\": \"v\"}}");
  REQUIRE_FALSE(res.has_value());
  auto text = res.error().to_string();
  CHECK(text.size() < 400);
  CHECK_THAT(res.error().path, Catch::StartsWith("/env/kkkk"));
  CHECK_THAT(res.error().path, Catch::EndsWith("..."));
  // Control characters in a key are escaped in the pointer too.
  auto ctl = sup("{\"a\\u001b[31m\": 1}");
  REQUIRE_FALSE(ctl.has_value());
  CHECK(ctl.error().path == "/a\\x1b[31m");
}

// -- supervisor settings
// --------------------------------------------------------

TEST_CASE("supervisor: every key is read") {
  auto res = sup(R"({
    "max_retries_per_agent": 7, "enable_fallback": false,
    "backoff_base_seconds": 2.5, "rate_limit_backoff_base": 30,
    "max_total_attempts": 12, "max_crash_restarts": 0,
    "actions": {"rate_limit": "fail", "fatal": "fallback"},
    "restart": "permanent",
    "intensity": {"max_restarts": 4, "period_s": 60, "reset_after_s": 20},
    "backoff": {
      "retryable": {"kind": "exponential", "initial_s": 1, "multiplier": 2,
                    "max_s": 8, "jitter": "decorrelated"},
      "rate_limit": {"kind": "table", "table_s": [10, 20, 40]}
    },
    "deadline_s": 90, "stop_grace_s": 3
  })");
  REQUIRE(res.has_value());
  const auto& c = *res;
  CHECK(c.max_retries_per_agent == 7);
  CHECK_FALSE(c.enable_fallback);
  CHECK(c.backoff_base_seconds == 2.5);
  CHECK(c.rate_limit_backoff_base == 30.0);
  CHECK(c.max_total_attempts == 12);
  CHECK(c.max_crash_restarts == 0);
  CHECK(c.actions.at(error_class::rate_limit) == action::fail);
  CHECK(c.actions.at(error_class::fatal) == action::fallback);
  // Classes the object does not name keep their action.
  CHECK(c.actions.at(error_class::agent_failure) == action::fallback);
  CHECK(c.actions.size() == all_error_classes.size());
  CHECK(c.restart == restart_type::permanent);
  CHECK(c.intensity.max_restarts == 4);
  CHECK(c.intensity.period_s == 60.0);
  CHECK(c.intensity.reset_after_s == 20.0);
  const auto& exp = c.backoff.at(error_class::retryable);
  CHECK(exp.kind == backoff_spec::kind_t::exponential);
  CHECK(exp.initial_s == 1.0);
  CHECK(exp.multiplier == 2.0);
  CHECK(exp.max_s == 8.0);
  CHECK(exp.jit == jitter::decorrelated);
  const auto& table = c.backoff.at(error_class::rate_limit);
  CHECK(table.kind == backoff_spec::kind_t::table);
  CHECK(table.table_s == std::vector<double>{10, 20, 40});
  // A table without max_s is capped by its largest entry.
  CHECK(table.max_s == 40.0);
  CHECK(c.deadline_s == 90.0);
  CHECK(c.stop_grace_s == 3.0);
}

TEST_CASE("supervisor: a partial object overrides only what it names") {
  supervisor_config base;
  base.max_retries_per_agent = 9;
  base.deadline_s = 100;
  base.intensity.period_s = 50;
  base.actions[error_class::retryable] = action::fallback;
  auto res = sup(R"({"enable_fallback": false, "intensity": {"max_restarts": 2},
                     "actions": {"fatal": "retry"}})",
                 base);
  REQUIRE(res.has_value());
  CHECK(res->max_retries_per_agent == 9);
  CHECK(res->deadline_s == 100.0);
  CHECK_FALSE(res->enable_fallback);
  CHECK(res->intensity.max_restarts == 2);
  CHECK(res->intensity.period_s == 50.0);
  CHECK(res->actions.at(error_class::retryable) == action::fallback);
  CHECK(res->actions.at(error_class::fatal) == action::retry);
  check_same_supervisor(*sup("{}", base), base);
}

TEST_CASE("supervisor: deadline_s null turns a deadline off") {
  supervisor_config base;
  base.deadline_s = 100;
  auto res = sup(R"({"deadline_s": null})", base);
  REQUIRE(res.has_value());
  CHECK_FALSE(res->deadline_s.has_value());
  check_error(sup(R"({"deadline_s": 0})"), "sup.json", "/deadline_s",
              "expected a finite number > 0 and <= 31536000");
}

TEST_CASE("supervisor: a backoff override merges over the one below it") {
  auto base = sup(R"({"backoff": {"retryable": {"kind": "exponential",
                      "initial_s": 2, "multiplier": 4, "max_s": 60}}})");
  REQUIRE(base.has_value());
  auto res = sup(R"({"backoff": {"retryable": {"jitter": "full"}}})", *base);
  REQUIRE(res.has_value());
  const auto& spec = res->backoff.at(error_class::retryable);
  CHECK(spec.kind == backoff_spec::kind_t::exponential);
  CHECK(spec.initial_s == 2.0);
  CHECK(spec.multiplier == 4.0);
  CHECK(spec.max_s == 60.0);
  CHECK(spec.jit == jitter::full);
  // Switching to a table needs the table.
  check_error(sup(R"({"backoff": {"retryable": {"kind": "table"}}})", *base),
              "sup.json", "/backoff/retryable",
              "a \"table\" schedule needs a non-empty \"table_s\"");
}

TEST_CASE("supervisor: unknown keys are errors naming the key and the allowed "
          "ones") {
  check_error(sup(R"({"max_retries": 3})"), "sup.json", "/max_retries",
              "unknown key \"max_retries\" (allowed: max_retries_per_agent, "
              "enable_fallback, backoff_base_seconds, rate_limit_backoff_base, "
              "max_total_attempts, max_crash_restarts, actions, restart, "
              "intensity, backoff, deadline_s, stop_grace_s, fatal_scope, "
              "attempt_timeout_s, done_exit_code, restart_backoff, on_quota, "
              "quota_wait_s)");
  check_error(sup(R"({"intensity": {"period": 1}})"), "sup.json",
              "/intensity/period",
              "unknown key \"period\" (allowed: max_restarts, period_s, "
              "reset_after_s)");
  check_error(sup(R"({"backoff": {"fatal": {"kind": "table", "x/y": 1}}})"),
              "sup.json", "/backoff/fatal/x~1y",
              "unknown key \"x/y\" (allowed: kind, table_s, initial_s, "
              "multiplier, max_s, jitter)");
}

TEST_CASE("supervisor: wrong types") {
  check_error(sup("[]"), "sup.json", "", "expected an object");
  check_error(sup(R"({"max_retries_per_agent": "3"})"), "sup.json",
              "/max_retries_per_agent", "expected a non-negative integer");
  check_error(sup(R"({"max_retries_per_agent": 2.5})"), "sup.json",
              "/max_retries_per_agent", "expected a non-negative integer");
  check_error(sup(R"({"enable_fallback": 1})"), "sup.json", "/enable_fallback",
              "expected true or false");
  check_error(sup(R"({"backoff_base_seconds": "5"})"), "sup.json",
              "/backoff_base_seconds", "expected a number");
  check_error(sup(R"({"actions": []})"), "sup.json", "/actions",
              "expected an object");
  check_error(sup(R"({"backoff": {"retryable": {"table_s": [1, "2"]}}})"),
              "sup.json", "/backoff/retryable/table_s/1", "expected a number");
  check_error(sup(R"({"restart": 1})"), "sup.json", "/restart",
              "expected a string");
}

TEST_CASE("supervisor: out-of-range numbers") {
  check_error(sup(R"({"max_retries_per_agent": -1})"), "sup.json",
              "/max_retries_per_agent", "expected a non-negative integer");
  check_error(sup(R"({"max_retries_per_agent": 3000000000})"), "sup.json",
              "/max_retries_per_agent", "expected a non-negative integer");
  check_error(sup(R"({"max_total_attempts": 0})"), "sup.json",
              "/max_total_attempts", "expected a positive integer");
  check_error(sup(R"({"max_crash_restarts": -2})"), "sup.json",
              "/max_crash_restarts", "expected a non-negative integer");
  check_error(sup(R"({"backoff_base_seconds": -0.5})"), "sup.json",
              "/backoff_base_seconds",
              "expected a finite number >= 0 and <= 31536000");
  check_error(sup(R"({"rate_limit_backoff_base": 1e400})"), "sup.json",
              "/rate_limit_backoff_base",
              "expected a finite number >= 0 and <= 31536000");
  check_error(sup(R"({"intensity": {"period_s": 0}})"), "sup.json",
              "/intensity/period_s",
              "expected a finite number > 0 and <= 31536000");
  check_error(sup(R"({"backoff": {"retryable": {"kind": "exponential",
                      "multiplier": 0}}})"),
              "sup.json", "/backoff/retryable/multiplier",
              "expected a finite number >= 1 and <= 100");
  check_error(sup(R"({"backoff": {"retryable": {"kind": "exponential",
                      "initial_s": 100}}})"),
              "sup.json", "/backoff/retryable",
              "\"max_s\" must be at least \"initial_s\" for an "
              "\"exponential\" schedule");
  check_error(sup(R"({"backoff": {"retryable": {"table_s": []}}})"), "sup.json",
              "/backoff/retryable",
              "a \"table\" schedule needs a non-empty \"table_s\"");
  check_error(sup(R"({"stop_grace_s": -1})"), "sup.json", "/stop_grace_s",
              "expected a finite number >= 0 and <= 31536000");
  // NaN cannot be written in JSON but can arrive in an in-memory document.
  json::object nan_doc;
  nan_doc["backoff_base_seconds"] = std::nan("");
  check_error(parse_supervisor_config(nan_doc, "mem", {}), "mem",
              "/backoff_base_seconds",
              "expected a finite number >= 0 and <= 31536000");
}

TEST_CASE("supervisor: bad enum values list the valid ones") {
  check_error(sup(R"({"restart": "always"})"), "sup.json", "/restart",
              "expected one of \"transient\", \"permanent\", \"temporary\", "
              "got \"always\"");
  check_error(sup(R"({"actions": {"fatal": "ignore"}})"), "sup.json",
              "/actions/fatal",
              "expected one of \"retry\", \"fallback\", \"fail\", got "
              "\"ignore\"");
  check_error(sup(R"({"actions": {"oom": "retry"}})"), "sup.json",
              "/actions/oom",
              "unknown error class \"oom\" (expected one of "
              "\"container_crash\", \"rate_limit\", \"fatal\", "
              "\"agent_failure\", \"retryable\", \"infrastructure\", "
              "\"gate_failed\", \"timeout\", \"preflight_failed\", "
              "\"quota_exhausted\", \"needs_input\", \"not_now\", "
              "\"invalid_output\")");
  check_error(sup(R"({"backoff": {"crash": {"kind": "table"}}})"), "sup.json",
              "/backoff/crash",
              "unknown error class \"crash\" (expected one of "
              "\"container_crash\", \"rate_limit\", \"fatal\", "
              "\"agent_failure\", \"retryable\", \"infrastructure\", "
              "\"gate_failed\", \"timeout\", \"preflight_failed\", "
              "\"quota_exhausted\", \"needs_input\", \"not_now\", "
              "\"invalid_output\")");
  check_error(sup(R"({"backoff": {"fatal": {"kind": "linear"}}})"), "sup.json",
              "/backoff/fatal/kind",
              "expected one of \"table\", \"exponential\", got \"linear\"");
  check_error(sup(R"({"backoff": {"fatal": {"table_s": [1],
                      "jitter": "some"}}})"),
              "sup.json", "/backoff/fatal/jitter",
              "expected one of \"none\", \"full\", \"equal\", "
              "\"decorrelated\", \"additive\", \"proportional\", got "
              "\"some\"");
}

TEST_CASE("supervisor: on_quota and quota_wait_s are read, checked and "
          "cleared") {
  auto res = sup(R"({"on_quota": "wait", "quota_wait_s": 600})");
  REQUIRE(res.has_value());
  CHECK(res->on_quota == quota_action::wait);
  CHECK(res->quota_wait_s == 600.0);
  res = sup(R"({"on_quota": "fallback"})");
  REQUIRE(res.has_value());
  CHECK(res->on_quota == quota_action::fallback);
  CHECK(res->quota_wait_s == 3600.0);
  // Unset, or null: the default (fall back while another agent is left).
  res = sup(R"({"on_quota": null})");
  REQUIRE(res.has_value());
  CHECK_FALSE(res->on_quota);
  check_error(sup(R"({"on_quota": "later"})"), "sup.json", "/on_quota",
              "expected one of \"wait\", \"fallback\", got \"later\"");
  check_error(sup(R"({"quota_wait_s": 0})"), "sup.json", "/quota_wait_s",
              "expected a finite number > 0 and <= 31536000");
}

TEST_CASE("supervisor: every enum value is accepted") {
  for (auto [name, value] : {std::pair{"transient", restart_type::transient},
                             std::pair{"permanent", restart_type::permanent},
                             std::pair{"temporary", restart_type::temporary}}) {
    auto res = sup(std::string{R"({"restart": ")"} + name + "\"}");
    REQUIRE(res.has_value());
    CHECK(res->restart == value);
  }
  for (auto cls : all_error_classes) {
    for (auto act : {action::retry, action::fallback, action::fail}) {
      auto text = std::string{R"({"actions": {")"} +
                  std::string{to_string(cls)} + "\": \"" +
                  std::string{to_string(act)} + "\"}}";
      auto res = sup(text);
      REQUIRE(res.has_value());
      CHECK(res->actions.at(cls) == act);
    }
  }
  for (auto jit :
       {jitter::none, jitter::full, jitter::equal, jitter::decorrelated,
        jitter::additive, jitter::proportional}) {
    auto text = std::string{R"({"backoff": {"fatal": {"table_s": [1], )"} +
                R"("jitter": ")" + std::string{to_string(jit)} + "\"}}}";
    auto res = sup(text);
    REQUIRE(res.has_value());
    CHECK(res->backoff.at(error_class::fatal).jit == jit);
  }
}

TEST_CASE("error messages quote hostile keys safely") {
  auto res = sup("{\"a\\u0000\\u001b[31m\\\"\": 1}");
  REQUIRE_FALSE(res.has_value());
  CHECK_THAT(res.error().what,
             Catch::StartsWith(R"(unknown key "a\x00\x1b[31m\"" (allowed: )"));
  auto long_key = std::string(500, 'k');
  auto long_res = sup("{\"" + long_key + "\": 1}");
  REQUIRE_FALSE(long_res.has_value());
  CHECK(long_res.error().what.size() < 450);
}

// -- classifier rules
// -----------------------------------------------------------

TEST_CASE("classifier rules: every key is read") {
  auto res = rules(R"({"rules": [
    {"id": "oom", "class": "container_crash", "oom_killed": true,
     "exit_codes": [137, 139], "signals": [9, 11]},
    {"id": "slow-down", "class": "rate_limit", "patterns": ["overloaded"],
     "window_lines": 0, "match_all": true, "exit_codes": [1]}
  ]})");
  REQUIRE(res.has_value());
  REQUIRE(res->size() == 2);
  const auto& a = (*res)[0];
  CHECK(a.id == "oom");
  CHECK(a.cls == error_class::container_crash);
  CHECK(a.oom_killed == true);
  CHECK(a.exit_codes == std::vector<int>{137, 139});
  CHECK(a.signals == std::vector<int>{9, 11});
  CHECK(a.patterns.empty());
  CHECK(a.window_lines == 50);
  CHECK_FALSE(a.match_all);
  const auto& b = (*res)[1];
  CHECK(b.cls == error_class::rate_limit);
  CHECK(b.patterns == std::vector<std::string>{"overloaded"});
  CHECK(b.window_lines == 0);
  CHECK(b.match_all);
  auto empty = rules(R"({"rules": []})");
  REQUIRE(empty.has_value());
  CHECK(empty->empty());
}

TEST_CASE("classifier rules: errors") {
  check_error(rules("{}"), "classifier.json", "",
              "missing required key \"rules\"");
  check_error(rules(R"({"rules": {}})"), "classifier.json", "/rules",
              "expected an array");
  check_error(rules(R"({"rules": [], "extra": 1})"), "classifier.json",
              "/extra", "unknown key \"extra\" (allowed: rules)");
  check_error(rules(R"({"rules": [{"class": "fatal", "exit_codes": [1]}]})"),
              "classifier.json", "/rules/0", "missing required key \"id\"");
  check_error(rules(R"({"rules": [{"id": "x", "exit_codes": [1]}]})"),
              "classifier.json", "/rules/0", "missing required key \"class\"");
  check_error(rules(R"({"rules": [{"id": "x", "class": "boom",
                        "exit_codes": [1]}]})"),
              "classifier.json", "/rules/0/class",
              "expected one of \"container_crash\", \"rate_limit\", "
              "\"fatal\", \"agent_failure\", \"retryable\", "
              "\"infrastructure\", \"gate_failed\", \"timeout\", "
              "\"preflight_failed\", \"quota_exhausted\", "
              "\"needs_input\", \"not_now\", \"invalid_output\", got "
              "\"boom\"");
  check_error(rules(R"({"rules": [{"id": "a", "class": "fatal",
    "exit_codes": [1]}, {"id": "a", "class": "fatal", "exit_codes": [2]}]})"),
              "classifier.json", "/rules/1/id",
              "duplicate rule id \"a\" (first at /rules/0)");
  check_error(rules(R"({"rules": [{"id": "x", "class": "fatal",
                        "exit_codes": [256]}]})"),
              "classifier.json", "/rules/0/exit_codes/0",
              "expected an integer from 0 to 255");
  check_error(rules(R"({"rules": [{"id": "x", "class": "fatal",
                        "signals": [0]}]})"),
              "classifier.json", "/rules/0/signals/0",
              "expected an integer from 1 to 64");
  check_error(rules(R"({"rules": [{"id": "x", "class": "fatal",
                        "patterns": ["a", ""]}]})"),
              "classifier.json", "/rules/0/patterns/1",
              "expected a non-empty string");
  check_error(rules(R"({"rules": [{"id": "x", "class": "fatal",
                        "window_lines": -1, "patterns": ["a"]}]})"),
              "classifier.json", "/rules/0/window_lines",
              "expected an integer from 0 to 1000000");
  check_error(rules(R"({"rules": [{"id": "x", "class": "fatal"}]})"),
              "classifier.json", "/rules/0",
              "a rule needs at least one of \"exit_codes\", \"oom_killed\", "
              "\"signals\", \"patterns\"");
  check_error(rules(R"({"rules": [{"id": "x", "class": "fatal",
                        "pattern": ["a"]}]})"),
              "classifier.json", "/rules/0/pattern",
              "unknown key \"pattern\" (allowed: id, class, exit_codes, "
              "oom_killed, signals, patterns, window_lines, match_all)");
}

TEST_CASE("classifier rules: a bad regular expression names its path") {
  auto res = rules(R"({"rules": [
    {"id": "ok", "class": "fatal", "patterns": ["fine"]},
    {"id": "bad", "class": "fatal", "patterns": ["good", "(unclosed"]}
  ]})");
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == "classifier.json");
  CHECK(res.error().path == "/rules/1/patterns/1");
  CHECK_THAT(res.error().what, Catch::Contains("(unclosed"));
}

// -- node settings
// --------------------------------------------------------------

TEST_CASE("node: every key is read, a partial object keeps the defaults") {
  auto res = node(R"({
    "max_concurrent": 8,
    "circuit_breaker": {"max_failures": 2, "reset_timeout_s": 30,
                        "stale_after_s": 600},
    "retry_budget": {"capacity": 20, "refill_per_s": 0.5},
    "default_agent": {"agent_id": "cl", "agent_cli": "claude",
                      "cli_flags": "-p --model 'opus 4'",
                      "prompt_as_argument": false},
    "default_runtime": "docker"
  })");
  REQUIRE(res.has_value());
  CHECK(res->max_concurrent == 8);
  CHECK(res->breaker.max_failures == 2);
  CHECK(res->breaker.reset_timeout_s == 30.0);
  CHECK(res->breaker.stale_after_s == 600.0);
  CHECK(res->retry_budget_capacity == 20.0);
  CHECK(res->retry_budget_refill_per_s == 0.5);
  CHECK(res->default_agent.agent_id == "cl");
  CHECK(res->default_agent.agent_cli == "claude");
  CHECK(res->default_agent.cli_flags == "-p --model 'opus 4'");
  CHECK(res->default_agent.args ==
        std::vector<std::string>{"-p", "--model", "opus 4"});
  CHECK_FALSE(res->default_agent.prompt_as_argument);
  CHECK(res->default_runtime == "docker");
  auto partial = node(R"({"circuit_breaker": {"max_failures": 9},
                          "retry_budget": {"capacity": null}})");
  REQUIRE(partial.has_value());
  node_config builtin;
  CHECK(partial->max_concurrent == builtin.max_concurrent);
  CHECK(partial->breaker.max_failures == 9);
  CHECK(partial->breaker.reset_timeout_s == builtin.breaker.reset_timeout_s);
  CHECK_FALSE(partial->retry_budget_capacity.has_value());
  CHECK(partial->default_runtime == "process");
}

TEST_CASE("node: errors") {
  check_error(node(R"({"max_concurrent": 0})"), "node.json", "/max_concurrent",
              "expected a positive integer");
  check_error(node(R"({"default_runtime": "podman"})"), "node.json",
              "/default_runtime",
              "expected one of \"process\", \"docker\", got \"podman\"");
  check_error(node(R"({"retry_budget": {"capacity": -1}})"), "node.json",
              "/retry_budget/capacity",
              "expected a finite number >= 0 and <= 1000000000");
  check_error(node(R"({"circuit_breaker": {"max_failures": 0}})"), "node.json",
              "/circuit_breaker/max_failures", "expected a positive integer");
  check_error(node(R"({"default_agent": {"agent_cli": "x"}})"), "node.json",
              "/default_agent", "missing required key \"agent_id\"");
  check_error(node(R"({"default_agent": {"agent_id": "a", "agent_cli": ""}})"),
              "node.json", "/default_agent/agent_cli",
              "expected a non-empty string");
  check_error(node(R"({"default_agent": {"agent_id": "a", "agent_cli": "x",
                       "flags": "-p"}})"),
              "node.json", "/default_agent/flags",
              "unknown key \"flags\" (allowed: agent_id, agent_cli, "
              "cli_flags, config_dir, prompt_as_argument, profile, "
              "env_passthrough, idle_timeout_s, account)");
  check_error(node(R"({"workers": 2})"), "node.json", "/workers",
              "unknown key \"workers\" (allowed: max_concurrent, "
              "circuit_breaker, retry_budget, default_agent, "
              "default_runtime, output, allowed_paths, process)");
  check_error(node(R"({"process": {"shim_report_timeout_s": 0}})"), "node.json",
              "/process/shim_report_timeout_s",
              "expected a finite number > 0 and <= 31536000");
  check_error_contains(node(R"({"process": {"shim_idle_timeout_s": -1}})"),
                       "/process/shim_idle_timeout_s",
                       "expected a finite number >= 0");
  check_error_contains(node(R"({"process": {"idle_s": 1}})"), "/process/idle_s",
                       "unknown key \"idle_s\"");
  check_error(node(R"({"output": {"log_max_bytes": 0}})"), "node.json",
              "/output/log_max_bytes",
              "expected an integer from 1 to 1099511627776");
  check_error_contains(node(R"({"output": {"line_bytes": 1}})"),
                       "/output/line_bytes", "unknown key \"line_bytes\"");
}

TEST_CASE("node: the process runtime's shim timeouts are read, defaults "
          "documented") {
  auto d = node("{}");
  REQUIRE(d.has_value());
  CHECK(d->process_shim_idle_timeout_s == 10);
  CHECK(d->process_shim_report_timeout_s == 10);
  auto n = node(R"({"process": {"shim_idle_timeout_s": 0,
                                "shim_report_timeout_s": 2.5}})");
  REQUIRE(n.has_value());
  CHECK(n->process_shim_idle_timeout_s == 0);
  CHECK(n->process_shim_report_timeout_s == 2.5);
}

TEST_CASE("node: output limits are read, defaults documented") {
  auto d = node("{}");
  REQUIRE(d.has_value());
  CHECK(d->output_log_max_bytes == 100 * 1024 * 1024);
  CHECK(d->output_line_max_bytes == 4096);
  CHECK(d->output_attempt_max_bytes == 1024 * 1024);
  auto n = node(R"({"output": {"log_max_bytes": 8388608,
                               "line_max_bytes": 256,
                               "attempt_max_bytes": 65536}})");
  REQUIRE(n.has_value());
  CHECK(n->output_log_max_bytes == 8388608);
  CHECK(n->output_line_max_bytes == 256);
  CHECK(n->output_attempt_max_bytes == 65536);
}

TEST_CASE("config_dir: a leading ~ expands with $HOME") {
  const char* old = std::getenv("HOME");
  std::string saved = old ? old : "";
  ::setenv("HOME", "/home/tester", 1);
  auto res = node(R"({"default_agent": {"agent_id": "a", "agent_cli": "x",
                      "config_dir": "~/.codex"}})");
  auto bare = node(R"({"default_agent": {"agent_id": "a", "agent_cli": "x",
                       "config_dir": "~"}})");
  auto other = node(R"({"default_agent": {"agent_id": "a", "agent_cli": "x",
                        "config_dir": "~bob/x"}})");
  ::unsetenv("HOME");
  auto unset = node(R"({"default_agent": {"agent_id": "a", "agent_cli": "x",
                        "config_dir": "~/.codex"}})");
  if (old)
    ::setenv("HOME", saved.c_str(), 1);
  REQUIRE(res.has_value());
  CHECK(res->default_agent.config_dir == "/home/tester/.codex");
  REQUIRE(bare.has_value());
  CHECK(bare->default_agent.config_dir == "/home/tester");
  REQUIRE(other.has_value());
  CHECK(other->default_agent.config_dir == "~bob/x");
  check_error(unset, "node.json", "/default_agent/config_dir",
              "cannot expand \"~/.codex\": HOME is not set");
}

// -- environments
// ---------------------------------------------------------------

TEST_CASE("environment: every key is read") {
  auto res = env(R"({
    "agents": [
      {"agent_id": "a", "agent_cli": "codex", "cli_flags": "exec --full-auto"},
      {"agent_id": "b", "agent_cli": "/usr/bin/claude", "account": "team-max"}
    ],
    "agent_fallbacks": {"a": "b", "b": "nowhere"},
    "selection_mode": "round-robin",
    "supervisor": {"max_retries_per_agent": 1},
    "classifier": {"rules": [{"id": "r", "class": "fatal",
                              "patterns": ["denied"]}]}
  })");
  REQUIRE(res.has_value());
  CHECK(res->name == "team-a");
  REQUIRE(res->selection.agents.size() == 2);
  CHECK(res->selection.agents[0].args ==
        std::vector<std::string>{"exec", "--full-auto"});
  CHECK(res->selection.agents[1].agent_cli == "/usr/bin/claude");
  CHECK(res->selection.agents[1].args.empty());
  CHECK(res->selection.agents[1].prompt_as_argument);
  // The account a used-up quota closes: its own name, else the agent id.
  CHECK(res->selection.agents[1].quota_account() == "team-max");
  CHECK(res->selection.agents[0].quota_account() == "a");
  // Unknown fallback targets are kept: the chain builder warns about them.
  CHECK(res->selection.agent_fallbacks.at("b") == "nowhere");
  CHECK(res->selection.mode == selection_mode::round_robin);
  REQUIRE(res->supervisor_overrides.has_value());
  CHECK(res->supervisor_overrides->at("max_retries_per_agent").as_int64() == 1);
  REQUIRE(res->classifier_rules.has_value());
  CHECK(res->classifier_rules->at(0).id == "r");
  auto fallback = env(R"({"selection_mode": "fallback"})");
  REQUIRE(fallback.has_value());
  CHECK(fallback->selection.mode == selection_mode::fallback);
  CHECK(fallback->selection.agents.empty());
  CHECK_FALSE(fallback->supervisor_overrides.has_value());
  CHECK_FALSE(fallback->classifier_rules.has_value());
}

TEST_CASE("environment: errors") {
  check_error(env(R"({"agents": [
    {"agent_id": "a", "agent_cli": "x"}, {"agent_id": "b", "agent_cli": "y"},
    {"agent_id": "a", "agent_cli": "z"}]})"),
              "env.json", "/agents/2/agent_id",
              "duplicate agent_id \"a\" (first at /agents/0)");
  check_error(env(R"({"agents": [
    {"agent_id": "a", "agent_cli": "x"}, {"agent_id": "b", "agent_cli": "y"},
    {"agent_id": "c", "agent_cli": "z", "cli_flags": "-p 'oops"}]})"),
              "env.json", "/agents/2/cli_flags",
              "agent \"c\": unbalanced single quote at offset 3");
  check_error(env(R"({"agents": [{"agent_id": "a", "agent_cli": 5}]})"),
              "env.json", "/agents/0/agent_cli", "expected a string");
  check_error(env(R"({"agents": [{"agent_id": "a b", "agent_cli": "x"}]})"),
              "env.json", "/agents/0/agent_id",
              "expected an agent id of 1 to 64 characters from "
              "[A-Za-z0-9_.-] (not \".\" or \"..\"), got \"a b\"");
  check_error(env(R"({"agents": [{"agent_id": "a", "agent_cli": "x",
                      "cli_flags": ["-p"]}]})"),
              "env.json", "/agents/0/cli_flags", "expected a string");
  check_error(env(R"({"agent_fallbacks": {"a": 3}})"), "env.json",
              "/agent_fallbacks/a", "expected a string");
  check_error(env(R"({"selection_mode": "random"})"), "env.json",
              "/selection_mode",
              "expected one of \"fallback\", \"round-robin\", got \"random\"");
  check_error(env(R"({"supervisor": {"max_retries_per_agent": -1}})"),
              "env.json", "/supervisor/max_retries_per_agent",
              "expected a non-negative integer");
  check_error(env(R"({"classifier": {"rules": [{"id": "x"}]}})"), "env.json",
              "/classifier/rules/0", "missing required key \"class\"");
  check_error(env(R"({"agent": []})"), "env.json", "/agent",
              "unknown key \"agent\" (allowed: agents, agent_fallbacks, "
              "selection_mode, supervisor, classifier)");
  check_error(parse_environment(doc("{}"), "env.json", "bad/name"), "env.json",
              "",
              "invalid environment name \"bad/name\" (expected 1 to 64 "
              "characters from [A-Za-z0-9_.-])");
}

// -- tasks
// ----------------------------------------------------------------------

namespace {

/// A config with a global override and two environments.
config_set layered_config() {
  auto cfg = builtin_config();
  cfg.supervisor.max_retries_per_agent = 5;
  cfg.supervisor.max_total_attempts = 11;
  cfg.supervisor.stop_grace_s = 4;
  auto team = parse_environment(doc(R"({
    "agents": [{"agent_id": "e1", "agent_cli": "codex"},
               {"agent_id": "e2", "agent_cli": "claude"}],
    "agent_fallbacks": {"e1": "e2"},
    "selection_mode": "round-robin",
    "supervisor": {"max_total_attempts": 7, "backoff_base_seconds": 1},
    "classifier": {"rules": [{"id": "env-rule", "class": "fatal",
                              "exit_codes": [3]}]}
  })"),
                                "team.json", "team");
  REQUIRE(team.has_value());
  cfg.environments.emplace("team", std::move(*team));
  return cfg;
}

} // namespace

TEST_CASE("task: the documented example and every key are read") {
  ::setenv("HOME", "/home/tester", 1);
  auto res = task(R"({
    "id": "fix-login",
    "prompt": "Fix the failing login test",
    "agent_selection": {
      "agents": [
        {"agent_id": "primary", "agent_cli": "codex",
         "cli_flags": "exec --full-auto", "config_dir": "~/.codex"},
        {"agent_id": "backup", "agent_cli": "claude", "cli_flags": "-p"}
      ],
      "agent_fallbacks": {"primary": "backup"},
      "selection_mode": "fallback"
    },
    "supervisor": {"max_retries_per_agent": 3, "backoff_base_seconds": 5.0,
                   "rate_limit_backoff_base": 60.0},
    "runtime": "process",
    "image": "local/busybox:test",
    "env": {"FOO": "bar", "EMPTY": ""},
    "memory_limit_mb": 512,
    "classifier": {"rules": [{"id": "x", "class": "fatal", "exit_codes": [9]}]},
    "mounts": [{"host_path": "~/src", "container_path": "/src",
                "read_only": true},
               {"host_path": "/data", "container_path": "/data"}],
    "workdir": "/src"
  })");
  INFO((res ? "" : res.error().to_string()));
  REQUIRE(res.has_value());
  const auto& t = *res;
  CHECK(t.id == "fix-login");
  CHECK(t.prompt == "Fix the failing login test");
  CHECK(t.environment.empty());
  REQUIRE(t.selection.has_value());
  REQUIRE(t.selection->agents.size() == 2);
  CHECK(t.selection->agents[0].config_dir == "/home/tester/.codex");
  CHECK(t.selection->agents[0].args ==
        std::vector<std::string>{"exec", "--full-auto"});
  CHECK(t.selection->agent_fallbacks.at("primary") == "backup");
  CHECK(t.runtime == "process");
  CHECK(t.image == "local/busybox:test");
  CHECK(t.env ==
        std::map<std::string, std::string>{{"EMPTY", ""}, {"FOO", "bar"}});
  CHECK(t.memory_limit_mb == 512u);
  REQUIRE(t.classifier_rules.has_value());
  CHECK(t.classifier_rules->at(0).id == "x");
  REQUIRE(t.mounts.size() == 2);
  CHECK(t.mounts[0].host_path == "/home/tester/src");
  CHECK(t.mounts[0].container_path == "/src");
  CHECK(t.mounts[0].read_only);
  CHECK_FALSE(t.mounts[1].read_only);
  CHECK(t.workdir == "/src");
}

TEST_CASE("task: only the prompt is required") {
  auto res = task(R"({"prompt": "hi"})");
  REQUIRE(res.has_value());
  CHECK(res->id.empty());
  CHECK(res->environment.empty());
  CHECK_FALSE(res->selection.has_value());
  CHECK_FALSE(res->classifier_rules.has_value());
  CHECK(res->runtime.empty());
  CHECK_FALSE(res->memory_limit_mb.has_value());
  check_same_supervisor(res->settings, supervisor_config{});
}

TEST_CASE("task: supervisor settings merge global < environment < task") {
  auto cfg = layered_config();
  auto res = task(R"({"prompt": "p", "environment": "team",
                      "supervisor": {"backoff_base_seconds": 2}})",
                  cfg);
  REQUIRE(res.has_value());
  CHECK(res->environment == "team");
  CHECK(res->settings.max_retries_per_agent == 5);  // global
  CHECK(res->settings.stop_grace_s == 4.0);         // global
  CHECK(res->settings.max_total_attempts == 7);     // environment
  CHECK(res->settings.backoff_base_seconds == 2.0); // task
  // Without the task's override the environment's value stands.
  auto env_only = task(R"({"prompt": "p", "environment": "team"})", cfg);
  REQUIRE(env_only.has_value());
  CHECK(env_only->settings.backoff_base_seconds == 1.0);
  // Without an environment only the global settings apply.
  auto global = task(R"({"prompt": "p"})", cfg);
  REQUIRE(global.has_value());
  CHECK(global->settings.max_total_attempts == 11);
  CHECK(global->settings.backoff_base_seconds == 5.0);
}

TEST_CASE("task: the environment supplies agents and rules the task lacks") {
  auto cfg = layered_config();
  auto res = task(R"({"prompt": "p", "environment": "team"})", cfg);
  REQUIRE(res.has_value());
  REQUIRE(res->selection.has_value());
  CHECK(res->selection->agents.size() == 2);
  CHECK(res->selection->mode == selection_mode::round_robin);
  REQUIRE(res->classifier_rules.has_value());
  CHECK(res->classifier_rules->at(0).id == "env-rule");
  auto own = task(R"({"prompt": "p", "environment": "team",
    "agent_selection": {"agents": [{"agent_id": "mine", "agent_cli": "x"}]},
    "classifier": {"rules": [{"id": "own", "class": "fatal",
                              "exit_codes": [4]}]}})",
                  cfg);
  REQUIRE(own.has_value());
  REQUIRE(own->selection.has_value());
  REQUIRE(own->selection->agents.size() == 1);
  CHECK(own->selection->agents[0].agent_id == "mine");
  CHECK(own->selection->mode == selection_mode::fallback);
  CHECK(own->classifier_rules->at(0).id == "own");
}

TEST_CASE("task: a task without environment uses the \"default\" one") {
  auto cfg = layered_config();
  auto def = parse_environment(
    doc(R"({"agents": [{"agent_id": "d", "agent_cli": "codex"}]})"), "d.json",
    "default");
  REQUIRE(def.has_value());
  cfg.environments.emplace("default", std::move(*def));
  auto res = task(R"({"prompt": "p"})", cfg);
  REQUIRE(res.has_value());
  CHECK(res->environment == "default");
  REQUIRE(res->selection.has_value());
  CHECK(res->selection->agents.at(0).agent_id == "d");
}

TEST_CASE("task: errors") {
  auto cfg = layered_config();
  check_error(task(R"({"id": "x"})"), "task.json", "",
              "missing required key \"prompt\"");
  check_error(task(R"({"prompt": ""})"), "task.json", "/prompt",
              "expected a non-empty string");
  check_error(task(R"({"prompt": 5})"), "task.json", "/prompt",
              "expected a string");
  check_error(task(R"({"prompt": "p", "environment": "team-b"})", cfg),
              "task.json", "/environment",
              "unknown environment \"team-b\" (known: team)");
  check_error(task(R"({"prompt": "p", "environment": "team-b"})"), "task.json",
              "/environment",
              "unknown environment \"team-b\" (no environments are "
              "configured)");
  for (auto bad_id : {"\"..\"", "\".\"", "\"a/b\"", "\"\"", "7",
                      "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                      "xxxxxxxxxxxx\""}) {
    auto res = task(std::string{R"({"prompt": "p", "id": )"} + bad_id + "}");
    INFO(bad_id);
    REQUIRE_FALSE(res.has_value());
    CHECK(res.error().path == "/id");
  }
  check_error(task(R"({"prompt": "p", "runtime": "lxc"})"), "task.json",
              "/runtime",
              "expected one of \"process\", \"docker\", got \"lxc\"");
  check_error(task(R"({"prompt": "p", "memory_limit_mb": 0})"), "task.json",
              "/memory_limit_mb", "expected an integer from 1 to 16777216");
  check_error(task(R"({"prompt": "p", "memory_limit_mb": 1.5})"), "task.json",
              "/memory_limit_mb", "expected an integer from 1 to 16777216");
  check_error(task(R"({"prompt": "p", "env": {"FOO": 1}})"), "task.json",
              "/env/FOO", "expected a string");
  check_error(task(R"({"prompt": "p", "env": {"A=B": "x"}})"), "task.json",
              "/env/A=B",
              "invalid environment variable name \"A=B\" (must be "
              "non-empty, without '=' or NUL)");
  check_error(task(R"({"prompt": "p", "mounts": [{"host_path": "rel",
                       "container_path": "/x"}]})"),
              "task.json", "/mounts/0/host_path",
              "expected an absolute path, got \"rel\"");
  check_error(task(R"({"prompt": "p", "mounts": [{"host_path": "/a"}]})"),
              "task.json", "/mounts/0",
              "missing required key \"container_path\"");
  check_error(task(R"({"prompt": "p", "workdir": "src"})"), "task.json",
              "/workdir", "expected an absolute path, got \"src\"");
  check_error(task(R"({"prompt": "p", "supervisor": {"restart": "x"}})"),
              "task.json", "/supervisor/restart",
              "expected one of \"transient\", \"permanent\", \"temporary\", "
              "got \"x\"");
  check_error(task(R"({"prompt": "p", "agent_selection": {"agents": [
                       {"agent_id": "a", "agent_cli": "x",
                        "cli_flags": "\"open"}]}})"),
              "task.json", "/agent_selection/agents/0/cli_flags",
              "agent \"a\": unbalanced double quote at offset 0");
  check_error(task(R"({"prompt": "p", "agent_selection": {"mode": "x"}})"),
              "task.json", "/agent_selection/mode",
              "unknown key \"mode\" (allowed: agents, agent_fallbacks, "
              "selection_mode)");
  check_error(task(R"({"prompt": "p", "timeout": 5})"), "task.json", "/timeout",
              "unknown key \"timeout\" (allowed: id, prompt, environment, "
              "agent_selection, supervisor, runtime, image, env, "
              "memory_limit_mb, classifier, mounts, workdir, repo, "
              "keep_failed, gates, gate_timeout_s, deliver, feedback, "
              "preflight, admit, placement, answer_schema, role, target_files, "
              "extra_context, context_max_bytes)");
  check_error_contains(task(R"({"prompt": "p", "classifier": {"rules": [
                       {"id": "r", "class": "fatal", "patterns": ["(x"]}]}})"),
                       "/classifier/rules/0/patterns/0", "(x");
}

// -- config directories
// -----------------------------------------------------------

TEST_CASE("load_config_dir: every file is optional") {
  temp_dir dir;
  auto cfg = load_config_dir(dir.path());
  REQUIRE(cfg.has_value());
  check_same_supervisor(cfg->supervisor, supervisor_config{});
  check_same_rules(cfg->classifier_rules, default_classifier_rules());
  CHECK(cfg->environments.empty());
  CHECK(cfg->node.max_concurrent == node_config{}.max_concurrent);
}

TEST_CASE("load_config_dir: reads every file and names a bad one") {
  temp_dir dir;
  dir.write("supervisor.json", R"({"max_retries_per_agent": 1})");
  dir.write("classifier.json", R"({"rules": [{"id": "only", "class": "fatal",
                                   "exit_codes": [2]}]})");
  dir.write("node.json", R"({"max_concurrent": 2})");
  dir.write("environments/team-a.json",
            R"({"agents": [{"agent_id": "a", "agent_cli": "x"}]})");
  dir.write("environments/b.json", R"({})");
  dir.write("environments/README.md", "not JSON, ignored");
  auto cfg = load_config_dir(dir.path());
  INFO((cfg ? "" : cfg.error().to_string()));
  REQUIRE(cfg.has_value());
  CHECK(cfg->supervisor.max_retries_per_agent == 1);
  CHECK(cfg->supervisor.max_total_attempts == 30);
  REQUIRE(cfg->classifier_rules.size() == 1);
  CHECK(cfg->classifier_rules[0].id == "only");
  CHECK(cfg->node.max_concurrent == 2);
  REQUIRE(cfg->environments.size() == 2);
  CHECK(cfg->environments.at("team-a").name == "team-a");
  CHECK(cfg->environments.at("team-a").selection.agents.at(0).agent_id == "a");

  auto node_path = dir.write("node.json", R"({"max_concurrent": -3})");
  check_error(load_config_dir(dir.path()), node_path, "/max_concurrent",
              "expected a positive integer");
  dir.write("node.json", "{}");

  auto env_path =
    dir.write("environments/team-a.json", R"({"agents": [{"agent_id": "a"}]})");
  check_error(load_config_dir(dir.path()), env_path, "/agents/0",
              "missing required key \"agent_cli\"");
  dir.write("environments/team-a.json", "{}");

  auto bad_name = dir.write("environments/bad name.json", "{}");
  auto res = load_config_dir(dir.path());
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == bad_name);
  CHECK_THAT(res.error().what,
             Catch::StartsWith("invalid environment name \"bad name\""));
  fs::remove(bad_name);

  auto sup_path = dir.write("supervisor.json", "{\n  \"restart\": \n}");
  res = load_config_dir(dir.path());
  REQUIRE_FALSE(res.has_value());
  CHECK(res.error().where == sup_path);
  CHECK_THAT(res.error().what, Catch::StartsWith("invalid JSON at line 3"));
}

TEST_CASE("load_config_dir: an environment is validated over the global "
          "settings") {
  temp_dir dir;
  dir.write("supervisor.json", R"({"backoff": {"retryable": {
    "kind": "exponential", "initial_s": 1, "multiplier": 2, "max_s": 10}}})");
  auto env_path = dir.write("environments/e.json", R"({"supervisor": {
    "backoff": {"retryable": {"initial_s": 20}}}})");
  check_error(load_config_dir(dir.path()), env_path,
              "/supervisor/backoff/retryable",
              "\"max_s\" must be at least \"initial_s\" for an "
              "\"exponential\" schedule");
}

TEST_CASE("load_config_dir: a missing directory is an error") {
  temp_dir dir;
  auto missing = dir.path() + "/nope";
  check_error(load_config_dir(missing), missing, "", "not a directory");
}

TEST_CASE("load_task_file names the task file") {
  temp_dir dir;
  auto path = dir.write("t.json", R"({"prompt": "p", "memory_limit_mb": -1})");
  check_error(load_task_file(path, builtin_config()), path, "/memory_limit_mb",
              "expected an integer from 1 to 16777216");
  auto good = dir.write("g.json", R"({"prompt": "p"})");
  auto res = load_task_file(good, builtin_config());
  REQUIRE(res.has_value());
  CHECK(res->prompt == "p");
}

TEST_CASE("load_task_file: a bad supervisor setting names the task file and "
          "the field") {
  temp_dir dir;
  auto bad = [&](const std::string& supervisor, std::string_view ptr,
                 std::string_view fragment) {
    auto path = dir.write("t.json", R"({"prompt": "p", "supervisor": )" +
                                      supervisor + "}");
    auto res = load_task_file(path, builtin_config());
    INFO(supervisor);
    REQUIRE_FALSE(res.has_value());
    CHECK(res.error().where == path);
    check_error_contains(res, ptr, fragment);
  };
  bad(R"({"deadline_s": "soon"})", "/supervisor/deadline_s",
      "expected a number");
  bad(R"({"deadline_s": 0})", "/supervisor/deadline_s", "> 0");
  bad(R"({"restart": "sometimes"})", "/supervisor/restart", "transient");
  bad(R"({"intensity": {"max_restarts": -1}})",
      "/supervisor/intensity/max_restarts", "integer");
  bad(R"({"done_exit_code": 0})", "/supervisor/done_exit_code", "integer");
  bad(R"({"deadline": 5})", "/supervisor/deadline", "deadline_s");
}

TEST_CASE("relative agent paths resolve against the file that names them") {
  temp_dir dir;
  auto path = dir.write("tasks/t.json", R"({"prompt": "p",
    "agent_selection": {"agents": [
      {"agent_id": "a", "agent_cli": "./agents/fake"},
      {"agent_id": "b", "agent_cli": "../bin/other"},
      {"agent_id": "c", "agent_cli": "codex"},
      {"agent_id": "d", "agent_cli": "/usr/bin/claude"}]}})");
  auto res = load_task_file(path, builtin_config());
  REQUIRE(res.has_value());
  const auto& agents = res->selection->agents;
  CHECK(agents[0].agent_cli == dir.path() + "/tasks/agents/fake");
  CHECK(agents[1].agent_cli == dir.path() + "/bin/other");
  CHECK(agents[2].agent_cli == "codex");
  CHECK(agents[3].agent_cli == "/usr/bin/claude");

  dir.write("cfg/environments/e.json",
            R"({"agents": [{"agent_id": "x", "agent_cli": "./x"}]})");
  dir.write("cfg/node.json",
            R"({"default_agent": {"agent_id": "n", "agent_cli": "bin/n"}})");
  auto cfg = load_config_dir(dir.path() + "/cfg");
  REQUIRE(cfg.has_value());
  CHECK(cfg->environments.at("e").selection.agents.at(0).agent_cli ==
        dir.path() + "/cfg/environments/x");
  CHECK(cfg->node.default_agent.agent_cli == dir.path() + "/cfg/bin/n");
  // A task taking the environment's agents keeps their resolved paths.
  auto task_path =
    dir.write("t2.json", R"({"prompt": "p", "environment": "e"})");
  auto from_env = load_task_file(task_path, *cfg);
  REQUIRE(from_env.has_value());
  CHECK(from_env->selection->agents.at(0).agent_cli ==
        dir.path() + "/cfg/environments/x");
}

// The protocol's types survive CAF's binary serialization (the wire format
// between nodes), optionals and maps included.

#include "tasksup/actors/protocol.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

using namespace tasksup;

namespace {

template<class T>
T round_trip(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(x));
  T y;
  caf::binary_deserializer source{sys, buf};
  REQUIRE_FALSE(source(y));
  return y;
}

} // namespace

TEST_CASE("messages round-trip through the binary serializer", "[protocol]") {
  caf::actor_system_config cfg;
  register_protocol(cfg);
  caf::actor_system sys{cfg};
  task_spec t;
  t.id = "t1";
  t.prompt = "fix it";
  t.environment = "team";
  agent_selection sel;
  agent_spec a;
  a.agent_id = "a";
  a.agent_cli = "codex";
  a.args = {"exec", "--full-auto"};
  a.idle_noise = {"Reconnecting\\.\\.\\."};
  sel.agents.push_back(a);
  sel.agent_fallbacks["a"] = "b";
  sel.mode = selection_mode::round_robin;
  t.selection = sel;
  t.supervisor.max_retries_per_agent = 7;
  t.supervisor.deadline_s = 99.5;
  t.supervisor.actions[error_class::fatal] = action::fallback;
  backoff_spec b;
  b.kind = backoff_spec::kind_t::exponential;
  b.jit = jitter::full;
  t.supervisor.backoff[error_class::retryable] = b;
  classifier_rule rule;
  rule.id = "r";
  rule.oom_killed = true;
  rule.patterns = {"x"};
  t.classifier_rules = std::vector<classifier_rule>{rule};
  t.env["K"] = "V";
  t.mounts.push_back({"/h", "/c", true});
  t.memory_limit_mb = 512;
  auto u = round_trip(sys, t);
  CHECK(u.id == "t1");
  REQUIRE(u.selection);
  CHECK(u.selection->agents.at(0).args == a.args);
  CHECK(u.selection->agents.at(0) == a);
  CHECK(u.selection->agent_fallbacks.at("a") == "b");
  CHECK(u.selection->mode == selection_mode::round_robin);
  CHECK(u.supervisor.max_retries_per_agent == 7);
  CHECK(u.supervisor.deadline_s == 99.5);
  CHECK(u.supervisor.actions.at(error_class::fatal) == action::fallback);
  CHECK(u.supervisor.backoff.at(error_class::retryable).jit == jitter::full);
  REQUIRE(u.classifier_rules);
  CHECK(u.classifier_rules->at(0).oom_killed == true);
  CHECK(u.env.at("K") == "V");
  CHECK(u.mounts.at(0).read_only);
  CHECK(u.memory_limit_mb == 512u);
  // A task's settings travel as it named them: unset, cleared or set.
  CHECK_FALSE(u.supervisor.max_total_attempts);
  CHECK_FALSE(u.supervisor.attempt_timeout_s);
  // Absent optionals stay absent.
  task_spec empty;
  auto e = round_trip(sys, empty);
  CHECK_FALSE(e.selection);
  CHECK_FALSE(e.memory_limit_mb);
  CHECK(e.supervisor.empty());
  task_spec cleared;
  cleared.supervisor.deadline_s.emplace();
  cleared.supervisor.done_exit_code = 7;
  cleared.supervisor.restart = restart_type::permanent;
  cleared.supervisor.intensity.period_s = 60.0;
  cleared.settings.deadline_s = 12.0;
  auto c = round_trip(sys, cleared);
  REQUIRE(c.supervisor.deadline_s);
  CHECK_FALSE(*c.supervisor.deadline_s);
  CHECK(c.supervisor.done_exit_code == 7);
  CHECK(c.supervisor.restart == restart_type::permanent);
  CHECK(c.supervisor.intensity.period_s == 60.0);
  CHECK_FALSE(c.supervisor.intensity.max_restarts);
  CHECK(same_overrides(c.supervisor, cleared.supervisor));
  CHECK(same_settings(c.settings, cleared.settings));
  task_status s;
  s.task_id = "t1";
  s.state = task_state::backoff;
  task_result r;
  r.outcome = task_outcome::stopped;
  r.error = "stopped by user (kill)";
  r.cause.reason = end_reason::node_lost;
  r.cause.last_class = error_class::infrastructure;
  r.cause.node = "w1";
  s.result = r;
  auto s2 = round_trip(sys, s);
  CHECK(s2.state == task_state::backoff);
  REQUIRE(s2.result);
  CHECK(s2.result->error == r.error);
  CHECK(s2.result->cause.reason == end_reason::node_lost);
  CHECK(s2.result->cause.last_class == error_class::infrastructure);
  CHECK(s2.result->cause.node == "w1");
  // A lost node travels as its rule and is read back from it.
  classification lost;
  lost.cls = error_class::infrastructure;
  lost.rule = "node_lost:w2";
  lost.lost_node = "w2";
  auto lost2 = round_trip(sys, lost);
  CHECK(lost2.lost_node == "w2");
  CHECK(is_node_loss(lost2));
  classification plain;
  plain.cls = error_class::infrastructure;
  plain.rule = "infrastructure";
  CHECK_FALSE(is_node_loss(round_trip(sys, plain)));
  CHECK(caf::deep_to_string(s).find("t1") != std::string::npos);
}

TEST_CASE("a task's optional settings are range-checked on load",
          "[protocol]") {
  caf::actor_system_config cfg;
  register_protocol(cfg);
  caf::actor_system sys{cfg};
  auto load = [&](std::uint8_t state, auto value, auto& into) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    REQUIRE_FALSE(sink(state, value));
    caf::binary_deserializer source{sys, buf};
    return source(into);
  };
  clearable<double> deadline = 5.0;
  auto ref = detail::clear_opt(deadline, "supervisor.deadline_s");
  // 0 unset, 1 cleared, 2 set; anything else is refused, naming the field.
  CHECK_FALSE(load(1, 0.0, ref));
  REQUIRE(deadline);
  CHECK_FALSE(*deadline);
  CHECK_FALSE(load(2, 3.0, ref));
  CHECK(deadline == 3.0);
  auto err = load(3, 3.0, ref);
  REQUIRE(err);
  CHECK_THAT(caf::to_string(err),
             Catch::Contains("supervisor.deadline_s: out-of-range state 3"));
  std::optional<restart_type> restart;
  auto enum_ref = detail::opt_checked(restart, "supervisor.restart");
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(true, std::underlying_type_t<restart_type>{7}));
  caf::binary_deserializer source{sys, buf};
  auto bad = source(enum_ref);
  REQUIRE(bad);
  CHECK_THAT(caf::to_string(bad), Catch::Contains("supervisor.restart"));
  CHECK_FALSE(restart);
}

TEST_CASE("protocol errors carry their text", "[protocol]") {
  auto err = make_error(protocol_error::unknown_task, "no task 'x'");
  CHECK(err.category() == protocol_error_category);
  CHECK(error_text(err) == "no task 'x'");
  CHECK(parse_stop_mode("kill") == stop_mode::kill);
  CHECK_FALSE(parse_stop_mode("stop"));
  CHECK(to_string(event_kind::retry_scheduled) == "retry_scheduled");
}

TEST_CASE("a number that is not finite, or beyond the wire's bound, is "
          "refused on save and on load",
          "[protocol]") {
  caf::actor_system_config cfg;
  register_protocol(cfg);
  caf::actor_system sys{cfg};
  // Saving: refused with the field's name, and it ends (CAF 0.17's float
  // encoder would loop forever on the infinity).
  task_status s;
  s.task_id = "t1";
  s.result = task_result{};
  s.result->metadata.cost_usd = std::numeric_limits<double>::infinity();
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  auto err = sink(s);
  REQUIRE(err);
  CHECK_THAT(caf::to_string(err), Catch::Contains("metadata.cost_usd"));
  attempt_outcome o;
  o.duration_s = -std::numeric_limits<double>::infinity();
  buf.clear();
  caf::binary_serializer sink2{sys, buf};
  err = sink2(o);
  REQUIRE(err);
  CHECK_THAT(caf::to_string(err), Catch::Contains("outcome.duration_s"));
  // Loading: a peer that sends a number beyond the bound is refused.
  buf.clear();
  caf::binary_serializer raw{sys, buf};
  REQUIRE_FALSE(raw(std::string{}, std::string{}, 0, 0, 0, 0,
                    std::map<std::string, int>{}, false, token_usage{}, true,
                    1e300));
  result_metadata m;
  caf::binary_deserializer source{sys, buf};
  err = source(m);
  REQUIRE(err);
  CHECK_THAT(caf::to_string(err), Catch::Contains("metadata.cost_usd"));
  // A negative token count is refused too.
  buf.clear();
  caf::binary_serializer raw2{sys, buf};
  REQUIRE_FALSE(raw2(std::int64_t{-1}, std::int64_t{0}, std::int64_t{0}));
  token_usage u;
  caf::binary_deserializer source2{sys, buf};
  err = source2(u);
  REQUIRE(err);
  CHECK_THAT(caf::to_string(err), Catch::Contains("negative"));
  // Numbers within the bound travel as they are.
  s.result->metadata.cost_usd = 1e9;
  CHECK(round_trip(sys, s).result->metadata.cost_usd == 1e9);
  o.duration_s = 2.5;
  CHECK(round_trip(sys, o).duration_s == 2.5);
}

TEST_CASE("a status page and its query round-trip, and a query or page that "
          "breaks its bounds is refused on load",
          "[protocol]") {
  caf::actor_system_config cfg;
  register_protocol(cfg);
  caf::actor_system sys{cfg};
  status_query q{100, "t-0099", 1u << 3, 1u << 1, "claude"};
  auto q2 = round_trip(sys, q);
  CHECK(q2.limit == 100);
  CHECK(q2.after == "t-0099");
  CHECK(q2.states == 8);
  CHECK(q2.outcomes == 2);
  CHECK(q2.agent == "claude");
  status_page p;
  p.tasks.resize(2);
  p.tasks[0].task_id = "a";
  p.tasks[1].task_id = "b";
  p.times.resize(2);
  p.times[1].submitted_ts = 1.8e9;
  p.times[1].last_decision = "retry 1/3 in 5 s";
  p.now = 1.8e9 + 5;
  p.total = 10;
  p.matched = 4;
  p.more = 2;
  auto p2 = round_trip(sys, p);
  CHECK(p2.tasks.size() == 2);
  CHECK(p2.times.at(1).last_decision == "retry 1/3 in 5 s");
  CHECK(p2.times.at(1).submitted_ts == 1.8e9);
  CHECK(p2.total == 10);
  CHECK(p2.matched == 4);
  CHECK(p2.more == 2);

  auto refused = [&](auto x) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    REQUIRE_FALSE(sink(x));
    decltype(x) y;
    caf::binary_deserializer source{sys, buf};
    auto err = source(y);
    return err ? caf::to_string(err) : std::string{};
  };
  // A state or outcome bit past the enums'.
  CHECK_THAT(refused(status_query{0, "", 1u << all_task_states.size(), 0, ""}),
             Catch::Contains("status_query.states"));
  CHECK_THAT(
    refused(status_query{0, "", 0, 1u << all_task_outcomes.size(), ""}),
    Catch::Contains("status_query.outcomes"));
  CHECK_THAT(refused(status_query{0, std::string(65, 'x'), 0, 0, ""}),
             Catch::Contains("status_query.after"));
  // Counts that cannot be: more matching than there are, more times than
  // tasks.
  auto bad = p;
  bad.matched = 11;
  CHECK_THAT(refused(bad), Catch::Contains("status_page.matched"));
  bad = p;
  bad.times.resize(3);
  CHECK_THAT(refused(bad), Catch::Contains("status_page.times"));
  bad = p;
  bad.times[0].last_decision.assign(wire::max_text_bytes + 1, 'x');
  CHECK_THAT(refused(bad), Catch::Contains("times.last_decision"));
}

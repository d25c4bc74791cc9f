// Loading from the wire is checked: every enum against its range, every list
// against its entry limit before any entry is read, every string against its
// limit. Each case serializes a valid value with CAF's binary serializer,
// patches the enum's byte on the wire (found by serializing a second valid
// value and comparing), and expects the deserializer to fail.

#include "tasksup/actors/cluster.hpp"
#include "tasksup/actors/inspect.hpp"
#include "tasksup/actors/protocol.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>

#include <cstddef>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

struct fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;

  fixture() : sys{(register_protocol(cfg), cfg)} {}

  template<class T>
  std::vector<char> save(T x) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    REQUIRE_FALSE(sink(x));
    return buf;
  }

  template<class T>
  caf::error load(const std::vector<char>& buf, T& x) {
    caf::binary_deserializer source{sys, buf};
    return source(x);
  }

  /// Serializes `make(0)` and `make(1)` (two valid values of one enum
  /// member), sets the one byte where they differ to `bad`, and returns
  /// the deserializer's verdict on the result.
  template<class F>
  caf::error load_patched(F make, char bad) {
    auto a = save(make(0));
    auto b = save(make(1));
    REQUIRE(a.size() == b.size());
    std::size_t diffs = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) {
        ++diffs;
        at = i;
      }
    REQUIRE(diffs == 1);
    decltype(make(0)) ok;
    REQUIRE_FALSE(load(a, ok)); // the unpatched value loads
    a[at] = bad;
    decltype(make(0)) out;
    return load(a, out);
  }
};

template<class E>
E nth(int i) {
  return static_cast<E>(i);
}

} // namespace

TEST_CASE_METHOD(fixture, "an out-of-range enum fails to load", "[inspect]") {
  // 99 and 128 are past every enum (the int-based ones differ in their low
  // byte, so the patched value is 99 or 128 there too).
  for (char bad : {char{99}, static_cast<char>(0x80)}) {
    INFO("patched byte " << int(bad));
    // A group's tree, as a node's `status` answers it.
    CHECK(load_patched(
      [](int i) {
        group_row x;
        x.phase = nth<member_phase>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        group_row x;
        x.strategy = nth<group_strategy>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        group_row x;
        x.last = nth<member_end>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        agent_selection x;
        x.mode = nth<selection_mode>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        backoff_spec x;
        x.kind = nth<backoff_spec::kind_t>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        backoff_spec x;
        x.jit = nth<jitter>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        supervisor_config x;
        x.restart = nth<restart_type>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        supervisor_config x;
        x.actions = {{nth<error_class>(i), action::retry}};
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        supervisor_config x;
        x.actions = {{error_class::fatal, nth<action>(i)}};
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        supervisor_config x;
        x.backoff = {{nth<error_class>(i), backoff_spec{}}};
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        classifier_rule x;
        x.cls = nth<error_class>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        classification x;
        x.cls = nth<error_class>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        task_result x;
        x.outcome = nth<task_outcome>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        task_result x;
        x.cause.reason = nth<end_reason>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        task_result x;
        x.cause.last_class = nth<error_class>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        task_status x;
        x.state = nth<task_state>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        event x;
        x.kind = nth<event_kind>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        delay_request x;
        x.spec.jit = nth<jitter>(i);
        return x;
      },
      bad));
    CHECK(load_patched(
      [](int i) {
        delay_decision x;
        x.source = nth<delay_source>(i);
        return x;
      },
      bad));
    // Nested: a task whose supervisor's backoff map has a bad key (the
    // crash of issue 16).
    CHECK(load_patched(
      [](int i) {
        task_spec x;
        x.id = "t";
        x.supervisor.backoff = {{nth<error_class>(i), backoff_spec{}}};
        return x;
      },
      bad));
  }
}

TEST_CASE_METHOD(fixture,
                 "an out-of-range stop mode in a message fails to load",
                 "[inspect]") {
  auto make = [](int i) {
    return caf::make_message(stop_atom::value, std::string{"t1"},
                             nth<stop_mode>(i));
  };
  auto a = save(make(0));
  auto b = save(make(1));
  REQUIRE(a.size() == b.size());
  std::size_t at = a.size();
  std::size_t diffs = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      at = i;
      ++diffs;
    }
  REQUIRE(diffs == 1);
  INFO("patched byte " << at << " of " << a.size() << ": " << int(a[at]));
  caf::message ok;
  REQUIRE_FALSE(load(a, ok));
  CHECK(ok.get_as<stop_mode>(2) == stop_mode::cancel);
  a[at] = 2;
  // CAF 0.17's message loader reports the element's error as an empty
  // message; either way no stop_mode with the bad value comes out, and an
  // empty message matches no handler (a request gets unexpected_message).
  caf::message out;
  auto err = load(a, out);
  INFO("loaded: " << caf::to_string(out));
  CHECK((err || out.empty()));
  CHECK_FALSE(out.match_elements<caf::atom_value, std::string, stop_mode>());
}

TEST_CASE_METHOD(fixture, "lists and strings over their limits fail to load",
                 "[inspect]") {
  SECTION("a list with one entry too many") {
    agent_spec x;
    x.args.assign(wire::max_list_entries, "a");
    agent_spec out;
    CHECK_FALSE(load(save(x), out));
    CHECK(out.args.size() == wire::max_list_entries);
    x.args.emplace_back("a");
    CHECK(load(save(x), out));
  }
  SECTION("a map with one entry too many") {
    task_spec x;
    for (std::size_t i = 0; i <= wire::max_list_entries; ++i)
      x.env["K" + std::to_string(i)] = "v";
    task_spec out;
    CHECK(load(save(x), out));
  }
  SECTION("a list announcing 2^28 entries in a few bytes") {
    // CAF's varbyte length prefix for 2^28, then nothing: the count itself
    // is refused, before any entry is read.
    agent_spec x;
    auto buf = save(x);
    agent_spec probe;
    probe.args = {"a"};
    auto with_one = save(probe);
    // Find where the args count sits: the first byte that differs.
    std::size_t at = 0;
    while (at < buf.size() && buf[at] == with_one[at])
      ++at;
    REQUIRE(at < buf.size());
    std::vector<char> huge(buf.begin(), buf.begin() + at);
    for (char c : {'\x80', '\x80', '\x80', '\x80', '\x01'})
      huge.push_back(c);
    agent_spec out;
    auto err = load(huge, out);
    REQUIRE(err);
    CHECK_THAT(sys.render(err),
               Catch::Contains("agent.args: 268435456 entries (at most"));
  }
  SECTION("strings") {
    task_spec x;
    x.id = std::string(wire::max_id_bytes, 'a');
    x.prompt = std::string(wire::max_prompt_bytes, 'p');
    task_spec out;
    CHECK_FALSE(load(save(x), out));
    x.id += 'a';
    CHECK(load(save(x), out));
    x.id.pop_back();
    x.prompt += 'p';
    CHECK(load(save(x), out));
  }
}

TEST_CASE_METHOD(fixture,
                 "an attempt's trace context loads only as lowercase hex",
                 "[inspect]") {
  // The ids become the agent's environment (TRACEPARENT) on the node that
  // runs the attempt.
  runtime::attempt_spec x;
  x.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  x.span_id = "00f067aa0ba902b7";
  runtime::attempt_spec out;
  CHECK_FALSE(load(save(x), out));
  CHECK(out.trace_id == x.trace_id);
  CHECK(out.span_id == x.span_id);
  std::vector<std::string> bad_ids{"4bf9=2f3", std::string{"00f0\0aa", 7},
                                   "00F067AA"};
  for (const auto& bad : bad_ids) {
    runtime::attempt_spec y = x;
    y.span_id = bad;
    auto err = load(save(y), out);
    REQUIRE(err);
    CHECK_THAT(sys.render(err), Catch::Contains("attempt.span_id"));
  }
}

TEST_CASE_METHOD(fixture,
                 "an attempt lost with a node of the longest name loads back "
                 "with its node",
                 "[inspect]") {
  // Node names are label keys: up to 63 bytes. A result journaled with such
  // a loss must load again, or a restart would refuse the journal.
  classification x;
  x.cls = error_class::infrastructure;
  x.rule = std::string{node_lost_rule_prefix} + std::string(63, 'n');
  classification out;
  REQUIRE_FALSE(load(save(x), out));
  CHECK(out.lost_node == std::string(63, 'n'));
  x.rule += std::string(2, 'n');
  CHECK(load(save(x), out));
}

TEST_CASE("to_string of an out-of-range enum is safe", "[inspect]") {
  CHECK(to_string(nth<error_class>(20)) == "unknown");
  CHECK(to_string(nth<error_class>(all_error_classes.size())) == "unknown");
  CHECK(to_string(nth<action>(3)) == "unknown");
  CHECK(to_string(nth<restart_type>(-1)) == "unknown");
  CHECK(to_string(nth<jitter>(6)) == "unknown");
  CHECK(to_string(nth<stop_mode>(2)) == "unknown");
  CHECK(to_string(nth<task_state>(200)) == "unknown");
  CHECK(to_string(nth<task_state>(7)) == "unknown");
  CHECK(to_string(nth<task_outcome>(3)) == "unknown");
  CHECK(to_string(nth<event_kind>(13)) == "unknown");
  CHECK(to_string(nth<end_reason>(13)) == "unknown");
  CHECK(to_string(end_reason::node_lost) == "node_lost");
  CHECK(to_string(event_kind::warning) == "warning");
  CHECK(to_string(error_class::infrastructure) == "infrastructure");
}

TEST_CASE_METHOD(fixture,
                 "a group's status round-trips with its tree, and a row "
                 "deeper than any tree fails to load",
                 "[inspect]") {
  task_status s;
  s.task_id = "team";
  group_row top;
  top.id = "team";
  top.group = true;
  top.phase = member_phase::running;
  top.restarts = 2;
  top.strategy = group_strategy::rest_for_one;
  group_row member;
  member.depth = 1;
  member.id = "plan";
  member.restart = restart_type::transient;
  member.significant = true;
  member.phase = member_phase::stopping;
  member.last = member_end::failed;
  member.restarts = 1;
  s.tree = {top, member};
  task_status back;
  REQUIRE_FALSE(load(save(s), back));
  REQUIRE(back.tree.size() == 2);
  CHECK(back.tree[0].strategy == group_strategy::rest_for_one);
  CHECK(back.tree[0].restarts == 2);
  CHECK(back.tree[1].depth == 1);
  CHECK(back.tree[1].id == "plan");
  CHECK(back.tree[1].significant);
  CHECK(back.tree[1].phase == member_phase::stopping);
  CHECK(back.tree[1].last == member_end::failed);
  s.tree[1].depth = static_cast<int>(max_group_depth) + 1;
  CHECK(load(save(s), back));
  s.tree[1].depth = -1;
  CHECK(load(save(s), back));
}

// The journal's codec: a task's machine inputs, written as bytes and read
// back, replay to the very state the task had (the property the durable node
// rests on), and damaged bytes are refused with an error.

#include "tasksup/actors/journal_codec.hpp"
#include "tasksup/supervisor/wire_limits.hpp"

#include "tasksup/supervisor/bounded_number.hpp"

#include <catch2/catch.hpp>

#include <caf/binary_serializer.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace tasksup;

namespace {

/// Drives one task with random but plausible inputs: it answers what the
/// machine asked for, sometimes late or twice, and mixes in the user's
/// controls. Keeps every input that took effect, encoded, as a journal would.
struct driver {
  driver(std::uint64_t seed, supervisor_config cfg, std::size_t chain)
    : machine(std::make_shared<const supervisor_config>(std::move(cfg)), chain),
      st(machine.initial()), rng(seed) {}

  task_machine machine;
  task_machine_state st;
  std::mt19937_64 rng;
  double now = 1.7e9;
  std::vector<std::string> journal;
  std::optional<effect::ask_permission> asked;
  std::optional<std::uint64_t> classify, delay, timer, quota_timer;
  int running = 0;
  /// Every attempt reports the issue's poison: a cost of 1e308 and 9e18
  /// input tokens.
  bool poison = false;

  std::size_t pick(std::size_t n) { return rng() % n; }

  void feed(machine_input in) {
    machine_effects fx;
    auto before = fingerprint(st);
    auto at = now;
    auto copy = in;
    if (machine.handle(st, std::move(in), at, fx)) {
      journal.push_back(encode(journaled_input{at, std::move(copy)}));
    } else {
      // What is not journaled must not have changed the task.
      REQUIRE(fingerprint(st) == before);
    }
    for (auto& e : fx) {
      if (auto* x = std::get_if<effect::ask_permission>(&e))
        asked = *x;
      else if (auto* x = std::get_if<effect::start_attempt>(&e))
        running = x->attempt;
      else if (auto* x = std::get_if<effect::classify>(&e))
        classify = x->generation;
      else if (auto* x = std::get_if<effect::ask_delay>(&e))
        delay = x->generation;
      else if (auto* x = std::get_if<effect::set_timer>(&e);
               x && x->kind == timer_kind::backoff)
        timer = x->generation;
      else if (auto* x = std::get_if<effect::set_timer>(&e);
               x && x->kind == timer_kind::quota)
        quota_timer = x->generation;
    }
  }

  attempt_outcome outcome() {
    attempt_outcome o;
    o.exit_code = static_cast<int>(pick(3));
    o.duration_s = static_cast<double>(pick(1000)) / 7.0;
    o.started = pick(10) != 0;
    o.tail = {"line " + std::to_string(pick(100)), "rate limit"};
    if (poison) {
      structured_result r;
      r.usage = token_usage{9000000000000000000, 1, 0};
      r.cost_usd = 1e308;
      o.structured = std::move(r);
    } else if (pick(3) == 0) {
      structured_result r;
      r.final_message = "done";
      auto n = [&](std::size_t k) {
        return static_cast<std::int64_t>(pick(k));
      };
      r.usage = token_usage{n(1000), n(1000), n(10)};
      if (pick(2) == 0)
        r.cost_usd = static_cast<double>(pick(100)) / 1000.0;
      o.structured = std::move(r);
    }
    if (pick(8) == 0)
      o.infrastructure_error = "engine gone";
    return o;
  }

  void step() {
    now += static_cast<double>(pick(50)) / 4.0;
    switch (pick(11)) {
      case 0:
      case 1:
        if (asked) {
          auto a = *asked;
          asked.reset();
          feed(input::permission{a.generation, pick(6) != 0, pick(5) != 0,
                                 "agent-" + std::to_string(a.agent_index)});
        }
        break;
      case 2:
        if (running != 0)
          feed(input::attempt_started{running, std::to_string(4000 + running)});
        break;
      case 3:
        if (running != 0) {
          auto a = running;
          running = 0;
          feed(input::attempt_ended{a, outcome(), pick(9) == 0, pick(20) == 0});
        }
        break;
      case 4:
        if (classify) {
          classification c;
          c.cls = all_error_classes[pick(all_error_classes.size())];
          c.rule = "rule-" + std::to_string(pick(5));
          c.line = "the line";
          if (pick(3) == 0)
            c.retry_after_s = static_cast<double>(pick(60));
          feed(input::classified{*classify, c});
          classify.reset();
        }
        break;
      case 5:
        if (delay) {
          delay_decision d;
          d.delay_s = static_cast<double>(pick(30)) / 3.0;
          d.source = static_cast<delay_source>(pick(3));
          d.scheduled_s = d.delay_s + 1;
          d.step = static_cast<int>(pick(4));
          d.capped = pick(2) == 0;
          feed(input::delay_decided{*delay, d});
          delay.reset();
        }
        break;
      case 6:
        if (timer) {
          feed(input::timer{timer_kind::backoff, *timer});
          timer.reset();
        }
        break;
      case 7:
        switch (pick(8)) {
          case 4:
            feed(input::pause{});
            break;
          case 5:
            feed(input::resume{});
            break;
          case 6:
            if (asked) {
              // The agent's account is closed for a used-up quota.
              auto a = *asked;
              asked.reset();
              feed(input::quota_closed{a.generation,
                                       "acct-" + std::to_string(a.agent_index),
                                       now + static_cast<double>(pick(600))});
            }
            break;
          case 7:
            if (quota_timer) {
              feed(input::timer{timer_kind::quota, *quota_timer});
              quota_timer.reset();
            }
            break;
          case 0:
            feed(input::stop{pick(2) == 0 ? stop_request::cancel
                                          : stop_request::kill});
            break;
          case 1:
            feed(input::retry_now{});
            break;
          case 2:
            feed(input::force_fallback{});
            break;
          default:
            feed(input::timer{timer_kind::deadline, 0});
            break;
        }
        break;
      case 8:
        if (pick(4) == 0) {
          // The node restarted: every open request is gone.
          asked.reset();
          classify.reset();
          delay.reset();
          timer.reset();
          quota_timer.reset();
          feed(input::resumed{});
          break;
        }
        feed(input::reply_failed{st.generation - pick(2),
                                 static_cast<request_kind>(pick(3)),
                                 "no reply"});
        break;
      default:
        // Stale answers: an old generation or an old attempt.
        feed(input::classified{st.generation - 1 - pick(3), {}});
        feed(input::attempt_ended{st.attempt + 1, outcome()});
        break;
    }
  }

  /// A fresh task fed the journal read back from its bytes.
  task_machine_state replay() const {
    auto r = machine.initial();
    machine_effects fx;
    for (std::size_t i = 0; i < journal.size(); ++i) {
      auto x = decode_input(journal[i], "record " + std::to_string(i));
      REQUIRE(x);
      fx.clear();
      REQUIRE(machine.handle(r, x->in, x->at_s, fx));
    }
    return r;
  }
};

} // namespace

TEST_CASE("journal: replaying a task's journaled inputs gives back its state",
          "[journal][property]") {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 pick{seed * 104729};
    supervisor_config cfg;
    cfg.max_retries_per_agent = static_cast<int>(pick() % 4);
    cfg.max_total_attempts = 1 + static_cast<int>(pick() % 15);
    cfg.restart = static_cast<restart_type>(pick() % 3);
    cfg.intensity.max_restarts = static_cast<int>(pick() % 5);
    if (pick() % 3 == 0)
      cfg.deadline_s = 100;
    driver d{seed, cfg, 1 + static_cast<std::size_t>(pick() % 3)};
    INFO("seed " << seed);
    d.feed(input::start{});
    // A crash can come after any input: check the replay at every step.
    for (int i = 0; i < 200 && d.st.phase != task_phase::done; ++i) {
      d.step();
      REQUIRE(fingerprint(d.replay()) == fingerprint(d.st));
    }
  }
}

TEST_CASE("journal: a task survives its bytes") {
  journaled_task t;
  t.spec.id = "t1";
  t.spec.prompt = "fix the tests";
  t.spec.env = {{"A", "1"}};
  t.spec.supervisor.max_retries_per_agent = 5;
  t.trace_id = std::string(32, 'a');
  t.seed = 42;
  t.start_agent_id = "claude";
  auto back = decode_task(encode(t), "task t1");
  REQUIRE(back);
  CHECK(back->spec.id == "t1");
  CHECK(back->spec.prompt == "fix the tests");
  CHECK(back->spec.env == t.spec.env);
  CHECK(back->spec.supervisor.max_retries_per_agent == 5);
  CHECK(back->trace_id == t.trace_id);
  CHECK(back->seed == 42);
  CHECK(back->start_agent_id == t.start_agent_id);
}

TEST_CASE("journal: damaged records are refused with an error naming them") {
  auto good = encode(journaled_input{5, input::stop{stop_request::kill}});
  SECTION("truncated") {
    auto x = decode_input(good.substr(0, good.size() - 1), "task t, record 3");
    REQUIRE_FALSE(x);
    CHECK_THAT(x.error().to_string(), Catch::Contains("task t, record 3"));
  }
  SECTION("an unknown input kind") {
    auto bad = good;
    bad[8] = static_cast<char>(200); // the tag after the 8-byte time
    auto x = decode_input(bad, "record 1");
    REQUIRE_FALSE(x);
    CHECK_THAT(x.error().to_string(), Catch::Contains("out-of-range"));
  }
  SECTION("an out-of-range enum inside") {
    auto bad = good;
    bad.back() = static_cast<char>(9); // stop.mode
    auto x = decode_input(bad, "record 1");
    REQUIRE_FALSE(x);
    CHECK_THAT(x.error().to_string(), Catch::Contains("stop.mode"));
  }
  SECTION("stray bytes") {
    auto x = decode_input(good + "zz", "record 1");
    REQUIRE_FALSE(x);
    CHECK_THAT(x.error().to_string(), Catch::Contains("stray bytes"));
  }
}

namespace {

/// `bytes` with the 8 bytes of the double `x` (IEEE 754 in CAF's byte order)
/// replaced by those of `y`; `x` must occur once.
std::string replace_double(std::string bytes, double x, double y) {
  auto as_bytes = [](double d, bool big_endian) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &d, 8);
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i)
      out[big_endian ? i : 7 - i] =
        static_cast<char>((bits >> (56 - 8 * i)) & 0xff);
    return out;
  };
  for (bool big_endian : {true, false}) {
    auto at = bytes.find(as_bytes(x, big_endian));
    if (at != std::string::npos) {
      REQUIRE(bytes.find(as_bytes(x, big_endian), at + 1) == std::string::npos);
      return bytes.replace(at, 8, as_bytes(y, big_endian));
    }
  }
  FAIL("the double is not in the record");
  return bytes;
}

constexpr double inf = std::numeric_limits<double>::infinity();

} // namespace

TEST_CASE("journal: a record with a number that is not finite loads clamped, "
          "with a warning naming it") {
  // CAF 0.17's serializer does not end on an infinite double: a record that
  // holds one (written by hand, or by an older build) loads with the number
  // clamped, so it can be written back.
  delay_decision d;
  d.delay_s = 3;
  auto good = encode(journaled_input{1, input::delay_decided{2, d}});
  std::vector<std::string> warnings;
  REQUIRE(decode_input(good, "r", &warnings));
  CHECK(warnings.empty());
  SECTION("the time made infinite") {
    auto bad = replace_double(good, 1.0, inf);
    auto x = decode_input(bad, "task 't9', record 9", &warnings);
    REQUIRE(x);
    CHECK(x->at_s == wire::max_number);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("task 't9', record 9"));
    CHECK_THAT(warnings[0], Catch::Contains("clamped"));
    // Written back, it reads the same, with nothing left to clamp.
    warnings.clear();
    auto again = decode_input(encode(*x), "r", &warnings);
    REQUIRE(again);
    CHECK(again->at_s == wire::max_number);
    CHECK(warnings.empty());
  }
  SECTION("the delay made minus infinity") {
    // (CAF's float decoder gives an infinity for every all-ones exponent:
    // no bytes decode to NaN.)
    auto bad = replace_double(good, 3.0, -inf);
    auto x = decode_input(bad, "record 3", &warnings);
    REQUIRE(x);
    CHECK(std::get<input::delay_decided>(x->in).delay.delay_s ==
          -wire::max_number);
    CHECK(warnings.size() == 1);
  }
}

TEST_CASE("journal: a number that is not finite is clamped wherever it is") {
  // The fuzzer found an attempt's record whose provider error carried an
  // infinite retry-after hint.
  attempt_outcome o;
  o.exit_code = 1;
  structured_error e;
  e.retry_after_s = 1.5;
  o.structured = structured_result{};
  o.structured->error = e;
  o.structured->cost_usd = 0.125;
  auto good = encode(journaled_input{0, input::attempt_ended{1, o}});
  std::vector<std::string> warnings;
  auto bad = replace_double(replace_double(good, 1.5, inf), 0.125, inf);
  auto x = decode_input(bad, "task 't4', record 4", &warnings);
  REQUIRE(x);
  auto& ended = std::get<input::attempt_ended>(x->in);
  CHECK(ended.outcome.structured->error->retry_after_s == wire::max_number);
  CHECK(ended.outcome.structured->cost_usd == wire::max_number);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("task 't4', record 4: 2 numbers"));
}

TEST_CASE("journal: a finished task's record keeps its result's cause") {
  task_status s;
  s.task_id = "t1";
  s.state = task_state::done;
  s.result = task_result{};
  s.result->task_id = "t1";
  s.result->error = "retryable failure: retries exhausted (3/3)";
  s.result->cause.reason = end_reason::node_lost;
  s.result->cause.last_class = error_class::infrastructure;
  s.result->cause.node = "w1";
  auto back = decode_status(encode(s), "t1");
  REQUIRE(back);
  REQUIRE(back->result);
  CHECK(back->result->error == s.result->error);
  CHECK(back->result->cause.reason == end_reason::node_lost);
  CHECK(back->result->cause.last_class == error_class::infrastructure);
  CHECK(back->result->cause.node == "w1");
}

TEST_CASE("journal: a finished task's record from before results carried "
          "their cause still loads") {
  // The bytes such a record has: the status's fields, the result's without
  // a cause (every optional is a presence flag and a value).
  auto old_record = [](task_outcome outcome, bool has_result) {
    std::vector<char> buf;
    caf::binary_serializer sink{nullptr, buf};
    std::string id = "t1";
    std::string environment = "team";
    auto state = task_state::done;
    std::string agent_id = "a";
    int attempt = 2;
    int retry_count = 1;
    int max_retries = 3;
    int total_attempts = 2;
    int fallback_count = 0;
    std::string trace_id = "abc";
    int exit_code = 1;
    bool has_error = outcome != task_outcome::succeeded;
    std::string error = has_error ? "stopped by user (kill)" : "";
    std::vector<std::string> artifacts{"out.txt"};
    result_metadata metadata;
    metadata.agent_id = "a";
    std::string node;
    std::string waiting_for;
    double resume_at = 0;
    REQUIRE_FALSE(sink(id, environment, state, agent_id, attempt, retry_count,
                       max_retries, total_attempts, fallback_count, trace_id,
                       has_result, id, outcome, exit_code, has_error, error,
                       artifacts, metadata, node, waiting_for, resume_at));
    return std::string(buf.begin(), buf.end());
  };
  auto failed = decode_status(old_record(task_outcome::stopped, true), "t1");
  REQUIRE(failed);
  CHECK(failed->task_id == "t1");
  CHECK(failed->environment == "team");
  CHECK(failed->attempt == 2);
  REQUIRE(failed->result);
  CHECK(failed->result->outcome == task_outcome::stopped);
  CHECK(failed->result->error == "stopped by user (kill)");
  CHECK(failed->result->artifacts == std::vector<std::string>{"out.txt"});
  CHECK(failed->result->metadata.agent_id == "a");
  CHECK(failed->result->cause.reason == end_reason::unknown);
  CHECK_FALSE(failed->result->cause.last_class);
  auto ok = decode_status(old_record(task_outcome::succeeded, true), "t1");
  REQUIRE(ok);
  REQUIRE(ok->result);
  CHECK_FALSE(ok->result->error);
  CHECK(ok->result->cause.reason == end_reason::succeeded);
  auto none = decode_status(old_record(task_outcome::failed, false), "t1");
  REQUIRE(none);
  CHECK_FALSE(none->result);
  // Written again, it takes today's form and keeps what it has.
  auto again = decode_status(encode(*failed), "t1");
  REQUIRE(again);
  CHECK(again->result->error == "stopped by user (kill)");
  CHECK(again->result->cause.reason == end_reason::unknown);
}

TEST_CASE("journal: saving a number that is not finite ends, clamped") {
  // Before, saving +inf never returned (CAF's float encoder halves it
  // forever) and hung the node's registry.
  task_status s;
  s.task_id = "t1";
  s.state = task_state::done;
  s.result = task_result{};
  s.result->metadata.cost_usd = inf;
  auto back = decode_status(encode(s), "t1");
  REQUIRE(back);
  CHECK(back->result->metadata.cost_usd == wire::max_number);
  journaled_input in{-inf, input::retry_now{}};
  auto x = decode_input(encode(in), "r");
  REQUIRE(x);
  CHECK(x->at_s == -wire::max_number);
  in.at_s = std::nan("");
  x = decode_input(encode(in), "r");
  REQUIRE(x);
  CHECK(x->at_s == 0);
}

TEST_CASE("journal: a task whose attempts report a cost of 1e308 and 9e18 "
          "tokens replays to bounded sums",
          "[journal][property]") {
  // The issue's poison: each attempt's figures are finite, their sum is not
  // (or overflows). The machine's sums clamp and saturate, so the state and
  // its replay agree and can be journaled.
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    driver d{seed, supervisor_config{}, 2};
    d.poison = true;
    INFO("seed " << seed);
    d.feed(input::start{});
    for (int i = 0; i < 200 && d.st.phase != task_phase::done; ++i)
      d.step();
    auto replayed = d.replay();
    REQUIRE(fingerprint(replayed) == fingerprint(d.st));
    if (d.st.cost_usd) {
      CHECK(std::isfinite(*d.st.cost_usd));
      CHECK(*d.st.cost_usd <= max_cost_usd);
    }
    if (d.st.usage) {
      CHECK(d.st.usage->input_tokens >= 0);
      CHECK(d.st.usage->output_tokens >= 0);
    }
  }
}

TEST_CASE("journal: a group's row, its inputs and its end survive their "
          "bytes, and damaged ones are refused naming the field") {
  journaled_group g{"crew", R"({"group": {"id": "crew", "members": []}})",
                    std::string(32, 'b'), 9};
  auto row = encode(g);
  CHECK(is_group_row(row));
  CHECK_FALSE(is_group_row(encode(journaled_task{})));
  auto back = decode_group(row, "group 'crew'");
  REQUIRE(back);
  CHECK(back->top == "crew");
  CHECK(back->document == g.document);
  CHECK(back->trace_id == g.trace_id);
  CHECK(back->seed == 9);
  auto not_group = decode_group(encode(journaled_task{}), "group 'x'");
  REQUIRE_FALSE(not_group);
  CHECK_THAT(not_group.error().to_string(), Catch::Contains("group 'x'"));
  journaled_group_input in;
  in.kind = journaled_group_input::ended;
  in.at_s = 12.5;
  in.member = 2;
  in.how = member_end::failed;
  in.run = 7;
  auto bytes = encode(in);
  auto input = decode_group_input(bytes, "group 'crew', record 3");
  REQUIRE(input);
  CHECK(input->kind == journaled_group_input::ended);
  CHECK(input->at_s == 12.5);
  CHECK(input->member == 2);
  CHECK(input->how == member_end::failed);
  CHECK(input->run == 7);
  SECTION("an unknown input kind") {
    auto bad = bytes;
    bad[0] = static_cast<char>(6);
    auto x = decode_group_input(bad, "group 'crew', record 3");
    REQUIRE_FALSE(x);
    CHECK_THAT(x.error().to_string(),
               Catch::Contains("group 'crew', record 3"));
    CHECK_THAT(x.error().to_string(),
               Catch::Contains("journaled_group_input.kind"));
  }
  SECTION("an unknown end of a member") {
    auto bad = bytes;
    bad[1 + 8 + 4] = static_cast<char>(3); // after the kind, time, member
    auto x = decode_group_input(bad, "record 3");
    REQUIRE_FALSE(x);
    CHECK_THAT(x.error().to_string(),
               Catch::Contains("journaled_group_input.how"));
  }
  SECTION("truncated") {
    auto x = decode_group_input(bytes.substr(0, 5), "record 3");
    REQUIRE_FALSE(x);
  }
  task_result r;
  r.task_id = "crew";
  r.outcome = task_outcome::failed;
  r.error = "group 'crew' gave up";
  auto end = decode_group_end(encode(journaled_group_end{r, 3}), "end");
  REQUIRE(end);
  REQUIRE(end->result);
  CHECK(end->result->error == r.error);
  CHECK(end->restarts == 3);
  auto no_result = decode_group_end(encode(journaled_group_end{}), "end");
  REQUIRE(no_result);
  CHECK_FALSE(no_result->result);
}

namespace {

/// The bytes of `t`'s spec as the journal writes it today.
std::string spec_bytes(task_spec spec) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(sink(spec));
  return std::string(buf.begin(), buf.end());
}

/// A task record written before tasks had an answer schema and a role: the
/// spec without its last two (empty) strings, and `tag` first.
std::string before_answers(const journaled_task& t, char tag) {
  auto now = encode(t);
  auto spec = spec_bytes(t.spec).size();
  return std::string(1, tag) + now.substr(1, spec - 2) + now.substr(1 + spec);
}

} // namespace

TEST_CASE("journal: a task record says which run of a group member it is, "
          "and one written before that loads as run 0") {
  journaled_task t;
  t.spec.id = "m";
  t.attempts_before = 2;
  t.member_run = 77;
  auto now = encode(t);
  auto back = decode_task(now, "task 'm'");
  REQUIRE(back);
  CHECK(back->attempts_before == 2);
  CHECK(back->member_run == 77);
  // The forms before: another first byte, no answer schema or role, and
  // (the oldest) no run at the end.
  auto with_run = before_answers(t, '\xfc');
  auto run = decode_task(with_run, "task 'm'");
  REQUIRE(run);
  CHECK(run->attempts_before == 2);
  CHECK(run->member_run == 77);
  auto before = "\xfe" + with_run.substr(1, with_run.size() - 1 - 8);
  auto old = decode_task(before, "task 'm'");
  REQUIRE(old);
  CHECK(old->attempts_before == 2);
  CHECK(old->member_run == 0);
  t.member_run = -1;
  auto negative = decode_task(encode(t), "task 'm'");
  REQUIRE_FALSE(negative);
  CHECK_THAT(negative.error().to_string(),
             Catch::Contains("journaled_task.member_run"));
}

TEST_CASE("journal: a task's answer schema and role, and a result's answer, "
          "survive their bytes, and records from before them still load") {
  journaled_task t;
  t.spec.id = "plan";
  t.spec.prompt = "p";
  t.spec.role = "planner";
  t.spec.answer_schema = R"({"type":"object"})";
  auto back = decode_task(encode(t), "task 'plan'");
  REQUIRE(back);
  CHECK(back->spec.role == "planner");
  CHECK(back->spec.answer_schema == t.spec.answer_schema);
  t.spec.role.clear();
  t.spec.answer_schema.clear();
  auto old = decode_task(before_answers(t, '\xfc'), "task 'plan'");
  REQUIRE(old);
  CHECK(old->spec.prompt == "p");
  CHECK(old->spec.answer_schema.empty());

  task_status s;
  s.task_id = "plan";
  s.state = task_state::done;
  s.result = task_result{};
  s.result->task_id = "plan";
  s.result->outcome = task_outcome::succeeded;
  s.result->cause.reason = end_reason::succeeded;
  s.result->answer = R"({"summary":"x"})";
  auto st = decode_status(encode(s), "plan");
  REQUIRE(st);
  REQUIRE(st->result);
  CHECK(st->result->answer == R"({"summary":"x"})");
  // With its cause and without an answer: the result's last string, then
  // the status's node, waiting_for (empty) and resume_at.
  s.result->answer.clear();
  auto now = encode(s);
  auto with_cause =
    "\xff" + now.substr(1, now.size() - 1 - 11) + now.substr(now.size() - 10);
  auto cause = decode_status(with_cause, "plan");
  REQUIRE(cause);
  REQUIRE(cause->result);
  CHECK(cause->result->cause.reason == end_reason::succeeded);
  CHECK(cause->result->answer.empty());

  task_result r;
  r.task_id = "wf";
  r.error = "step 'wf.code' failed";
  auto end_now = encode(journaled_group_end{r, 3});
  auto end_before = end_now.substr(1, end_now.size() - 1 - 9) +
                    end_now.substr(end_now.size() - 8);
  auto end = decode_group_end(end_before, "end");
  REQUIRE(end);
  REQUIRE(end->result);
  CHECK(end->result->error == r.error);
  CHECK(end->restarts == 3);
}

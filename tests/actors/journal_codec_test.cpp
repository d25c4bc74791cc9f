// The journal's codec: a task's machine inputs, written as bytes and read
// back, replay to the very state the task had (the property the durable node
// rests on), and damaged bytes are refused with an error.

#include "tasksup/actors/journal_codec.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
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
  std::optional<std::uint64_t> classify, delay, timer;
  int running = 0;

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
    }
  }

  attempt_outcome outcome() {
    attempt_outcome o;
    o.exit_code = static_cast<int>(pick(3));
    o.duration_s = static_cast<double>(pick(1000)) / 7.0;
    o.started = pick(10) != 0;
    o.tail = {"line " + std::to_string(pick(100)), "rate limit"};
    if (pick(3) == 0) {
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
        switch (pick(4)) {
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

TEST_CASE("journal: a record with a number that is not finite is refused") {
  // CAF 0.17's serializer does not end on an infinite double: a record
  // holding one must never be loaded (and written back).
  auto x = decode_input(encode(journaled_input{1, input::retry_now{}}), "r");
  REQUIRE(x);
  delay_decision d;
  d.delay_s = 3;
  auto good = encode(journaled_input{1, input::delay_decided{2, d}});
  REQUIRE(decode_input(good, "r"));
  // The same record with its time made infinite: the first 8 bytes are the
  // time, IEEE 754 in CAF's byte order (found from 1.0 = 0x3ff0...).
  auto one = encode(journaled_input{1, input::retry_now{}});
  auto big_endian = static_cast<unsigned char>(one[0]) == 0x3f;
  auto inf = good;
  for (int i = 0; i < 8; ++i)
    inf[big_endian ? i : 7 - i] = static_cast<char>(i == 0   ? 0x7f
                                                    : i == 1 ? 0xf0
                                                             : 0x00);
  auto bad = decode_input(inf, "record 9");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().to_string(), Catch::Contains("not finite"));
}

TEST_CASE("journal: a number that is not finite is refused wherever it is") {
  // The fuzzer found an attempt's record whose provider error carried an
  // infinite retry-after hint: loaded, it could never be written back.
  attempt_outcome o;
  o.exit_code = 1;
  structured_error e;
  e.retry_after_s = 1.5; // 0x3ff8000000000000, unique in the record
  o.structured = structured_result{};
  o.structured->error = e;
  auto good = encode(journaled_input{0, input::attempt_ended{1, o}});
  REQUIRE(decode_input(good, "r"));
  const std::string one_and_a_half{"\x3f\xf8\0\0\0\0\0\0", 8};
  auto at = good.find(one_and_a_half);
  if (at == std::string::npos) { // little-endian order
    std::string reversed{one_and_a_half.rbegin(), one_and_a_half.rend()};
    at = good.find(reversed);
    REQUIRE(at != std::string::npos);
    good.replace(at, 8, std::string{"\0\0\0\0\0\0\xf0\x7f", 8});
  } else {
    good.replace(at, 8, std::string{"\x7f\xf0\0\0\0\0\0\0", 8});
  }
  auto bad = decode_input(good, "record 4");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().to_string(), Catch::Contains("record 4"));
  CHECK_THAT(bad.error().to_string(), Catch::Contains("not finite"));
}

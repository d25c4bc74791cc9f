// The classifier and backoff actors answer by request/response; rules are
// replaceable at run time and per task.

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"

#include "actor_fixture.hpp"

#include <catch2/catch.hpp>

using namespace tasksup;
using namespace tasksup::test;

namespace {

classify_request failing(std::string task_id, std::string line) {
  classify_request req;
  req.task_id = std::move(task_id);
  req.outcome.exit_code = 1;
  req.outcome.tail = {std::move(line)};
  req.agent_cli = "codex";
  return req;
}

} // namespace

TEST_CASE_METHOD(fixture, "classifier rules are replaceable at run time",
                 "[classifier_actor]") {
  auto rules = classifier::make(default_classifier_rules());
  REQUIRE(rules);
  auto cls = keep(spawn_classifier(sys(), std::move(*rules)));
  auto c = ask<classification>(cls, classify_atom::value,
                               failing("t1", "quota exceeded"));
  REQUIRE(c);
  REQUIRE(*c);
  CHECK((*c)->cls == error_class::rate_limit);
  classifier_rule mine;
  mine.id = "mine";
  mine.cls = error_class::fatal;
  mine.patterns = {"quota"};
  // One task's own rules leave the others alone.
  auto ok = ask<bool>(cls, set_rules_atom::value, std::string{"t2"},
                      std::vector<classifier_rule>{mine});
  REQUIRE(ok);
  REQUIRE(*ok);
  auto c2 = ask<classification>(cls, classify_atom::value,
                                failing("t2", "quota exceeded"));
  CHECK((*c2)->cls == error_class::fatal);
  CHECK((*c2)->rule == "mine");
  auto c1 = ask<classification>(cls, classify_atom::value,
                                failing("t1", "quota exceeded"));
  CHECK((*c1)->cls == error_class::rate_limit);
  // A bad rule set is refused and changes nothing.
  classifier_rule bad;
  bad.id = "bad";
  bad.patterns = {"("};
  auto refused =
    ask<bool>(cls, set_rules_atom::value, std::vector<classifier_rule>{bad});
  REQUIRE(refused);
  CHECK_FALSE(*refused);
  CHECK(refused->error().code() ==
        static_cast<std::uint8_t>(protocol_error::invalid_rules));
  auto c3 = ask<classification>(cls, classify_atom::value,
                                failing("t1", "quota exceeded"));
  CHECK((*c3)->cls == error_class::rate_limit);
  // Replacing the defaults applies to every task without its own rules.
  ask<bool>(cls, set_rules_atom::value, std::vector<classifier_rule>{mine});
  auto c4 = ask<classification>(cls, classify_atom::value,
                                failing("t1", "quota exceeded"));
  CHECK((*c4)->cls == error_class::fatal);
}

TEST_CASE_METHOD(fixture,
                 "the backoff actor computes delays on the schedule it is "
                 "given and says where each came from",
                 "[backoff_actor]") {
  auto b = keep(spawn_backoff(sys(), 1));
  delay_request req;
  req.spec = standard_backoff(5);
  std::vector<double> got;
  for (int i = 0; i < 4; ++i) {
    req.retry_index = i;
    auto d = ask<delay_decision>(b, delay_atom::value, req);
    REQUIRE(d);
    REQUIRE(*d);
    CHECK((*d)->source == delay_source::schedule);
    CHECK((*d)->step == std::min(i, 2));
    got.push_back((*d)->delay_s);
  }
  CHECK(got == std::vector<double>{5, 15, 45, 45});
  req.spec = rate_limit_backoff(60);
  req.retry_index = 0;
  req.hint_s = 1000; // capped at the schedule's max
  auto capped = **ask<delay_decision>(b, delay_atom::value, req);
  CHECK(capped.delay_s == 300);
  CHECK(capped.source == delay_source::retry_after_hint);
  CHECK(capped.capped);
  req.hint_s = 20;
  auto hinted = **ask<delay_decision>(b, delay_atom::value, req);
  CHECK(hinted.delay_s == 20);
  CHECK_FALSE(hinted.capped);
  CHECK(hinted.scheduled_s == 60);
  // A jittered schedule says so.
  req.hint_s.reset();
  req.spec.jit = jitter::full;
  auto jittered = **ask<delay_decision>(b, delay_atom::value, req);
  CHECK(jittered.source == delay_source::jitter);
  CHECK(jittered.delay_s >= 0);
  CHECK(jittered.delay_s <= 60);
}

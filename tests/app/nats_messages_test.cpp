// What the NATS bridge reads and writes, without a server: the task a
// submission message becomes, what the node's answer does to the message,
// the subjects and the published documents. The bridge itself runs against
// a real nats-server in tests/integration/node_nats_test.cpp.

#include "nats_messages.hpp"

#include "tasksup/supervisor/events.hpp"

#include <boost/json/parse.hpp>

#include <catch2/catch.hpp>

using namespace tasksup::app;

namespace {

boost::json::object parsed(const std::string& text) {
  return boost::json::parse(text).as_object();
}

} // namespace

TEST_CASE("a submission's task id: its own, else the message id, else the "
          "stream sequence") {
  auto own = read_submission(R"({"id":"fix-7","prompt":"p"})", "m-1", 9);
  REQUIRE(own);
  CHECK(own->id == "fix-7");
  CHECK(parsed(own->json).at("id") == "fix-7");

  auto by_msg = read_submission(R"({"prompt":"p"})", "order 42/a", 9);
  REQUIRE(by_msg);
  CHECK(by_msg->id == "order-42-a");
  CHECK(parsed(by_msg->json).at("id") == "order-42-a");
  CHECK(parsed(by_msg->json).at("prompt") == "p");

  auto by_seq = read_submission(R"({"prompt":"p"})", "", 17);
  REQUIRE(by_seq);
  CHECK(by_seq->id == "nats-17");

  // The same message again names the same task.
  auto again = read_submission(R"({"prompt":"p"})", "order 42/a", 30);
  REQUIRE(again);
  CHECK(again->id == by_msg->id);
}

TEST_CASE("a submission that can never be a task says why") {
  auto not_json = read_submission("{\"prompt\":", "", 1);
  REQUIRE_FALSE(not_json);
  CHECK(not_json.error().to_string().rfind(
          "submission: invalid JSON at line 1, column 11: ", 0) == 0);
  // A duplicate key, as in a task file: which would the node take?
  auto twice = read_submission(R"({"prompt":"a","prompt":"b"})", "", 1);
  REQUIRE_FALSE(twice);
  CHECK(twice.error().to_string() ==
        "submission: /prompt: duplicate key \"prompt\" (a key may appear "
        "only once in an object)");

  auto array = read_submission("[1,2]", "", 1);
  REQUIRE_FALSE(array);
  CHECK(array.error().what.find("not a JSON object") != std::string::npos);

  auto bad_id = read_submission(R"({"id":7})", "", 1);
  REQUIRE_FALSE(bad_id);
  CHECK(bad_id.error().path == "/id");

  std::string huge =
    R"({"prompt":")" + std::string(max_submission_bytes, 'x') + "\"}";
  auto large = read_submission(huge, "", 1);
  REQUIRE_FALSE(large);
  CHECK(large.error().what.find("bytes") != std::string::npos);
}

TEST_CASE("the node's answer decides a message's fate") {
  using tasksup::make_error;
  using tasksup::protocol_error;
  CHECK(verdict_for(caf::error{}) == intake_verdict::ack);
  CHECK(verdict_for(make_error(protocol_error::duplicate_task, "x")) ==
        intake_verdict::ack);
  CHECK(verdict_for(make_error(protocol_error::invalid_task, "x")) ==
        intake_verdict::poison);
  CHECK(verdict_for(make_error(protocol_error::unknown_runtime, "x")) ==
        intake_verdict::poison);
  CHECK(verdict_for(make_error(protocol_error::journal_failed, "x")) ==
        intake_verdict::retry);
  CHECK(verdict_for(make_error(protocol_error::not_leader, "x")) ==
        intake_verdict::retry);
  // No answer in time: the node may take it later.
  CHECK(verdict_for(caf::make_error(caf::sec::request_timeout)) ==
        intake_verdict::retry);
}

TEST_CASE("event subjects keep a task id's dots but never an empty token") {
  CHECK(event_subject("tasksup.events", "fix-7") == "tasksup.events.fix-7");
  CHECK(event_subject("tasksup.events", "wf.code.2") ==
        "tasksup.events.wf.code.2");
  CHECK(event_subject("e", ".a..b.") == "e._a_.b_");
}

TEST_CASE("NATS subject patterns") {
  CHECK(subject_matches("tasksup.submit", "tasksup.submit"));
  CHECK_FALSE(subject_matches("tasksup.submit", "tasksup.submit.x"));
  CHECK_FALSE(subject_matches("tasksup.submit.x", "tasksup.submit"));
  CHECK(subject_matches("tasksup.*", "tasksup.submit"));
  CHECK_FALSE(subject_matches("tasksup.*", "tasksup.submit.x"));
  CHECK(subject_matches("tasksup.>", "tasksup.submit.x"));
  CHECK_FALSE(subject_matches("tasksup.>", "tasksup"));
  CHECK(subject_matches(">", "a"));
}

TEST_CASE("a cluster's NATS URLs, split and trimmed") {
  CHECK(split_nats_urls("nats://a:1") ==
        std::vector<std::string>{"nats://a:1"});
  CHECK(split_nats_urls(" nats://a:1 ,\tnats://b:2,, ") ==
        std::vector<std::string>{"nats://a:1", "nats://b:2"});
  CHECK(split_nats_urls("").empty());
}

TEST_CASE("NATS URLs lose their passwords in the log") {
  CHECK(redact_nats_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222");
  CHECK(redact_nats_url("nats://me:secret@h:1,nats://h2:2") ==
        "nats://me:***@h:1,nats://h2:2");
  CHECK(redact_nats_url("nats://token@h:1") == "nats://token@h:1");
}

TEST_CASE("an event is published as a CloudEvents document around its JSON") {
  tasksup::event_head h{"fix-7", 2, "0123456789abcdef0123456789abcdef",
                        "0123456789abcdef", 1795362464.25};
  auto ev = tasksup::attempt_started_event(h, "claude", "claude", "4242");
  auto doc = parsed(cloud_event(ev, "abc-1", "tasksup://127.0.0.1:7420"));
  CHECK(doc.at("specversion") == "1.0");
  CHECK(doc.at("id") == "abc-1");
  CHECK(doc.at("source") == "tasksup://127.0.0.1:7420");
  CHECK(doc.at("type") == "dev.tasksup.attempt_started");
  CHECK(doc.at("subject") == "fix-7");
  CHECK(doc.at("time") == "2026-11-22T15:47:44.250Z");
  CHECK(doc.at("datacontenttype") == "application/json");
  auto& data = doc.at("data").as_object();
  CHECK(data.at("event") == "attempt_started");
  CHECK(data.at("task_id") == "fix-7");
  CHECK(data.at("attempt") == 2);
  CHECK(data.at("agent_id") == "claude");
}

TEST_CASE("RFC 3339 times round to milliseconds") {
  CHECK(rfc3339_utc(0) == "1970-01-01T00:00:00.000Z");
  CHECK(rfc3339_utc(59.9996) == "1970-01-01T00:01:00.000Z");
}

TEST_CASE("a JetStream message's stream sequence, from its ack subject") {
  CHECK(stream_seq_of_reply(
          "$JS.ACK.TASKSUP.tasksup.1.42.7.1700000000000000000.3") == 42);
  CHECK(stream_seq_of_reply("$JS.ACK.hub.ACCHASH.TASKSUP.tasksup.2.43.8."
                            "1700000000000000000.0.r4nd") == 43);
  CHECK(stream_seq_of_reply(
          "$JS.ACK.hub.ACCHASH.TASKSUP.tasksup.2.43.8.17.0") == 43);
  CHECK(stream_seq_of_reply("_INBOX.abc") == 0);
  CHECK(stream_seq_of_reply("$JS.ACK.S.c.1.x.7.17.0") == 0);
  CHECK(stream_seq_of_reply("$JS.ACK.S.c.1.2") == 0);
  CHECK(stream_seq_of_reply("") == 0);
}

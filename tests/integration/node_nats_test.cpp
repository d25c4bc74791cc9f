// A node taking tasks from a real NATS JetStream server (nats-server -js on
// loopback) and publishing its events there: message ids and task ids keep
// a message from making two tasks, an invalid message is terminated, a full
// node leaves submissions in the stream, and a node killed with SIGKILL in
// the middle of 10,000 submissions makes each exactly one task that runs
// once.

#include "nats_server.hpp"
#include "process_node.hpp"
#include "tasksup_child.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup::test;
using namespace std::chrono_literals;

namespace {

/// The lines of `path` (one task id per run).
std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  auto text = slurp(path);
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos;
       at = nl + 1)
    out.push_back(text.substr(at, nl - at));
  return out;
}

/// The serve arguments of a process node whose agent appends its task's id
/// to DIR/ran.txt once DIR/go exists (at once with `wait_for_go` false),
/// taking submissions from `url`.
std::vector<std::string> nats_node(const scratch& dir, const std::string& url,
                                   bool wait_for_go,
                                   const std::string& extra = {}) {
  std::string script = "#!/bin/sh\n";
  if (wait_for_go)
    script += "while [ ! -e '" + dir / "go" + "' ]; do sleep 0.05; done\n";
  script += "echo \"$TASKSUP_TASK_ID\" >> '" + dir / "ran.txt" + "'\n";
  auto serve = process_node(dir, script, extra);
  serve.insert(serve.end(), {"--nats", url, "--nats-ack-wait", "2"});
  return serve;
}

/// Published documents by subject, parsed.
std::map<std::string, std::vector<boost::json::object>>
documents_by_subject(const nats_client& client) {
  std::map<std::string, std::vector<boost::json::object>> out;
  for (auto& [subject, data] : client.received()) {
    boost::system::error_code ec;
    auto doc = boost::json::parse(data, ec);
    if (!ec && doc.is_object())
      out[subject].push_back(doc.get_object());
  }
  return out;
}

/// Whether the consumer has nothing left: every message acked or
/// terminated, none to deliver again.
bool drained(nats_client& client) {
  auto p = client.consumer_pending("TASKSUP", "tasksup");
  return p && p->first == 0 && p->second == 0;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("a node takes tasks from a NATS JetStream stream: one task per "
          "message id or task id, invalid messages terminated, every event "
          "published as a CloudEvents document") {
  scratch dir;
  nats_server server{dir};
  nats_client client{server.url()};
  client.collect("tasksup.events.>");
  auto node = std::make_unique<tasksup_child>(
    dir, "node-0", nats_node(dir, server.url(), false));
  auto port = listening_port(*node);
  REQUIRE(port);
  auto address = "127.0.0.1:" + std::to_string(*port);
  // The node made the stream before it said it listens.
  client.publish("tasksup.submit", R"({"prompt": "one"})", "job-1");
  // The same message id again: the stream drops it.
  CHECK(client.publish("tasksup.submit", R"({"prompt": "one"})", "job-1"));
  // Another message for the same task id: the node makes no second task.
  CHECK_FALSE(client.publish(
    "tasksup.submit", R"({"id": "job-1", "prompt": "again"})", "job-1-again"));
  // No ids at all: the task is named by its place in the stream (3rd).
  client.publish("tasksup.submit", R"({"prompt": "two"})");
  // Poison: not JSON, and not a valid task.
  client.publish("tasksup.submit", "{\"prompt\": ", "bad-json");
  client.publish("tasksup.submit", R"({"prompt": "x", "agents": 5})",
                 "bad-task");

  REQUIRE(eventually(
    [&] { return lines_of(dir / "ran.txt").size() >= 2 && drained(client); },
    30s));
  auto ran = lines_of(dir / "ran.txt");
  CHECK(std::multiset<std::string>(ran.begin(), ran.end()) ==
        std::multiset<std::string>{"job-1", "nats-3"});
  CHECK(text_at(status_of(dir, address, "job-1"), "state") == "done");
  CHECK(status_of(dir, address, "bad-task").empty());
  // Each poison message is terminated once, never handed out again (the
  // consumer has nothing pending or unacked) and its reason logged.
  auto log = node->err();
  CHECK(count_of(log, "message 4 on 'tasksup.submit' terminated: "
                      "submission: invalid JSON at line 1") == 1);
  CHECK(count_of(log, "task 'bad-task' terminated:") == 1);

  // job-1's events, in order, each in its envelope on its own subject,
  // up to its end (escalated to the node after task_done).
  REQUIRE(eventually(
    [&] {
      auto docs = documents_by_subject(client)["tasksup.events.job-1"];
      return !docs.empty() &&
             text_at(docs.back(), "type") == "dev.tasksup.escalated";
    },
    10s));
  auto docs = documents_by_subject(client)["tasksup.events.job-1"];
  REQUIRE(docs.size() >= 2);
  CHECK(text_at(docs.front(), "type") == "dev.tasksup.task_submitted");
  std::set<std::string> ids;
  for (auto& d : docs) {
    CHECK(text_at(d, "specversion") == "1.0");
    CHECK(text_at(d, "subject") == "job-1");
    CHECK(text_at(d, "source") == "tasksup://" + address);
    CHECK(text_at(d, "datacontenttype") == "application/json");
    CHECK(d.at("data").at("task_id") == "job-1");
    CHECK("dev.tasksup." + text_at(d.at("data").as_object(), "event") ==
          text_at(d, "type"));
    ids.insert(text_at(d, "id"));
  }
  CHECK(ids.size() == docs.size());
  CHECK(text_at(docs[docs.size() - 2], "type") == "dev.tasksup.task_done");
  CHECK(docs[docs.size() - 2].at("data").at("outcome") == "succeeded");
  CHECK(documents_by_subject(client).count("tasksup.events.nats-3") == 1);
}

TEST_CASE("a node with --nats-max-backlog unfinished tasks takes no more "
          "from the stream until some end") {
  scratch dir;
  nats_server server{dir};
  nats_client client{server.url()};
  client.collect("tasksup.events.>");
  auto serve = nats_node(dir, server.url(), true);
  serve.insert(serve.end(), {"--nats-max-backlog", "2"});
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  REQUIRE(listening_port(*node));
  for (int i = 1; i <= 5; ++i)
    client.publish("tasksup.submit", R"({"prompt": "wait"})",
                   "q-" + std::to_string(i));
  // Two tasks start; the three other messages stay in the stream.
  auto started = [&] {
    std::size_t n = 0;
    for (auto& [subject, docs] : documents_by_subject(client))
      for (auto& d : docs)
        n += text_at(d, "type") == "dev.tasksup.attempt_started";
    return n;
  };
  REQUIRE(eventually([&] { return started() == 2; }, 30s));
  auto pending = client.consumer_pending("TASKSUP", "tasksup");
  REQUIRE(pending);
  CHECK(pending->first + static_cast<std::uint64_t>(pending->second) == 3);
  CHECK(documents_by_subject(client).size() == 2);
  // Once they may end, every message becomes a task.
  dir.write("go", "");
  REQUIRE(eventually(
    [&] { return lines_of(dir / "ran.txt").size() == 5 && drained(client); },
    60s));
  auto ran = lines_of(dir / "ran.txt");
  CHECK(std::set<std::string>(ran.begin(), ran.end()) ==
        std::set<std::string>{"q-1", "q-2", "q-3", "q-4", "q-5"});
}

TEST_CASE("kill -9 of a node taking a stream of 10,000 submissions: every "
          "message becomes exactly one task, and every task runs once",
          "[heavy]") {
  constexpr int total = 10000;
  scratch dir;
  nats_server server{dir};
  nats_client client{server.url()};
  auto serve = nats_node(dir, server.url(), false, R"("max_concurrent": 16)");
  auto publish = [&](int from, int to) {
    for (int i = from; i < to; ++i)
      client.publish_async("tasksup.submit", R"({"prompt": "n"})",
                           "m-" + std::to_string(i));
    client.flush();
  };
  // The node makes the stream.
  auto node = std::make_unique<tasksup_child>(dir, "node-0", serve);
  REQUIRE(listening_port(*node));
  publish(0, total / 2);
  REQUIRE(
    eventually([&] { return lines_of(dir / "ran.txt").size() >= 1000; }, 120s));
  publish(total / 2, total * 3 / 4);
  // Killed while tasks run, messages are in flight and more arrive.
  auto node_0_log = node->err();
  REQUIRE(kill_and_restart(dir, node, "node-1", serve));
  publish(total * 3 / 4, total);
  auto all_ran = eventually(
    [&] {
      return lines_of(dir / "ran.txt").size() >= total && drained(client);
    },
    240s);
  if (!all_ran) {
    auto err = node->err();
    auto p = client.consumer_pending("TASKSUP", "tasksup");
    // What went wrong first: the warnings and errors of both nodes, before
    // their consequences fill the tail.
    std::string first;
    for (auto* log : {&node_0_log, &err}) {
      std::istringstream in{*log};
      int shown = 0;
      for (std::string line; std::getline(in, line) && shown < 40;)
        if ((line.find(" warning: ") != std::string::npos ||
             line.find(" error: ") != std::string::npos ||
             line.find("retry") != std::string::npos ||
             line.find("failed") != std::string::npos ||
             line.find("breaker") != std::string::npos) &&
            line.find("no agent left in the chain") == std::string::npos) {
          first += line + "\n";
          ++shown;
        }
    }
    INFO("ran " << lines_of(dir / "ran.txt").size() << ", pending "
                << (p ? p->first : 0) << "/" << (p ? p->second : 0) << "\n"
                << first << "...\n"
                << err.substr(err.size() > 4000 ? err.size() - 4000 : 0));
    REQUIRE(all_ran);
  }
  auto ran = lines_of(dir / "ran.txt");
  CHECK(ran.size() == total);
  std::set<std::string> distinct(ran.begin(), ran.end());
  CHECK(distinct.size() == total);
  for (int i = 0; i < total; i += 997)
    CHECK(distinct.count("m-" + std::to_string(i)) == 1);
}

// The webhooks' ledger (apps/node/metrics/webhook_ledger.cpp): which
// deliveries a node remembers and for how long, which reports wait for
// their task, and what survives a restart (its bytes read back). With the
// journal and the reporter it is tested end to end in
// tests/integration/http_dashboard_test.cpp.

#include "webhook_ledger.hpp"

#include <boost/json/parse.hpp>

#include <catch2/catch.hpp>

using namespace tasksup;
using namespace tasksup::app;

namespace {

/// A report to a command and a URL, for failures only.
pending_report failure_report(const std::string& issue) {
  pending_report r;
  r.report.command = {"report.sh", issue, "{{task.outcome}}"};
  r.report.url = "http://127.0.0.1:9000/results";
  r.report.on = {"failed"};
  r.context = boost::json::object{{"trigger", "issues"},
                                  {"delivery", "d-" + issue},
                                  {"issue_number", std::stoi(issue)}};
  return r;
}

struct warnings {
  std::vector<std::string> lines;
  webhook_ledger::log_fn fn() {
    return [this](const std::string& x) { lines.push_back(x); };
  }
};

} // namespace

TEST_CASE("webhook ledger: a delivery is remembered once handled, for a "
          "while and up to a number") {
  warnings w;
  webhook_ledger_limits limits;
  limits.max_deliveries = 3;
  limits.delivery_memory_s = 100;
  webhook_ledger ledger{{}, "", w.fn(), limits};
  CHECK_FALSE(ledger.seen("d-1"));
  bool wrote = false;
  // Without a journal there is nothing to write: the caller answers now.
  CHECK_FALSE(ledger.record("d-1", 1000, [&](auto&, auto) { wrote = true; }));
  CHECK_FALSE(wrote);
  CHECK(ledger.seen("d-1") == 1000);
  ledger.record("d-2", 1010, [](auto&, auto) {});
  ledger.record("d-3", 1020, [](auto&, auto) {});
  ledger.record("d-4", 1030, [](auto&, auto) {});
  // Three at most: the oldest went.
  CHECK(ledger.deliveries() == 3);
  CHECK_FALSE(ledger.seen("d-1"));
  CHECK(ledger.seen("d-2"));
  // More than 100 s after d-2 and d-3 were handled, they are forgotten.
  ledger.record("d-5", 1125, [](auto&, auto) {});
  CHECK_FALSE(ledger.seen("d-2"));
  CHECK_FALSE(ledger.seen("d-3"));
  CHECK(ledger.seen("d-4"));
  CHECK(ledger.seen("d-5"));
  CHECK(w.lines.empty());
}

TEST_CASE("webhook ledger: a report waits for its task, goes out for the "
          "outcomes named, and is dropped once every delivery of it ended") {
  warnings w;
  webhook_ledger ledger{{}, "", w.fn()};
  REQUIRE(ledger.add_report("gh-octo-webapp-7", failure_report("7")));
  // One report per task: a second delivery about it adds none.
  CHECK_FALSE(ledger.add_report("gh-octo-webapp-7", failure_report("7")));
  REQUIRE(ledger.add_report("gh-octo-webapp-8", failure_report("8")));
  CHECK(ledger.waiting() ==
        std::vector<std::string>{"gh-octo-webapp-7", "gh-octo-webapp-8"});
  // Another task's end, or an outcome not named: nothing goes out; the
  // latter drops the report.
  CHECK_FALSE(ledger.take("other", "failed"));
  CHECK_FALSE(ledger.take("gh-octo-webapp-8", "succeeded"));
  CHECK(ledger.reports() == 1);
  auto r = ledger.take("gh-octo-webapp-7", "failed");
  REQUIRE(r);
  CHECK(r->report.command[2] == "{{task.outcome}}");
  CHECK(r->context.at("issue_number") == 7);
  // Handed out: not again, and not waiting.
  CHECK_FALSE(ledger.take("gh-octo-webapp-7", "failed"));
  CHECK(ledger.waiting().empty());
  // The command's delivery ended; the URL's is still under way.
  ledger.settled("gh-octo-webapp-7");
  CHECK(ledger.reports() == 1);
  ledger.settled("gh-octo-webapp-7");
  CHECK(ledger.reports() == 0);
  // A refused start takes its report back.
  REQUIRE(ledger.add_report("gh-octo-webapp-9", failure_report("9")));
  ledger.withdraw("gh-octo-webapp-9");
  CHECK(ledger.reports() == 0);
}

TEST_CASE("webhook ledger: full, a task starts without a report, saying "
          "so") {
  warnings w;
  webhook_ledger_limits limits;
  limits.max_reports = 1;
  webhook_ledger ledger{{}, "", w.fn(), limits};
  REQUIRE(ledger.add_report("a", failure_report("1")));
  CHECK_FALSE(ledger.add_report("b", failure_report("2")));
  REQUIRE(w.lines.size() == 1);
  CHECK(w.lines[0] ==
        "webhooks: 1 reports wait already; task 'b' starts without one");
}

TEST_CASE("webhook ledger: what it remembers survives a restart, a report "
          "handed out but not delivered waits again") {
  warnings w;
  std::string saved;
  {
    webhook_ledger ledger{{}, "", w.fn()};
    ledger.record("d-1", 1000, [](auto&, auto) {});
    REQUIRE(ledger.add_report("t-7", failure_report("7")));
    REQUIRE(ledger.add_report("t-8", failure_report("8")));
    REQUIRE(ledger.take("t-8", "failed"));
    saved = ledger.serialize();
  }
  webhook_ledger again{{}, saved, w.fn()};
  CHECK(again.seen("d-1") == 1000);
  CHECK(again.waiting() == std::vector<std::string>{"t-7", "t-8"});
  auto r = again.take("t-7", "failed");
  REQUIRE(r);
  CHECK(r->report.command ==
        std::vector<std::string>{"report.sh", "7", "{{task.outcome}}"});
  CHECK(r->report.url == "http://127.0.0.1:9000/results");
  CHECK(r->report.on == std::vector<std::string>{"failed"});
  CHECK(r->context == failure_report("7").context);
  CHECK(w.lines.empty());
}

TEST_CASE("webhook ledger: saved bytes it cannot read are dropped, each "
          "with a warning") {
  warnings w;
  webhook_ledger broken{{}, "{not json", w.fn()};
  CHECK(broken.deliveries() == 0);
  REQUIRE(w.lines.size() == 1);
  CHECK(w.lines[0] == "webhooks: the journal's record of deliveries and "
                      "reports cannot be read; starting without it");
  w.lines.clear();
  webhook_ledger partly{{},
                        R"({"deliveries": {"d-1": 5, "bad id!": 6, "d-2": "x"},
        "reports": {"t-1": {"url": "http://x/", "on": ["failed"],
                            "context": {}},
                    "t-2": {"on": ["failed"], "context": {}},
                    "t-3": {"command": [1], "on": [], "context": {}}}})",
                        w.fn()};
  CHECK(partly.deliveries() == 1);
  CHECK(partly.seen("d-1") == 5);
  CHECK(partly.waiting() == std::vector<std::string>{"t-1"});
  CHECK(w.lines == std::vector<std::string>{
                     "webhooks: a delivery record cannot be read; dropped",
                     "webhooks: a delivery record cannot be read; dropped",
                     "webhooks: the report for task 't-2' cannot be read; it "
                     "will not be sent",
                     "webhooks: the report for task 't-3' cannot be read; it "
                     "will not be sent"});
}

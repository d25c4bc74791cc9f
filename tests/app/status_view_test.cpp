#include "status_view.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

using namespace tasksup::app;

namespace {

/// What `print_status` writes to stdout.
std::string printed(const status_answer& a, bool single, bool json,
                    const std::set<std::string>& states = {},
                    const std::set<std::string>& outcomes = {}) {
  std::ostringstream out;
  auto* old = std::cout.rdbuf(out.rdbuf());
  print_status(a, single, json, status_filter{states, outcomes, {}});
  std::cout.rdbuf(old);
  return out.str();
}

status_row row(const std::string& id, const std::string& state,
               double submitted) {
  return status_row{boost::json::object{{"task_id", id},
                                        {"state", state},
                                        {"agent_id", "a"},
                                        {"attempt", 2},
                                        {"retry_count", 1},
                                        {"max_retries", 3},
                                        {"node", ""},
                                        {"waiting_for", ""},
                                        {"submitted_ts", submitted},
                                        {"next_retry_ts", nullptr},
                                        {"finished_ts", nullptr},
                                        {"result", nullptr}},
                    "retry 1/3"};
}

} // namespace

TEST_CASE("status_view: the control socket's answer reads back as written") {
  status_answer a;
  a.now = 1000.5;
  a.rows.push_back(row("x", "running", 990));
  a.rows.push_back(row("y\x1b", "backoff", 400));
  auto back = parse_status_answer(status_answer_json(a));
  REQUIRE(back);
  CHECK(back->now == 1000.5);
  REQUIRE(back->rows.size() == 2);
  CHECK(back->rows[1].record == a.rows[1].record);
  CHECK(back->rows[0].last_decision == "retry 1/3");
  // The same answer prints the same whichever way it came.
  CHECK(printed(*back, false, false) == printed(a, false, false));
  CHECK(printed(*back, true, true) == printed(a, true, true));
}

TEST_CASE("status_view: an answer that is not a status is refused") {
  CHECK_FALSE(parse_status_answer(""));
  CHECK_FALSE(parse_status_answer("[1,2]"));
  CHECK_FALSE(parse_status_answer(R"({"now":1})"));
  CHECK_FALSE(parse_status_answer(R"({"now":1,"tasks":[1]})"));
  CHECK_FALSE(parse_status_answer(R"({"now":1,"tasks":[{"record":2}]})"));
  CHECK(parse_status_answer(R"({"now":1,"tasks":[]})"));
}

TEST_CASE("status_view: the table, the filter and the control characters") {
  status_answer a;
  a.now = 1000;
  a.rows.push_back(row("x", "running", 990));
  a.rows.push_back(row("y\x1b", "backoff", 400));
  auto table = printed(a, false, false);
  CHECK(table.rfind("TASK", 0) == 0);
  CHECK(table.find("10s") != std::string::npos); // age of x
  CHECK(table.find("10m") != std::string::npos); // age of y
  CHECK(table.find("1/3") != std::string::npos);
  CHECK(table.find('\x1b') == std::string::npos); // a cell is made safe
  CHECK(printed(a, false, false, {"done"}) == "no tasks in that state\n");
  CHECK(printed(a, false, true, {"running"}).find("\"y") == std::string::npos);
  CHECK(printed(status_answer{}, false, false) == "no tasks\n");
  auto one = printed(a, true, false);
  CHECK(one.find("last decision: retry 1/3") != std::string::npos);
  CHECK(one.find("submitted:     1970-01-01T00:16:30Z") != std::string::npos);
}

TEST_CASE("status_view: a permanent task waiting to restart is not shown "
          "as retrying") {
  status_answer a;
  a.now = 1000;
  auto r = row("p", "backoff", 990);
  r.record["next_retry_ts"] = 1005.0;
  r.last_decision = "restarting (2) a after exit 0, in 5s (schedule)";
  a.rows.push_back(r);
  auto table = printed(a, false, false);
  CHECK(table.find("restart in 5s") != std::string::npos);
  auto one = printed(a, true, false);
  CHECK(one.find("next restart:") != std::string::npos);
  CHECK(one.find("next retry:") == std::string::npos);
  CHECK(one.find("last decision: restarting (2)") != std::string::npos);
}

TEST_CASE("status_view: a task waiting for its quota shows when it resets") {
  status_answer a;
  a.now = 1000;
  auto r = row("q", "quota_wait", 990);
  r.record["resume_ts"] = 1000.0 + 7980;
  r.record["waiting_for"] = "quota reset of claude at 03:13 (in 2h13m)";
  a.rows.push_back(r);
  auto table = printed(a, false, false);
  CHECK(table.find("quota reset in 2h") != std::string::npos);
  CHECK(table.find("q waits: quota reset of claude at 03:13 (in 2h13m)") !=
        std::string::npos);
  auto one = printed(a, true, false);
  CHECK(one.find("quota reset:   1970-01-01T02:29:40Z (at ") !=
        std::string::npos);
  CHECK(one.find("(in 2h13m))") != std::string::npos);
}

TEST_CASE("status_view: a task whose preflight said not now shows when it "
          "tries again") {
  status_answer a;
  a.now = 1000;
  auto r = row("n", "not_now", 990);
  r.record["resume_ts"] = 1000.0 + 60;
  r.record["waiting_for"] = "not now: trying again at 00:17 (in 1m)";
  a.rows.push_back(r);
  auto table = printed(a, false, false);
  CHECK(table.find("not now, in 1m") != std::string::npos);
  CHECK(table.find("n waits: not now: trying again at 00:17 (in 1m)") !=
        std::string::npos);
  auto one = printed(a, true, false);
  CHECK(one.find("tries again:   1970-01-01T00:17:40Z (at ") !=
        std::string::npos);
  std::set<std::string> states;
  CHECK_FALSE(parse_state_filter({"not_now"}, states));
  CHECK(printed(a, false, false, {"not_now"}).find("n ") != std::string::npos);
}

TEST_CASE("status_view: --state takes states, repeated or comma-separated") {
  std::set<std::string> states;
  CHECK_FALSE(parse_state_filter({"running,backoff", "done"}, states));
  CHECK(states == std::set<std::string>{"running", "backoff", "done"});
  std::set<std::string> bad;
  auto err = parse_state_filter({"running,sleeping"}, bad);
  REQUIRE(err);
  CHECK(*err == "--state: expected queued, running, backoff, paused, "
                "quota_wait, not_now or done; got 'sleeping'");
  std::set<std::string> parked;
  CHECK_FALSE(parse_state_filter({"paused,quota_wait"}, parked));
  CHECK(parked == std::set<std::string>{"paused", "quota_wait"});
}

TEST_CASE("status_view: --outcome lists finished tasks by outcome, with "
          "--state") {
  status_answer a;
  a.now = 1000;
  auto ok = row("ok", "done", 900);
  ok.record["result"] = boost::json::object{{"outcome", "succeeded"}};
  auto bad = row("bad", "done", 900);
  bad.record["result"] =
    boost::json::object{{"outcome", "failed"}, {"exit_code", 2}};
  a.rows.push_back(ok);
  a.rows.push_back(bad);
  a.rows.push_back(row("busy", "running", 990));
  auto failed = printed(a, false, false, {}, {"failed"});
  CHECK(failed.find("bad") != std::string::npos);
  CHECK(failed.find("failed (exit 2)") != std::string::npos);
  CHECK(failed.find("ok ") == std::string::npos);
  CHECK(failed.find("busy") == std::string::npos); // no outcome yet
  auto either = printed(a, false, false, {"done"}, {"failed", "succeeded"});
  CHECK(either.find("bad") != std::string::npos);
  CHECK(either.find("ok ") != std::string::npos);
  CHECK(printed(a, false, false, {"running"}, {"failed"}) ==
        "no tasks match the filter\n");
  CHECK(printed(a, false, false, {}, {"stopped"}) ==
        "no tasks match the filter\n");
}

TEST_CASE("status_view: --outcome takes the outcome names and lists them "
          "when given another") {
  std::set<std::string> outcomes;
  CHECK_FALSE(parse_outcome_filter({"failed,stopped", "succeeded"}, outcomes));
  CHECK(outcomes == std::set<std::string>{"failed", "stopped", "succeeded"});
  std::set<std::string> bad;
  auto err = parse_outcome_filter({"failed,crashed"}, bad);
  REQUIRE(err);
  CHECK(*err == "--outcome: expected succeeded, failed or stopped; got "
                "'crashed'");
}

TEST_CASE("status_view: a page's counts travel, and the line under it names "
          "the next page (on stderr with --json, one record per line)") {
  status_answer a;
  a.now = 1000;
  a.rows.push_back(row("t1", "running", 990));
  a.rows.push_back(row("t2", "done", 900));
  a.paging = status_paging{10, 7, 5};
  auto back = parse_status_answer(status_answer_json(a));
  REQUIRE(back);
  REQUIRE(back->paging);
  CHECK(back->paging->total == 10);
  CHECK(back->paging->matched == 7);
  CHECK(back->paging->more == 5);
  // A full listing (a node before pages) has none.
  CHECK_FALSE(parse_status_answer(R"({"now":1,"tasks":[]})")->paging);

  std::ostringstream out;
  std::ostringstream err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  print_status(a, false, false, {}, "tasksup status --limit 2");
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  CHECK_THAT(out.str(), Catch::EndsWith("\n\n2 of 7 matching tasks; 5 more: "
                                        "tasksup status --limit 2 --after "
                                        "t2\n"));
  CHECK(err.str().empty());

  out.str("");
  old_out = std::cout.rdbuf(out.rdbuf());
  old_err = std::cerr.rdbuf(err.rdbuf());
  print_status(a, false, true, {}, "tasksup status --limit 2");
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  auto text = out.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  CHECK(text.rfind("{\"task_id\":\"t1\"", 0) == 0);
  CHECK(text.find("\n{\"task_id\":\"t2\"") != std::string::npos);
  CHECK(err.str() ==
        "2 of 7 matching tasks; 5 more: tasksup status --limit 2 --after t2\n");
  // The last page says nothing more.
  a.paging->more = 0;
  CHECK(printed(a, false, false).find("more:") == std::string::npos);
}

TEST_CASE("status_view: page options are checked, and the socket's query and "
          "the next page's command say what was asked") {
  status_page_options p;
  CHECK_FALSE(check_page_options(p));
  p.limit = max_status_limit + 1;
  CHECK(check_page_options(p) ==
        "--limit: at most " + std::to_string(max_status_limit));
  p.limit = 50;
  p.after = std::string(65, 'x');
  CHECK(check_page_options(p) == "--after: a task id (at most 64 bytes)");
  p.after = "t 1/2";
  status_filter f{{"running", "backoff"}, {}, "claude"};
  CHECK_FALSE(check_agent_filter("claude"));
  CHECK(check_agent_filter(std::string(65, 'a')) ==
        "--agent: an agent id (at most 64 bytes)");
  CHECK(status_query_string(p, f) ==
        "limit=50&after=t%201%2F2&agent=claude&state=backoff%2Crunning");
  CHECK(next_page_command(p, f) ==
        "tasksup status --limit 50 --state backoff,running --agent claude");
  CHECK(status_query_string({}, {}).empty());
}

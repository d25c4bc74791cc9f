// Figures folded from events: the Prometheus text, per-agent statistics and
// the suggested fallback order, the task times the dashboard shows.

#include "tasksup/actors/node_stats.hpp"

#include "tasksup/actors/events.hpp"

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

/// Emits the events of one task the way a supervisor does.
class task_script {
public:
  /// With `read_back`, every event reaches the figures as the journal
  /// hands it back: its JSON alone, no typed keys.
  task_script(node_stats& stats, std::string id, double t0,
              bool read_back = false)
    : stats_(stats), id_(std::move(id)), now_(t0), read_back_(read_back) {
    add(task_submitted_event(head(), "env", {"a", "b"}));
  }

  /// One attempt of `agent` that runs `secs` and exits `code`; a failure is
  /// classified as `cls` with `line`.
  void attempt(const std::string& agent, double secs, int code,
               error_class cls = error_class::retryable,
               const std::string& line = "boom") {
    ++attempt_;
    add(attempt_started_event(head(), agent, "cli", "pid 1"));
    now_ += secs;
    attempt_outcome out;
    out.exit_code = code;
    out.duration_s = secs;
    add(attempt_exited_event(head(), out));
    if (code != 0) {
      classification c;
      c.cls = cls;
      c.rule = "rule-" + std::string{to_string(cls)};
      c.line = line;
      add(classified_event(head(), c));
    }
  }

  void retry(const std::string& agent, double delay) {
    delay_decision d;
    d.delay_s = delay;
    d.scheduled_s = delay;
    add(retry_scheduled_event(head(), 1, 3, agent, d, "retryable"));
    now_ += delay;
  }

  /// A permanent task's restart after exit 0 (its `n`th in the window)
  /// after a run of `ran` seconds.
  void restart(const std::string& agent, double delay, int n, double ran = 2,
               bool stable = false) {
    delay_decision d;
    d.delay_s = delay;
    d.scheduled_s = delay;
    add(
      retry_scheduled_event(head(), 0, 3, agent, d, "restart", n, ran, stable));
    now_ += delay;
  }

  void fallback(const std::string& from, const std::string& to) {
    add(agent_switched_event(head(), from, to, "exhausted"));
  }

  /// The user forces a fallback: the running attempt is stopped (143) and
  /// never classified.
  void forced_fallback(const std::string& from, const std::string& to) {
    ++attempt_;
    add(attempt_started_event(head(), from, "cli", "pid 1"));
    now_ += 1;
    attempt_outcome out;
    out.exit_code = 143;
    out.duration_s = 1;
    add(attempt_exited_event(head(), out));
    add(agent_switched_event(head(), from, to,
                             "fallback forced by user; switching to agent 2 "
                             "of 2",
                             "user"));
  }

  /// The task parks until the quota of `account` resets.
  void quota_wait(const std::string& account) {
    add(step_event(head(), "quota_wait", account, false, std::nullopt,
                   "quota_exhausted failure (rule \"quota\"): waiting for "
                   "quota reset at 15:00 (in 2h00m)"));
  }

  void done(task_outcome outcome, int code = 0) {
    task_result r;
    r.task_id = id_;
    r.outcome = outcome;
    r.exit_code = code;
    if (outcome != task_outcome::succeeded)
      r.error = "gave up";
    add(task_done_event(head(), r));
    add(escalated_event(head(), outcome, "registry"));
  }

  double now() const { return now_; }

  /// A user's stop.
  void stop(stop_mode mode) { add(user_stop_event(head(), mode, "requested")); }

private:
  void add(event ev) {
    if (read_back_)
      ev.body = json_event_body(ev.trace_id(), ev.span_id(), ev.json());
    stats_.add(ev);
  }

  event_head head() {
    event_head h;
    h.task_id = id_;
    h.attempt = attempt_;
    h.trace_id = "0123456789abcdef0123456789abcdef";
    h.span_id = "0123456789abcdef";
    h.ts = now_;
    return h;
  }

  node_stats& stats_;
  std::string id_;
  double now_;
  int attempt_ = 0;
  bool read_back_ = false;
};

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos ||
         text.rfind(line + "\n", 0) == 0;
}

} // namespace

TEST_CASE("attempts are counted by agent, class and the decision after them") {
  node_stats stats;
  task_script t{stats, "t1", 1000};
  t.attempt("a", 2, 1);
  t.retry("a", 5);
  t.attempt("a", 3, 1, error_class::rate_limit, "429 too many");
  t.fallback("a", "b");
  t.attempt("b", 4, 0);
  t.done(task_outcome::succeeded);

  auto text = stats.prometheus({}, node_health{});
  CHECK(has_line(text, "tasksup_tasks_submitted_total 1"));
  CHECK(
    has_line(text, R"(tasksup_tasks_finished_total{outcome="succeeded"} 1)"));
  CHECK(has_line(
    text,
    R"(tasksup_attempts_total{agent="a",class="retryable",decision="retry"} 1)"));
  CHECK(has_line(
    text,
    R"(tasksup_attempts_total{agent="a",class="rate_limit",decision="fallback"} 1)"));
  CHECK(has_line(
    text,
    R"(tasksup_attempts_total{agent="b",class="none",decision="succeeded"} 1)"));
  CHECK(
    has_line(text, R"(tasksup_retries_total{agent="a",class="retryable"} 1)"));
  CHECK(has_line(text, R"(tasksup_fallbacks_total{from="a",to="b"} 1)"));
  CHECK(has_line(text, R"(tasksup_escalations_total{outcome="succeeded"} 1)"));
  // Durations: a ran 2 s and 3 s; buckets are cumulative.
  CHECK(has_line(
    text, R"(tasksup_attempt_duration_seconds_bucket{agent="a",le="1"} 0)"));
  CHECK(has_line(
    text, R"(tasksup_attempt_duration_seconds_bucket{agent="a",le="5"} 2)"));
  CHECK(has_line(
    text, R"(tasksup_attempt_duration_seconds_bucket{agent="a",le="+Inf"} 2)"));
  CHECK(has_line(text, R"(tasksup_attempt_duration_seconds_sum{agent="a"} 5)"));
  // Recovery: first failure ended at 1002, success at 1014.
  CHECK(has_line(text, R"(tasksup_time_to_recovery_seconds_count 1)"));
  CHECK(has_line(text, R"(tasksup_time_to_recovery_seconds_sum 12)"));
  CHECK(
    has_line(text, R"(tasksup_time_to_recovery_seconds_bucket{le="15"} 1)"));
  CHECK(has_line(text, R"(tasksup_time_to_recovery_seconds_bucket{le="5"} 0)"));
}

TEST_CASE("a fallback the user forces is the user's decision, not a failure "
          "of the agent") {
  for (bool read_back : {false, true}) {
    INFO("read back from the journal: " << read_back);
    node_stats stats;
    task_script t{stats, "t1", 1000, read_back};
    t.forced_fallback("a", "b");
    t.attempt("b", 4, 0);
    t.done(task_outcome::succeeded);
    auto text = stats.prometheus({}, node_health{});
    CHECK(has_line(
      text,
      R"(tasksup_attempts_total{agent="a",class="none",decision="user_fallback"} 1)"));
    CHECK(text.find(R"(class="unknown")") == std::string::npos);
    CHECK(has_line(text, R"(tasksup_fallbacks_total{from="a",to="b"} 1)"));
    auto agents = stats.agents(2000, 0, node_health{});
    REQUIRE(agents.size() == 2);
    CHECK(agents[0].agent_id == "a");
    CHECK(agents[0].failed == 0);
    CHECK(agents[0].stopped == 1);
    CHECK(agents[0].failure_classes.empty());
  }
}

TEST_CASE("a permanent task's restart after exit 0 is a restart, not a "
          "retry") {
  for (bool read_back : {false, true}) {
    INFO("read back from the journal: " << read_back);
    node_stats stats;
    task_script t{stats, "t1", 1000, read_back};
    t.attempt("a", 2, 0);
    t.restart("a", 5, 2);
    auto* times = stats.times("t1");
    REQUIRE(times != nullptr);
    CHECK(times->last_decision.rfind(
            "restarting (restart 2, ran 2s) a after exit 0, in 5", 0) == 0);
    t.attempt("a", 150, 0);
    t.restart("a", 1, 3, 150, true);
    times = stats.times("t1");
    REQUIRE(times != nullptr);
    CHECK(times->last_decision.rfind(
            "restarting (restart 3, ran 2m30s stably) a after exit 0", 0) == 0);
    auto text = stats.prometheus({}, node_health{});
    CHECK(has_line(
      text,
      R"(tasksup_attempts_total{agent="a",class="none",decision="restarted"} 2)"));
    CHECK(has_line(
      text, R"(tasksup_restarts_total{agent="a",cause="clean_exit"} 2)"));
    CHECK(text.find("tasksup_retries_total{") == std::string::npos);
  }
}

TEST_CASE("a quota wait is the decision on the attempt that hit the quota, "
          "not a retry, closed accounts and parked tasks are figures") {
  for (bool read_back : {false, true}) {
    INFO("read back from the journal: " << read_back);
    node_stats stats;
    task_script t{stats, "t1", 1000, read_back};
    t.attempt("a", 2, 1, error_class::quota_exhausted, "usage limit reached");
    t.quota_wait("a");
    auto* times = stats.times("t1");
    REQUIRE(times != nullptr);
    CHECK(times->last_decision.find("waiting for quota reset at 15:00") !=
          std::string::npos);
    std::vector<task_status> tasks(2);
    tasks[0].state = task_state::quota_wait;
    tasks[1].state = task_state::paused;
    node_health h;
    h.quotas = {{"a", 1.8e9}};
    auto text = stats.prometheus(tasks, h);
    CHECK(has_line(text,
                   R"(tasksup_attempts_total{agent="a",)"
                   R"(class="quota_exhausted",decision="quota_wait"} 1)"));
    CHECK(text.find("tasksup_retries_total{") == std::string::npos);
    CHECK(has_line(text, R"(tasksup_tasks{state="quota_wait"} 1)"));
    CHECK(has_line(text, R"(tasksup_tasks{state="paused"} 1)"));
    CHECK(has_line(
      text,
      R"(tasksup_account_quota_reset_timestamp_seconds{account="a"} 1800000000)"));
  }
}

TEST_CASE("task states, breakers, budget and slots come from the registry's "
          "figures") {
  node_stats stats;
  std::vector<task_status> tasks(3);
  tasks[0].state = task_state::running;
  tasks[1].state = task_state::backoff;
  tasks[2].state = task_state::backoff;
  node_health h;
  h.breakers = {{"a", breaker_state::open}, {"b", breaker_state::closed}};
  h.budget_limited = true;
  h.budget_tokens = 2.5;
  h.budget_capacity = 10;
  h.slots_in_use = 1;
  h.slot_limit = 4;
  h.queued = 0;
  auto text = stats.prometheus(tasks, h);
  CHECK(has_line(text, R"(tasksup_tasks{state="queued"} 0)"));
  CHECK(has_line(text, R"(tasksup_tasks{state="running"} 1)"));
  CHECK(has_line(text, R"(tasksup_tasks{state="backoff"} 2)"));
  CHECK(
    has_line(text, R"(tasksup_agent_breaker_state{agent="a",state="open"} 1)"));
  CHECK(has_line(text,
                 R"(tasksup_agent_breaker_state{agent="a",state="closed"} 0)"));
  CHECK(has_line(text, "tasksup_retry_budget_tokens 2.5"));
  CHECK(has_line(text, "tasksup_retry_budget_capacity 10"));
  CHECK(has_line(text, "tasksup_attempt_slots 4"));
  CHECK(has_line(text, "tasksup_attempt_slots_in_use 1"));
  CHECK(has_line(text, "tasksup_queue_length 0"));
  // An unlimited budget has no token figures.
  auto unlimited = stats.prometheus(tasks, node_health{});
  CHECK(has_line(unlimited, "tasksup_retry_budget_limited 0"));
  CHECK(unlimited.find("tasksup_retry_budget_tokens") == std::string::npos);
}

TEST_CASE("agent labels are bounded, label values are escaped") {
  node_stats::limits lim;
  lim.max_agent_labels = 2;
  node_stats stats{lim};
  for (auto agent : {"x", "y\"\\\n", "z", "w"}) {
    task_script t{stats, std::string{"t-"} + agent, 0};
    t.attempt(agent, 1, 0);
    t.done(task_outcome::succeeded);
  }
  auto text = stats.prometheus({}, node_health{});
  CHECK(has_line(
    text,
    R"(tasksup_attempts_total{agent="x",class="none",decision="succeeded"} 1)"));
  CHECK(has_line(
    text,
    R"(tasksup_attempts_total{agent="y\"\\\n",class="none",decision="succeeded"} 1)"));
  CHECK(has_line(
    text,
    R"(tasksup_attempts_total{agent="other",class="none",decision="succeeded"} 2)"));
  CHECK(text.find("agent=\"z\"") == std::string::npos);
  // No task id ever becomes a label.
  CHECK(text.find("t-x") == std::string::npos);
}

TEST_CASE("per-agent statistics over a window, and the fallback order with "
          "reasons") {
  node_stats stats;
  // good: 9 of 10 succeed, 10 s each; lucky: 1 of 1; bad: 1 of 4, breaker
  // open.
  for (int i = 0; i < 10; ++i) {
    task_script t{stats, "g" + std::to_string(i), 1000.0 + i * 100};
    t.attempt("good", 10, i == 0 ? 1 : 0);
    t.done(i == 0 ? task_outcome::failed : task_outcome::succeeded, 1);
  }
  {
    task_script t{stats, "l", 5000};
    t.attempt("lucky", 1, 0);
    t.done(task_outcome::succeeded);
  }
  for (int i = 0; i < 4; ++i) {
    task_script t{stats, "b" + std::to_string(i), 6000.0 + i * 100};
    t.attempt("bad", 20 + i, i == 3 ? 0 : 1, error_class::rate_limit,
              "HTTP 429 from provider");
    t.done(i == 3 ? task_outcome::succeeded : task_outcome::failed, 1);
  }
  node_health h;
  h.breakers = {{"bad", breaker_state::open}};
  auto all = stats.agents(7000, 0, h);
  REQUIRE(all.size() == 3);
  auto& bad = all[0];
  auto& good = all[1];
  REQUIRE(bad.agent_id == "bad");
  REQUIRE(good.agent_id == "good");
  CHECK(good.attempts == 10);
  CHECK(good.succeeded == 9);
  CHECK(good.success_rate == Approx(0.9));
  CHECK(good.median_duration_s == Approx(10));
  CHECK(bad.success_rate == Approx(0.25));
  CHECK(bad.failure_classes.at("rate_limit") == 3);
  REQUIRE(bad.last_failure);
  CHECK(bad.last_failure->line == "HTTP 429 from provider");
  CHECK(bad.last_failure->task_id == "b2");
  CHECK(bad.median_duration_s == Approx(21));
  CHECK(bad.p90_duration_s == Approx(23));
  CHECK(bad.breaker == breaker_state::open);

  auto order = node_stats::fallback_order(all);
  REQUIRE(order.size() == 3);
  CHECK(order[0].agent_id == "good");
  CHECK(order[1].agent_id == "lucky");
  CHECK(order[2].agent_id == "bad");
  CHECK(order[0].why.find("succeeded 9 of 10 (90%") != std::string::npos);
  CHECK(order[2].why.find("circuit breaker open") == 0);
  CHECK(order[2].why.find("mostly rate_limit") != std::string::npos);

  // A window that reaches back only over bad's attempts.
  auto recent = stats.agents(6400, 500, h);
  REQUIRE(recent.size() == 1);
  CHECK(recent[0].agent_id == "bad");

  auto doc = boost::json::parse(stats.agents_json(7000, 0, h));
  CHECK(doc.at("agents").as_array().size() == 3);
  CHECK(doc.at("fallback_order").at(0).at("agent_id").as_string() == "good");
}

TEST_CASE("user-stopped attempts are left out of the success rate") {
  node_stats stats;
  task_script t{stats, "s", 0};
  t.attempt("a", 5, 143, error_class::retryable);
  t.done(task_outcome::stopped, 143);
  auto all = stats.agents(10, 0, node_health{});
  REQUIRE(all.size() == 1);
  CHECK(all[0].stopped == 1);
  CHECK(all[0].failed == 0);
  CHECK(all[0].success_rate == 0);
}

TEST_CASE("task times: submitted, next retry while waiting, finished") {
  node_stats stats;
  task_script t{stats, "t", 100};
  t.attempt("a", 2, 1);
  delay_decision d;
  d.delay_s = 15;
  event_head h;
  h.task_id = "t";
  h.attempt = 1;
  h.ts = 103;
  stats.add(retry_scheduled_event(h, 1, 3, "a", d, "retryable"));
  auto* times = stats.times("t");
  REQUIRE(times);
  CHECK(times->submitted_ts == 100);
  CHECK(times->next_retry_ts == 118);
  CHECK(times->last_decision.find("retry 1/3 of a after retryable, in 15 s") ==
        0);

  task_status st;
  st.task_id = "t";
  st.state = task_state::backoff;
  auto list = boost::json::parse(stats.tasks_json({st}, 110));
  auto& row = list.at("tasks").at(0);
  CHECK(row.at("next_retry_ts").as_double() == 118);
  CHECK(row.at("submitted_ts").as_double() == 100);
  CHECK(row.at("finished_ts").is_null());
  // Times never take exponent form.
  CHECK(stats.tasks_json({st}, 1795362464.5).find("1795362464.5") !=
        std::string::npos);

  stats.add(attempt_started_event(h, "a", "cli", "pid"));
  CHECK(stats.times("t")->next_retry_ts == 0);
}

TEST_CASE("task times as typed clocks: every task, ascending, found by id") {
  node_stats stats;
  task_script b{stats, "b", 200};
  task_script a{stats, "a", 100};
  b.attempt("x", 1, 0);
  b.done(task_outcome::succeeded);
  auto clocks = stats.clocks(300);
  CHECK(clocks.now == 300);
  CHECK(clocks.task_ids == std::vector<std::string>{"a", "b"});
  REQUIRE(clocks.times.size() == 2);
  for (auto id : {"a", "b"}) {
    auto* found = clocks.find(id);
    REQUIRE(found);
    CHECK(found->submitted_ts == stats.times(id)->submitted_ts);
    CHECK(found->finished_ts == stats.times(id)->finished_ts);
    CHECK(found->last_decision == stats.times(id)->last_decision);
  }
  CHECK(clocks.find("a")->submitted_ts == 100);
  CHECK(clocks.find("b")->submitted_ts == 200);
  CHECK(clocks.find("b")->finished_ts == 201);
  CHECK(clocks.find("a")->finished_ts == 0);
  CHECK(clocks.find("c") == nullptr);
  CHECK(clocks.find("") == nullptr);
  CHECK(node_stats{}.clocks(1).find("a") == nullptr);
  // One task's alone.
  auto one = stats.clocks(300, "b");
  CHECK(one.task_ids == std::vector<std::string>{"b"});
  CHECK(one.find("b")->finished_ts == 201);
  CHECK(stats.clocks(300, "c").task_ids.empty());
}

TEST_CASE("events of this node (typed) and events read back from the "
          "journal (JSON) give the same figures") {
  auto run = [](bool read_back) {
    node_stats stats;
    task_script t{stats, "t1", 1000, read_back};
    t.attempt("a", 2, 1);
    t.retry("a", 5);
    t.attempt("a", 3, 1, error_class::rate_limit, "429 too many");
    t.fallback("a", "b");
    t.attempt("b", 4, 2, error_class::fatal, "bad key");
    t.done(task_outcome::failed, 2);
    task_script u{stats, "t2", 2000, read_back};
    u.attempt("a", 1, 0);
    u.stop(stop_mode::kill);
    u.done(task_outcome::stopped);
    std::vector<task_status> tasks(2);
    tasks[0].task_id = "t1";
    tasks[1].task_id = "t2";
    return std::vector<std::string>{stats.prometheus({}, node_health{}),
                                    stats.tasks_json(tasks, 3000),
                                    stats.times("t1")->last_decision};
  };
  auto typed = run(false);
  auto json = run(true);
  CHECK(typed == json);
  CHECK(has_line(
    typed[0],
    R"(tasksup_attempts_total{agent="b",class="fatal",decision="failed"} 1)"));
  CHECK(typed[2] == "gave up");
}

TEST_CASE("kept tasks and attempt records are bounded") {
  node_stats::limits lim;
  lim.max_tasks = 3;
  lim.max_records = 4;
  node_stats stats{lim};
  for (int i = 0; i < 10; ++i) {
    task_script t{stats, "t" + std::to_string(i), static_cast<double>(i)};
    t.attempt("a", 1, 0);
    t.done(task_outcome::succeeded);
  }
  CHECK(stats.records().size() == 4);
  CHECK(stats.records().front().task_id == "t6");
  CHECK_FALSE(stats.knows("t6"));
  CHECK(stats.knows("t9"));
  // Counters are not bounded by what is kept.
  CHECK(has_line(stats.prometheus({}, node_health{}),
                 "tasksup_tasks_submitted_total 10"));
}

TEST_CASE("the journal's figures: cumulative commit buckets, writes by kind, "
          "and whether the node has a journal at all") {
  node_stats stats;
  auto without = stats.prometheus({}, node_health{});
  CHECK(has_line(without, "tasksup_journal_enabled 0"));
  CHECK(without.find("tasksup_journal_commits_total") == std::string::npos);

  journal_figures j;
  j.bytes = 8192;
  j.tasks = 5;
  j.unfinished = 2;
  j.written = {5, 30, 40, 3, 1};
  j.commits = 4;
  j.commit_buckets[0] = 1;     // <= 0.5 ms
  j.commit_buckets[2] = 2;     // <= 2.5 ms
  j.commit_buckets.back() = 1; // above the last bound
  j.commit_seconds = 3.25;
  j.commit_failures = 2;
  j.syncs = 3;
  j.failing = true;
  j.disk_full = true;
  j.pruned = 7;
  auto text = stats.prometheus({}, node_health{}, &j);
  CHECK(has_line(text, "tasksup_journal_enabled 1"));
  CHECK(has_line(text, "tasksup_journal_size_bytes 8192"));
  CHECK(has_line(text, R"(tasksup_journal_tasks{state="unfinished"} 2)"));
  CHECK(has_line(text, R"(tasksup_journal_tasks{state="finished"} 3)"));
  CHECK(has_line(text,
                 R"(tasksup_journal_records_written_total{kind="input"} 30)"));
  CHECK(
    has_line(text, R"(tasksup_journal_records_written_total{kind="state"} 1)"));
  CHECK(has_line(text, "tasksup_journal_commits_total 4"));
  CHECK(has_line(
    text, R"(tasksup_journal_commit_duration_seconds_bucket{le="0.0005"} 1)"));
  CHECK(has_line(
    text, R"(tasksup_journal_commit_duration_seconds_bucket{le="0.001"} 1)"));
  CHECK(has_line(
    text, R"(tasksup_journal_commit_duration_seconds_bucket{le="0.0025"} 3)"));
  CHECK(has_line(
    text, R"(tasksup_journal_commit_duration_seconds_bucket{le="2.5"} 3)"));
  CHECK(has_line(
    text, R"(tasksup_journal_commit_duration_seconds_bucket{le="+Inf"} 4)"));
  CHECK(has_line(text, "tasksup_journal_commit_duration_seconds_sum 3.25"));
  CHECK(has_line(text, "tasksup_journal_commit_duration_seconds_count 4"));
  CHECK(has_line(text, "tasksup_journal_commit_failures_total 2"));
  CHECK(has_line(text, "tasksup_journal_syncs_total 3"));
  CHECK(has_line(text, "tasksup_journal_failing 1"));
  CHECK(has_line(text, "tasksup_journal_disk_full 1"));
  CHECK(has_line(text, "tasksup_journal_pruned_tasks_total 7"));
}

TEST_CASE("the cluster's figures: nodes, slots per node (bounded labels), "
          "placement waits") {
  std::vector<node_load> nodes;
  for (int i = 0; i < 70; ++i) {
    node_load n;
    char name[16];
    std::snprintf(name, sizeof name, "w%02d", i);
    n.offer.name = name;
    n.offer.max_concurrent = 2;
    n.running = i % 2;
    nodes.push_back(n);
  }
  task_status waiting;
  waiting.task_id = "t1";
  waiting.state = task_state::queued;
  waiting.waiting_for = "no worker node has label gpu=true";
  task_status next;
  next.task_id = "t2";
  next.state = task_state::queued;
  task_status running;
  running.task_id = "t3";
  running.state = task_state::running;
  auto text = node_stats::cluster_prometheus(nodes, {waiting, next, running});
  auto has = [&](const std::string& line) {
    return text.find(line + "\n") != std::string::npos;
  };
  CHECK(has("# TYPE tasksup_cluster_nodes gauge"));
  CHECK(has("tasksup_cluster_nodes 70"));
  CHECK(has(R"(tasksup_node_slots{node="w00"} 2)"));
  CHECK(has(R"(tasksup_node_slots_in_use{node="w01"} 1)"));
  CHECK(has(R"(tasksup_node_slots{node="w63"} 2)"));
  // Past 64 names, the rest are summed under "other".
  CHECK(text.find(R"(node="w64")") == std::string::npos);
  CHECK(has(R"(tasksup_node_slots{node="other"} 12)"));
  CHECK(has(R"(tasksup_node_slots_in_use{node="other"} 3)"));
  CHECK(has("tasksup_placement_waiting 1"));

  // A node without workers: no node lines, nothing waits for placement.
  auto alone = node_stats::cluster_prometheus({}, {waiting});
  CHECK(alone.find("tasksup_cluster_nodes 0\n") != std::string::npos);
  CHECK(alone.find("{node=") == std::string::npos);
  CHECK(alone.find("tasksup_placement_waiting 0\n") != std::string::npos);
}

TEST_CASE("the task list comes in pages, newest first") {
  node_stats stats;
  std::vector<task_status> tasks;
  for (int i = 0; i < 5; ++i) {
    auto id = "t" + std::to_string(i);
    task_script t{stats, id, 1000.0 + i};
    task_status s;
    s.task_id = id;
    s.state = i == 4 ? task_state::running : task_state::done;
    tasks.push_back(s);
  }
  auto page = boost::json::parse(stats.tasks_page_json(tasks, 2000, 2, ""));
  CHECK(page.at("total").as_int64() == 5);
  CHECK(page.at("counts").at("done").as_int64() == 4);
  CHECK(page.at("counts").at("running").as_int64() == 1);
  auto& first = page.at("tasks").as_array();
  REQUIRE(first.size() == 2);
  CHECK(first[0].at("task_id").as_string() == "t4");
  CHECK(first[1].at("task_id").as_string() == "t3");
  CHECK(page.at("next").as_string() == "t3");
  auto second = boost::json::parse(stats.tasks_page_json(tasks, 2000, 2, "t3"));
  CHECK(second.at("tasks").at(0).at("task_id").as_string() == "t2");
  CHECK(second.at("next").as_string() == "t1");
  auto last = boost::json::parse(stats.tasks_page_json(tasks, 2000, 2, "t1"));
  REQUIRE(last.at("tasks").as_array().size() == 1);
  CHECK(last.at("tasks").at(0).at("task_id").as_string() == "t0");
  CHECK(last.at("next").is_null());
  // An unknown cursor starts over.
  auto unknown =
    boost::json::parse(stats.tasks_page_json(tasks, 2000, 10, "gone"));
  CHECK(unknown.at("tasks").as_array().size() == 5);
  CHECK(unknown.at("next").is_null());
}

TEST_CASE("tasks that start 3 or more attempts after their first in an hour "
          "are listed as restarting often, with their recovery") {
  node_stats stats;
  // A crash loop: 4 failed attempts a minute apart, then it recovers.
  task_script loop{stats, "loop", 10000};
  for (int i = 0; i < 4; ++i) {
    loop.attempt("a", 10, 1);
    loop.retry("a", 50);
  }
  auto first_failure = 10000.0 + 10;
  // Three starts after the first within the hour; still failing.
  auto listed = stats.restarting(loop.now());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].task_id == "loop");
  CHECK(listed[0].agent_id == "a");
  CHECK(listed[0].restarts == 3);
  CHECK(listed[0].failing_since_ts == first_failure);
  CHECK_FALSE(listed[0].last_recovery_s);
  loop.attempt("a", 10, 0);
  listed = stats.restarting(loop.now());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].restarts == 4);
  CHECK_FALSE(listed[0].failing_since_ts);
  REQUIRE(listed[0].last_recovery_s);
  CHECK(*listed[0].last_recovery_s == Approx(loop.now() - first_failure));
  // Two restarts are not often.
  task_script calm{stats, "calm", 10000};
  calm.attempt("b", 1, 1);
  calm.retry("b", 1);
  calm.attempt("b", 1, 1);
  calm.retry("b", 1);
  calm.attempt("b", 1, 0);
  CHECK(stats.restarting(loop.now()).size() == 1);
  // An hour after the restarts, they no longer count.
  CHECK(stats.restarting(loop.now() + 3600).empty());
  auto json = boost::json::parse(stats.agents_json(loop.now(), 0, {}));
  CHECK(json.at("restarting_count") == 1);
  CHECK(json.at("restarting").at(0).at("task_id") == "loop");
  CHECK(json.at("restarting").at(0).at("restarts_last_hour") == 4);
  CHECK(json.at("restarting").at(0).at("failing_since_ts").is_null());
  auto text = stats.restarting_prometheus(loop.now());
  CHECK(has_line(text, "tasksup_tasks_restarting_often 1"));
  CHECK(text.find("loop") == std::string::npos); // no task id is a label
}

TEST_CASE("the restarting list names the 10 that restart most and counts "
          "them all") {
  node_stats stats;
  std::vector<std::unique_ptr<task_script>> tasks;
  for (int i = 0; i < 12; ++i) {
    tasks.push_back(
      std::make_unique<task_script>(stats, "t" + std::to_string(i), 1000));
    // t0 restarts 3 times, t1 4 times, ... t11 14 times.
    for (int k = 0; k < 4 + i; ++k)
      tasks.back()->attempt("a", 1, 1);
  }
  std::size_t count = 0;
  auto listed = stats.restarting(2000, &count);
  CHECK(count == 12);
  REQUIRE(listed.size() == 10);
  CHECK(listed.front().task_id == "t11");
  CHECK(listed.front().restarts == 14);
  CHECK(listed.back().task_id == "t2");
  auto text = stats.restarting_prometheus(2000);
  CHECK(has_line(text, "tasksup_tasks_restarting_often 12"));
}

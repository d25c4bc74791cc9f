#include "tasksup/actors/node_stats.hpp"

// node_stats' figures as the dashboard's JSON: `/agents`, the task list and
// one task with its events.

#include "tasksup/actors/events.hpp"

#include "tasksup/supervisor/json_writer.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace tasksup {

namespace {

/// A time as a number when positive, else null (an unknown time).
void time_or_null(json_writer& w, double x) {
  if (x > 0)
    w.number(x);
  else
    w.null();
}

/// The keys of one task in the dashboard's list: its status record and
/// times.
void status_fields(json_writer& w, const task_status& s,
                   const task_times* times) {
  w.key("task_id");
  w.string(s.task_id);
  w.key("environment");
  w.string(s.environment);
  w.key("state");
  w.string(to_string(s.state));
  w.key("agent_id");
  w.string(s.agent_id);
  w.key("attempt");
  w.integer(s.attempt);
  w.key("retry_count");
  w.integer(s.retry_count);
  w.key("max_retries");
  w.integer(s.max_retries);
  w.key("total_attempts");
  w.integer(s.total_attempts);
  w.key("fallback_count");
  w.integer(s.fallback_count);
  w.key("outcome");
  if (s.result)
    w.string(to_string(s.result->outcome));
  else
    w.null();
  w.key("exit_code");
  if (s.result)
    w.integer(s.result->exit_code);
  else
    w.null();
  w.key("error");
  if (s.result && s.result->error)
    w.string(*s.result->error);
  else
    w.null();
  w.key("submitted_ts");
  time_or_null(w, times ? times->submitted_ts : 0);
  w.key("attempt_started_ts");
  time_or_null(w, times ? times->attempt_started_ts : 0);
  w.key("next_retry_ts");
  time_or_null(w, times && s.state == task_state::backoff ? times->next_retry_ts
                                                          : 0);
  w.key("finished_ts");
  time_or_null(w, times ? times->finished_ts : 0);
  w.key("resume_ts");
  time_or_null(w, s.resume_at);
  w.key("waiting_for");
  w.string(s.waiting_for);
  w.key("last_decision");
  w.string(times ? times->last_decision : std::string{});
}

} // namespace

std::string node_stats::agents_json(double now, double window_s,
                                    const node_health& health) const {
  auto all = agents(now, window_s, health);
  json_writer w;
  w.begin_object();
  w.key("window_s");
  w.number(window_s > 0 ? window_s : 0);
  w.key("now");
  w.number(now);
  w.key("agents");
  w.begin_array();
  for (auto& a : all) {
    w.begin_object();
    w.key("agent_id");
    w.string(a.agent_id);
    w.key("attempts");
    w.integer(a.attempts);
    w.key("succeeded");
    w.integer(a.succeeded);
    w.key("failed");
    w.integer(a.failed);
    w.key("stopped");
    w.integer(a.stopped);
    w.key("success_rate");
    w.number(a.success_rate);
    w.key("success_lower_bound");
    w.number(a.success_lower_bound);
    w.key("median_duration_s");
    w.number(a.median_duration_s);
    w.key("p90_duration_s");
    w.number(a.p90_duration_s);
    w.key("failure_classes");
    w.begin_object();
    for (auto& [cls, n] : a.failure_classes) {
      w.key(cls);
      w.integer(n);
    }
    w.end_object();
    w.key("breaker");
    if (a.breaker)
      w.string(to_string(*a.breaker));
    else
      w.null();
    w.key("last_failure");
    if (a.last_failure) {
      auto& f = *a.last_failure;
      w.begin_object();
      w.key("task_id");
      w.string(f.task_id);
      w.key("attempt");
      w.integer(f.attempt);
      w.key("ts");
      w.number(f.ended_ts);
      w.key("exit_code");
      w.integer(f.exit_code);
      w.key("class");
      if (f.cls)
        w.string(to_string(*f.cls));
      else
        w.null();
      w.key("rule");
      w.string(f.rule);
      w.key("line");
      w.string(f.line);
      w.key("decision");
      w.string(to_string(f.decision));
      w.end_object();
    } else {
      w.null();
    }
    w.end_object();
  }
  w.end_array();
  w.key("fallback_order");
  w.begin_array();
  for (auto& s : fallback_order(all)) {
    w.begin_object();
    w.key("agent_id");
    w.string(s.agent_id);
    w.key("why");
    w.string(s.why);
    w.end_object();
  }
  w.end_array();
  std::size_t restarting_count = 0;
  auto often = restarting(now, &restarting_count);
  w.key("restarting_count");
  w.integer(static_cast<std::int64_t>(restarting_count));
  w.key("restarting");
  w.begin_array();
  for (auto& r : often) {
    w.begin_object();
    w.key("task_id");
    w.string(r.task_id);
    w.key("agent_id");
    w.string(r.agent_id);
    w.key("restarts_last_hour");
    w.integer(r.restarts);
    w.key("last_restart_ts");
    w.number(r.last_restart_ts);
    w.key("last_recovery_s");
    w.number(r.last_recovery_s);
    w.key("failing_since_ts");
    w.number(r.failing_since_ts);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.take();
}

std::string node_stats::tasks_json(const std::vector<task_status>& tasks,
                                   double now) const {
  json_writer w;
  w.begin_object();
  w.key("now");
  w.number(now);
  w.key("tasks");
  w.begin_array();
  for (auto& s : tasks) {
    w.begin_object();
    status_fields(w, s, times(s.task_id));
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.take();
}

std::string node_stats::tasks_page_json(std::vector<task_status> tasks,
                                        double now, std::size_t limit,
                                        const std::string& after) const {
  auto submitted = [this](const task_status& s) {
    auto* t = times(s.task_id);
    return t ? t->submitted_ts : 0.0;
  };
  std::sort(tasks.begin(), tasks.end(),
            [&](const task_status& a, const task_status& b) {
              auto x = submitted(a);
              auto y = submitted(b);
              return x != y ? x > y : a.task_id < b.task_id;
            });
  std::size_t first = 0;
  if (!after.empty())
    for (std::size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].task_id == after) {
        first = i + 1;
        break;
      }
  auto last = std::min(tasks.size(), first + limit);
  json_writer w;
  w.begin_object();
  w.key("now");
  w.number(now);
  w.key("total");
  w.integer(static_cast<long long>(tasks.size()));
  w.key("counts");
  w.begin_object();
  for (auto st : {task_state::queued, task_state::running, task_state::backoff,
                  task_state::done, task_state::paused, task_state::quota_wait,
                  task_state::not_now}) {
    w.key(to_string(st));
    w.integer(
      std::count_if(tasks.begin(), tasks.end(),
                    [st](const task_status& s) { return s.state == st; }));
  }
  w.end_object();
  w.key("tasks");
  w.begin_array();
  for (auto i = first; i < last; ++i) {
    w.begin_object();
    status_fields(w, tasks[i], times(tasks[i].task_id));
    w.end_object();
  }
  w.end_array();
  w.key("next");
  if (last < tasks.size() && last > first)
    w.string(tasks[last - 1].task_id);
  else
    w.null();
  w.end_object();
  return w.take();
}

std::string node_stats::task_json(const task_status& status,
                                  const std::vector<event>& history,
                                  double now) const {
  json_writer w;
  w.begin_object();
  w.key("now");
  w.number(now);
  w.key("task");
  w.begin_object();
  status_fields(w, status, times(status.task_id));
  if (!status.tree.empty()) {
    // A group: its tree, the group first, each member below its group.
    w.key("tree");
    w.begin_array();
    for (auto& r : status.tree) {
      w.begin_object();
      w.key("depth");
      w.integer(r.depth);
      w.key("id");
      w.string(r.id);
      w.key("kind");
      w.raw_string(r.group ? "group" : "task");
      if (r.group) {
        w.key("strategy");
        w.raw_string(to_string(r.strategy));
      }
      if (!r.depends_on.empty()) {
        // A workflow's step: the steps it waits for (the graph's arrows).
        w.key("depends_on");
        w.begin_array();
        for (auto& d : r.depends_on)
          w.string(d);
        w.end_array();
      }
      w.key("phase");
      w.raw_string(to_string(r.phase));
      w.key("last");
      if (r.last)
        w.raw_string(to_string(*r.last));
      else
        w.null();
      w.key("restarts");
      w.integer(r.restarts);
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  w.key("events");
  w.begin_array();
  for (auto& ev : history)
    w.raw(ev.json());
  w.end_array();
  w.end_object();
  return w.take();
}

} // namespace tasksup

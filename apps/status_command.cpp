// `tasksup status [TASK]`: what a node's tasks are doing.

#include "commands.hpp"
#include "json_text.hpp"
#include "node_client.hpp"
#include "safe_text.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/actors/protocol.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tasksup::app {

namespace {

struct status_options {
  std::string task_id;
  std::string node;
  bool json = false;
  /// Only tasks in these states (empty: all).
  std::vector<std::string> states;
};

/// Times the node's statistics keep per task (absent from `task_status`).
struct task_clock {
  std::optional<double> submitted;
  std::optional<double> next_retry;
  std::optional<double> finished;
  std::string last_decision;
};

/// The node's clock and each task's times, from `(view)`; empty when the
/// node does not answer it (an older node).
struct times_view {
  double now = 0;
  std::map<std::string, task_clock> tasks;
};

std::optional<double> time_at(const boost::json::object& o,
                              std::string_view key) {
  auto* v = o.if_contains(key);
  if (!v || !v->is_number())
    return std::nullopt;
  return v->to_number<double>();
}

times_view fetch_times(node_session& s) {
  times_view out;
  s.self->request(s.node, node_request_timeout, view_atom::value)
    .receive(
      [&](std::string& text) {
        boost::system::error_code ec;
        auto doc = boost::json::parse(text, ec);
        if (ec || !doc.is_object())
          return;
        out.now = time_at(doc.get_object(), "now").value_or(0);
        auto* tasks = doc.get_object().if_contains("tasks");
        if (!tasks || !tasks->is_array())
          return;
        for (auto& t : tasks->get_array()) {
          auto* o = t.if_object();
          if (!o || !o->contains("task_id") || !o->at("task_id").is_string())
            continue;
          task_clock c;
          c.submitted = time_at(*o, "submitted_ts");
          c.next_retry = time_at(*o, "next_retry_ts");
          c.finished = time_at(*o, "finished_ts");
          if (auto* d = o->if_contains("last_decision"); d && d->is_string())
            c.last_decision = d->get_string();
          out.tasks[std::string{o->at("task_id").get_string()}] = c;
        }
      },
      [](caf::error&) {});
  return out;
}

/// Seconds since the epoch as ISO 8601 UTC, to the second.
std::string iso8601(double ts) {
  auto t = static_cast<std::time_t>(std::floor(ts));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// A short duration: 45s, 12m, 3h, 2d.
std::string short_duration(double s) {
  if (!(s > 0))
    return "0s";
  if (s < 60)
    return std::to_string(static_cast<long long>(s)) + "s";
  if (s < 3600)
    return std::to_string(static_cast<long long>(s / 60)) + "m";
  if (s < 86400)
    return std::to_string(static_cast<long long>(s / 3600)) + "h";
  return std::to_string(static_cast<long long>(s / 86400)) + "d";
}

/// One status record as JSON (the result as `task_done` carries it) with
/// its times (null when the node does not know them).
boost::json::object to_json(const task_status& s, const times_view& tv) {
  boost::json::object out;
  out["task_id"] = s.task_id;
  out["environment"] = s.environment;
  out["state"] = std::string{to_string(s.state)};
  out["agent_id"] = s.agent_id;
  out["attempt"] = s.attempt;
  out["retry_count"] = s.retry_count;
  out["max_retries"] = s.max_retries;
  out["total_attempts"] = s.total_attempts;
  out["fallback_count"] = s.fallback_count;
  out["trace_id"] = s.trace_id;
  out["node"] = s.node;
  out["waiting_for"] = s.waiting_for;
  const task_clock* c = nullptr;
  if (auto i = tv.tasks.find(s.task_id); i != tv.tasks.end())
    c = &i->second;
  auto put_time = [&](const char* key, std::optional<double> x) {
    if (x)
      out[key] = *x;
    else
      out[key] = nullptr;
  };
  put_time("submitted_ts", c ? c->submitted : std::nullopt);
  put_time("next_retry_ts",
           c && s.state == task_state::backoff ? c->next_retry : std::nullopt);
  put_time("finished_ts", c ? c->finished : std::nullopt);
  if (s.result) {
    boost::system::error_code ec;
    auto result = boost::json::parse(result_to_json(*s.result), ec);
    out["result"] = ec ? boost::json::value{} : std::move(result);
  } else {
    out["result"] = nullptr;
  }
  return out;
}

std::string outcome_of(const task_status& s) {
  if (!s.result)
    return "-";
  auto text = std::string{to_string(s.result->outcome)};
  if (s.result->outcome != task_outcome::succeeded && s.result->exit_code >= 0)
    text += " (exit " + std::to_string(s.result->exit_code) + ")";
  return text;
}

/// The table a person reads: one row per task. AGE is the time since
/// submission; NEXT RETRY the wait left for a task in backoff; NODE (in a
/// cluster) the worker node running its attempt. Queued tasks that wait for
/// a reason (no fitting worker node) get a line under the table.
void print_table(const std::vector<task_status>& all, const times_view& tv) {
  auto cluster = std::any_of(all.begin(), all.end(),
                             [](auto& s) { return !s.node.empty(); });
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"TASK", "STATE", "AGENT", "ATTEMPT", "RETRIES", "AGE",
                  "NEXT RETRY", "OUTCOME"});
  if (cluster)
    rows.front().insert(rows.front().begin() + 2, "NODE");
  for (auto& s : all) {
    auto retries = std::to_string(s.retry_count);
    if (s.max_retries > 0 && s.state != task_state::done)
      retries += "/" + std::to_string(s.max_retries);
    std::string age = "-";
    std::string next = "-";
    if (auto i = tv.tasks.find(s.task_id); i != tv.tasks.end()) {
      if (i->second.submitted)
        age = short_duration(tv.now - *i->second.submitted);
      if (s.state == task_state::backoff && i->second.next_retry)
        next = "in " + short_duration(std::ceil(
                         std::max(0.0, *i->second.next_retry - tv.now)));
    }
    rows.push_back({cell(s.task_id), std::string{to_string(s.state)},
                    cell(s.agent_id), std::to_string(s.attempt), retries, age,
                    next, cell(outcome_of(s))});
    if (cluster)
      rows.back().insert(rows.back().begin() + 2,
                         s.state == task_state::running ? cell(s.node) : "-");
  }
  print_columns(std::cout, rows);
  for (auto& s : all)
    if (!s.waiting_for.empty())
      std::cout << cell(s.task_id) << " waits: " << cell(s.waiting_for) << '\n';
}

/// The times of one task, as lines under its table.
void print_details(const task_status& st, const times_view& tv) {
  auto i = tv.tasks.find(st.task_id);
  if (i == tv.tasks.end())
    return;
  auto& c = i->second;
  if (!st.node.empty() && st.state == task_state::running)
    std::cout << "node:          " << cell(st.node) << '\n';
  if (!st.waiting_for.empty())
    std::cout << "waits:         " << cell(st.waiting_for) << '\n';
  if (c.submitted)
    std::cout << "submitted:     " << iso8601(*c.submitted) << '\n';
  if (st.state == task_state::backoff && c.next_retry)
    std::cout << "next retry:    " << iso8601(*c.next_retry) << " (in "
              << short_duration(
                   std::ceil(std::max(0.0, *c.next_retry - tv.now)))
              << ")\n";
  if (c.finished)
    std::cout << "finished:      " << iso8601(*c.finished) << '\n';
  if (!c.last_decision.empty())
    std::cout << "last decision: " << cell(c.last_decision) << '\n';
}

int status(const status_options& opts) {
  std::set<std::string> states;
  for (auto& x : opts.states) {
    std::string_view rest = x;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      auto one = std::string{rest.substr(0, comma)};
      if (one != "queued" && one != "running" && one != "backoff" &&
          one != "done") {
        std::cerr << "tasksup status: --state: expected queued, running, "
                     "backoff or done; got '"
                  << cell(one) << "'\n";
        return exit_status::bad_input;
      }
      states.insert(one);
      rest = comma == std::string_view::npos ? std::string_view{}
                                             : rest.substr(comma + 1);
    }
  }
  return with_node("status", opts.node, false, [&](node_session& s) {
    int rc = exit_status::ok;
    auto on_error = [&](caf::error& err) {
      rc = report_request_error(s, err, exit_status::unavailable);
    };
    if (!opts.task_id.empty()) {
      std::optional<task_status> one;
      s.self
        ->request(s.node, node_request_timeout, status_atom::value,
                  opts.task_id)
        .receive([&](task_status& st) { one = std::move(st); }, on_error);
      if (!one)
        return rc;
      auto tv = fetch_times(s);
      if (opts.json) {
        std::cout << json_text(to_json(*one, tv)) << '\n';
      } else {
        print_table({*one}, tv);
        print_details(*one, tv);
      }
      return rc;
    }
    std::optional<std::vector<task_status>> all;
    s.self->request(s.node, node_request_timeout, status_atom::value)
      .receive([&](std::vector<task_status>& x) { all = std::move(x); },
               on_error);
    if (!all)
      return rc;
    if (!states.empty())
      all->erase(std::remove_if(all->begin(), all->end(),
                                [&](const task_status& st) {
                                  return states.count(std::string{
                                           to_string(st.state)}) == 0;
                                }),
                 all->end());
    auto tv = fetch_times(s);
    if (opts.json) {
      boost::json::array out;
      for (auto& st : *all)
        out.push_back(to_json(st, tv));
      std::cout << json_text(out) << '\n';
    } else if (all->empty()) {
      std::cout << (states.empty() ? "no tasks\n" : "no tasks in that state\n");
    } else {
      print_table(*all, tv);
    }
    return rc;
  });
}

void setup_status(CLI::App& app, int& status_code) {
  auto opts = std::make_shared<status_options>();
  auto* cmd = app.add_subcommand(
    "status", "Show what a node's tasks are doing: state, agent, attempt, "
              "retries, age, next retry and outcome.");
  cmd->add_option("task", opts->task_id, "Only this task (by id)");
  cmd->add_flag("--json", opts->json,
                "Print JSON instead of a table: an array of task records "
                "(one object with TASK), with the final result of finished "
                "tasks as `task_done` carries it and the times "
                "submitted_ts, next_retry_ts, finished_ts (seconds since the "
                "epoch, null when unknown)");
  cmd->add_option("--state", opts->states,
                  "Only tasks in this state: queued, running, backoff or "
                  "done (repeat or separate with commas)");
  add_node_option(cmd, opts->node);
  cmd->footer(node_help() + R"(

States: queued (waiting for an attempt slot), running, backoff (waiting to
retry), done. AGE is the time since the task was submitted; NEXT RETRY the
wait left before a task in backoff tries again. With TASK, the times follow
the table in ISO 8601 (UTC). The node remembers finished tasks up to its
history limit. An unknown task id exits with status 3.

Example:
  tasksup status
  tasksup status --state running,backoff
  tasksup status demo-flaky --json)");
  cmd->callback([opts, &status_code] { status_code = status(*opts); });
}

command_registrar registrar{60, setup_status};

} // namespace

} // namespace tasksup::app

#include "status_view.hpp"

#include "json_text.hpp"
#include "safe_text.hpp"

#include "tasksup/supervisor/json_writer.hpp"
#include "tasksup/supervisor/task_model.hpp"
#include "tasksup/supervisor/time_words.hpp"
#include "tasksup/supervisor/url_encode.hpp"

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iostream>
#include <string_view>
#include <utility>

namespace tasksup::app {

namespace {

long long count_at(const boost::json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  if (!v)
    return 0;
  if (v->is_int64())
    return v->get_int64();
  if (v->is_uint64())
    return static_cast<long long>(v->get_uint64());
  return 0;
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

std::string outcome_of(const boost::json::object& r) {
  auto* result = r.if_contains("result");
  if (!result || !result->is_object())
    return "-";
  auto& o = result->get_object();
  auto text = json_text_at(o, "outcome");
  auto* code = o.if_contains("exit_code");
  if (text != "succeeded" && code && code->is_int64() && code->get_int64() >= 0)
    text += " (exit " + std::to_string(code->get_int64()) + ")";
  return text;
}

/// A permanent task waiting to restart after exit 0 (the node's last
/// decision says so): its wait is not a retry's.
bool restarting(const status_row& row) {
  return row.last_decision.rfind("restarting (", 0) == 0;
}

/// The table a person reads: one row per task. AGE is the time since
/// submission; NEXT RETRY the wait left for a task in backoff; NODE (in a
/// cluster) the worker node running its attempt. Queued tasks that wait for
/// a reason (no fitting worker node) get a line under the table.
void print_table(const std::vector<const status_row*>& all, double now) {
  auto cluster = std::any_of(all.begin(), all.end(), [](auto* s) {
    return !json_text_at(s->record, "node").empty();
  });
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"TASK", "STATE", "AGENT", "ATTEMPT", "RETRIES", "AGE",
                  "NEXT RETRY", "OUTCOME"});
  if (cluster)
    rows.front().insert(rows.front().begin() + 2, "NODE");
  for (auto* s : all) {
    auto& r = s->record;
    auto state = json_text_at(r, "state");
    auto retries = std::to_string(count_at(r, "retry_count"));
    if (auto max = count_at(r, "max_retries"); max > 0 && state != "done")
      retries += "/" + std::to_string(max);
    std::string age = "-";
    std::string next = "-";
    if (auto submitted = json_number_at(r, "submitted_ts"))
      age = short_duration(now - *submitted);
    if (auto retry = json_number_at(r, "next_retry_ts");
        retry && state == "backoff")
      next = std::string{restarting(*s) ? "restart in " : "in "} +
             short_duration(std::ceil(std::max(0.0, *retry - now)));
    if (auto reset = json_number_at(r, "resume_ts");
        reset && state == "quota_wait")
      next = "quota reset in " +
             short_duration(std::ceil(std::max(0.0, *reset - now)));
    if (auto again = json_number_at(r, "resume_ts");
        again && state == "not_now")
      next =
        "not now, in " + short_duration(std::ceil(std::max(0.0, *again - now)));
    rows.push_back({cell(json_text_at(r, "task_id")), cell(state),
                    cell(json_text_at(r, "agent_id")),
                    std::to_string(count_at(r, "attempt")), retries, age, next,
                    cell(outcome_of(r))});
    if (cluster)
      rows.back().insert(rows.back().begin() + 2,
                         state == "running" ? cell(json_text_at(r, "node"))
                                            : "-");
  }
  print_columns(std::cout, rows);
  for (auto* s : all)
    if (auto waits = json_text_at(s->record, "waiting_for"); !waits.empty())
      std::cout << cell(json_text_at(s->record, "task_id"))
                << " waits: " << cell(waits) << '\n';
}

/// A group's tree under its table: each member indented below its group,
/// with where it stands, its restarts and how its last run ended.
void print_tree(const boost::json::object& r) {
  auto* tree = r.if_contains("tree");
  if (tree == nullptr || !tree->is_array() || tree->get_array().empty())
    return;
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"MEMBER", "KIND", "RESTART", "STATE", "RESTARTS", "LAST"});
  for (auto& v : tree->get_array()) {
    if (!v.is_object())
      continue;
    auto& x = v.get_object();
    auto depth =
      static_cast<std::size_t>(std::clamp(count_at(x, "depth"), 0LL, 16LL));
    auto kind = json_text_at(x, "kind");
    if (kind == "group")
      kind += " " + json_text_at(x, "strategy");
    auto restart = json_text_at(x, "restart");
    if (auto* sig = x.if_contains("significant");
        sig && sig->is_bool() && sig->get_bool())
      restart += ", significant";
    auto last = json_text_at(x, "last");
    rows.push_back({std::string(2 * depth, ' ') + cell(json_text_at(x, "id")),
                    cell(kind), cell(restart.empty() ? "-" : restart),
                    cell(json_text_at(x, "phase")),
                    std::to_string(count_at(x, "restarts")),
                    cell(last.empty() ? "-" : last)});
  }
  std::cout << "tree:\n";
  print_columns(std::cout, rows);
}

/// The times of one task, as lines under its table.
void print_details(const status_row& row, double now) {
  auto& r = row.record;
  auto state = json_text_at(r, "state");
  if (auto node = json_text_at(r, "node"); !node.empty() && state == "running")
    std::cout << "node:          " << cell(node) << '\n';
  if (auto waits = json_text_at(r, "waiting_for"); !waits.empty())
    std::cout << "waits:         " << cell(waits) << '\n';
  if (auto submitted = json_number_at(r, "submitted_ts"))
    std::cout << "submitted:     " << iso8601(*submitted) << '\n';
  if (auto retry = json_number_at(r, "next_retry_ts");
      retry && state == "backoff")
    std::cout << (restarting(row) ? "next restart:  " : "next retry:    ")
              << iso8601(*retry) << " (in "
              << short_duration(std::ceil(std::max(0.0, *retry - now)))
              << ")\n";
  if (auto reset = json_number_at(r, "resume_ts");
      reset && state == "quota_wait")
    std::cout << "quota reset:   " << iso8601(*reset) << " ("
              << reset_time_text(*reset, now) << ")\n";
  if (auto again = json_number_at(r, "resume_ts"); again && state == "not_now")
    std::cout << "tries again:   " << iso8601(*again) << " ("
              << reset_time_text(*again, now) << ")\n";
  if (auto finished = json_number_at(r, "finished_ts"))
    std::cout << "finished:      " << iso8601(*finished) << '\n';
  if (!row.last_decision.empty())
    std::cout << "last decision: " << cell(row.last_decision) << '\n';
  print_tree(r);
}

} // namespace

std::optional<std::string>
parse_state_filter(const std::vector<std::string>& values,
                   std::set<std::string>& out) {
  for (auto& x : values) {
    std::string_view rest = x;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      auto one = std::string{rest.substr(0, comma)};
      if (one != "queued" && one != "running" && one != "backoff" &&
          one != "done" && one != "paused" && one != "quota_wait" &&
          one != "not_now")
        return "--state: expected queued, running, backoff, paused, "
               "quota_wait, not_now or done; got '" +
               cell(one) + "'";
      out.insert(one);
      rest = comma == std::string_view::npos ? std::string_view{}
                                             : rest.substr(comma + 1);
    }
  }
  return std::nullopt;
}

std::optional<std::string> check_page_options(const status_page_options& p) {
  if (p.limit > max_status_limit)
    return "--limit: at most " + std::to_string(max_status_limit);
  if (p.after.size() > 64)
    return "--after: a task id (at most 64 bytes)";
  return std::nullopt;
}

namespace {

/// The names in `set`, comma-separated.
std::string joined(const std::set<std::string>& set) {
  std::string out;
  for (auto& x : set)
    out += (out.empty() ? "" : ",") + x;
  return out;
}

} // namespace

std::string status_query_string(const status_page_options& p,
                                const status_filter& filter) {
  std::string out;
  auto add = [&](const char* key, const std::string& value) {
    if (value.empty())
      return;
    out += out.empty() ? "" : "&";
    out += key;
    out += '=';
    out += url_encode(value);
  };
  add("limit", p.limit == 0 ? "" : std::to_string(p.limit));
  add("after", p.after);
  add("agent", filter.agent);
  add("state", joined(filter.states));
  add("outcome", joined(filter.outcomes));
  return out;
}

std::string next_page_command(const status_page_options& p,
                              const status_filter& filter) {
  std::string out = "tasksup status";
  if (p.limit != 0)
    out += " --limit " + std::to_string(p.limit);
  if (!filter.states.empty())
    out += " --state " + joined(filter.states);
  if (!filter.outcomes.empty())
    out += " --outcome " + joined(filter.outcomes);
  if (!filter.agent.empty())
    out += " --agent " + cell(filter.agent);
  return out;
}

std::optional<std::string> check_agent_filter(const std::string& agent) {
  if (agent.size() > 64)
    return "--agent: an agent id (at most 64 bytes)";
  return std::nullopt;
}

bool status_filter::admits(const boost::json::object& record) const {
  if (!states.empty() && states.count(json_text_at(record, "state")) == 0)
    return false;
  if (!agent.empty() && json_text_at(record, "agent_id") != agent)
    return false;
  if (outcomes.empty())
    return true;
  auto* result = record.if_contains("result");
  return result && result->is_object() &&
         outcomes.count(json_text_at(result->get_object(), "outcome")) > 0;
}

std::optional<std::string>
parse_outcome_filter(const std::vector<std::string>& values,
                     std::set<std::string>& out) {
  constexpr auto n = all_task_outcomes.size();
  for (auto& x : values) {
    std::string_view rest = x;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      auto one = rest.substr(0, comma);
      bool known = false;
      for (std::size_t i = 0; i < n; ++i)
        known = known || to_string(all_task_outcomes[i]) == one;
      if (!known) {
        std::string names;
        for (std::size_t i = 0; i < n; ++i)
          names += std::string{i == 0       ? ""
                               : i + 1 == n ? " or "
                                            : ", "} +
                   std::string{to_string(all_task_outcomes[i])};
        return "--outcome: expected " + names + "; got '" +
               cell(std::string{one}) + "'";
      }
      out.insert(std::string{one});
      rest = comma == std::string_view::npos ? std::string_view{}
                                             : rest.substr(comma + 1);
    }
  }
  return std::nullopt;
}

void print_status(const status_answer& answer, bool single, bool json,
                  const status_filter& filter, const std::string& command) {
  std::vector<const status_row*> shown;
  for (auto& row : answer.rows)
    if (single || filter.admits(row.record))
      shown.push_back(&row);
  if (single) {
    if (shown.empty())
      return;
    if (json) {
      std::cout << json_text(shown.front()->record) << '\n';
    } else {
      print_table(shown, answer.now);
      print_details(*shown.front(), answer.now);
    }
    return;
  }
  if (json) {
    // One record per line, written as they come: a node's thousands of
    // tasks are never one document.
    std::string out;
    for (auto* row : shown) {
      out.clear();
      append_json_text(out, row->record);
      out += '\n';
      std::cout << out;
    }
  } else if (shown.empty()) {
    auto past_the_end = answer.paging && answer.paging->matched > 0;
    std::cout << (past_the_end     ? "no tasks after that one\n"
                  : filter.empty() ? "no tasks\n"
                  : filter.outcomes.empty() && filter.agent.empty()
                    ? "no tasks in that state\n"
                    : "no tasks match the filter\n");
  } else {
    print_table(shown, answer.now);
  }
  if (answer.paging && answer.paging->more > 0 && !shown.empty()) {
    auto& p = *answer.paging;
    auto line = std::to_string(shown.size()) + " of " +
                std::to_string(p.matched) +
                (p.matched == p.total ? " tasks" : " matching tasks") + "; " +
                std::to_string(p.more) + " more: " + command + " --after " +
                cell(json_text_at(shown.back()->record, "task_id")) + "\n";
    // With --json, stdout holds records only.
    (json ? std::cerr : std::cout) << (json ? "" : "\n") << line;
  }
  if (!json && filter.empty() && !answer.schedules.empty()) {
    std::cout << "\nschedules:\n";
    print_schedules(answer.schedules, answer.now);
  }
}

void print_schedules(const std::vector<boost::json::object>& schedules,
                     double now) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "TIMING", "OVERLAP", "NEXT", "LAST", "RUNNING",
                  "RUNS", "SKIPPED"});
  auto when = [now](const boost::json::object& o, const char* key) {
    auto t = json_number_at(o, key);
    if (!t || !(*t > 0))
      return std::string{"-"};
    auto text = iso8601(*t);
    text += *t >= now ? " (in " + short_duration(*t - now) + ")"
                      : " (" + short_duration(now - *t) + " ago)";
    return text;
  };
  for (auto& o : schedules) {
    auto paused = o.if_contains("paused");
    auto next = paused && paused->is_bool() && paused->get_bool()
                  ? std::string{"paused"}
                  : when(o, "next_ts");
    auto running = json_text_at(o, "running");
    rows.push_back({cell(json_text_at(o, "name")),
                    cell(json_text_at(o, "timing")),
                    cell(json_text_at(o, "overlap")), next, when(o, "last_ts"),
                    running.empty() ? "-" : cell(running),
                    std::to_string(count_at(o, "runs")),
                    std::to_string(count_at(o, "skipped"))});
  }
  print_columns(std::cout, rows);
}

std::string status_answer_json(const status_answer& answer) {
  // Written straight from the rows: building the document as one
  // boost::json value first copied every record (a node with 2,000 tasks).
  std::string out = "{\"now\":";
  append_json_number(out, answer.now);
  out += ",\"tasks\":[";
  bool first = true;
  for (auto& row : answer.rows) {
    out += first ? "{\"record\":" : ",{\"record\":";
    first = false;
    append_json_text(out, row.record);
    out += ",\"last_decision\":";
    append_json_string(out, row.last_decision);
    out += '}';
  }
  out += ']';
  if (answer.paging) {
    out += ",\"total\":" + std::to_string(answer.paging->total) +
           ",\"matched\":" + std::to_string(answer.paging->matched) +
           ",\"more\":" + std::to_string(answer.paging->more);
  }
  out += ",\"schedules\":[";
  first = true;
  for (auto& x : answer.schedules) {
    if (!first)
      out += ',';
    first = false;
    append_json_text(out, x);
  }
  out += "]}";
  return out;
}

std::optional<status_answer> parse_status_answer(const std::string& text) {
  boost::system::error_code ec;
  auto doc = boost::json::parse(text, ec);
  if (ec || !doc.is_object())
    return std::nullopt;
  auto& o = doc.get_object();
  auto* tasks = o.if_contains("tasks");
  if (!tasks || !tasks->is_array())
    return std::nullopt;
  status_answer out;
  out.now = json_number_at(o, "now").value_or(0);
  out.rows.reserve(tasks->get_array().size());
  for (auto& t : tasks->get_array()) {
    auto* item = t.if_object();
    if (!item)
      return std::nullopt;
    auto* record = item->if_contains("record");
    if (!record || !record->is_object())
      return std::nullopt;
    out.rows.push_back(status_row{std::move(record->get_object()),
                                  json_text_at(*item, "last_decision")});
  }
  if (o.contains("total")) {
    auto count = [&](const char* key) -> std::uint64_t {
      auto* v = o.if_contains(key);
      return v && v->is_uint64() ? v->get_uint64()
             : v && v->is_int64() && v->get_int64() >= 0
               ? static_cast<std::uint64_t>(v->get_int64())
               : 0;
    };
    out.paging = status_paging{count("total"), count("matched"), count("more")};
  }
  // A node from before schedules sends none.
  if (auto* all = o.if_contains("schedules"); all && all->is_array())
    for (auto& x : all->get_array())
      if (auto* item = x.if_object())
        out.schedules.push_back(std::move(*item));
  return out;
}

} // namespace tasksup::app

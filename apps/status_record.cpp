#include "status_record.hpp"

#include "json_text.hpp"

#include "tasksup/actors/events.hpp"

#include <boost/json/parse.hpp>

#include <map>
#include <optional>
#include <string_view>

namespace tasksup::app {

namespace {

/// Times the node's statistics keep per task (absent from `task_status`).
struct task_clock {
  std::optional<double> submitted;
  std::optional<double> next_retry;
  std::optional<double> finished;
  std::string last_decision;
};

/// The node's clock and each task's times.
struct times_view {
  double now = 0;
  std::map<std::string, task_clock> tasks;
};

times_view parse_times(const std::string& text) {
  times_view out;
  boost::system::error_code ec;
  auto doc = boost::json::parse(text, ec);
  if (ec || !doc.is_object())
    return out;
  out.now = json_number_at(doc.get_object(), "now").value_or(0);
  auto* tasks = doc.get_object().if_contains("tasks");
  if (!tasks || !tasks->is_array())
    return out;
  for (auto& t : tasks->get_array()) {
    auto* o = t.if_object();
    if (!o || !o->contains("task_id") || !o->at("task_id").is_string())
      continue;
    task_clock c;
    c.submitted = json_number_at(*o, "submitted_ts");
    c.next_retry = json_number_at(*o, "next_retry_ts");
    c.finished = json_number_at(*o, "finished_ts");
    if (auto* d = o->if_contains("last_decision"); d && d->is_string())
      c.last_decision = d->get_string();
    out.tasks[std::string{o->at("task_id").get_string()}] = c;
  }
  return out;
}

/// One status record as JSON (the result as `task_done` carries it) with
/// its times (null when the node does not know them).
boost::json::object to_json(const task_status& s, const task_clock* c) {
  boost::json::object out;
  out.reserve(16); // the keys below
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

/// The rows for `all`, each with the times `clock_of` finds for its id
/// (null: none).
template<class ClockOf>
status_answer make_rows(const std::vector<task_status>& all, double now,
                        ClockOf clock_of) {
  status_answer out;
  out.now = now;
  out.rows.reserve(all.size());
  for (auto& s : all) {
    std::optional<task_clock> c = clock_of(s.task_id);
    out.rows.push_back(status_row{to_json(s, c ? &*c : nullptr),
                                  c ? c->last_decision : std::string{}});
  }
  return out;
}

} // namespace

status_answer make_status_answer(const std::vector<task_status>& all,
                                 const std::string& view_text) {
  auto tv = parse_times(view_text);
  return make_rows(all, tv.now,
                   [&](const std::string& id) -> std::optional<task_clock> {
                     if (auto i = tv.tasks.find(id); i != tv.tasks.end())
                       return i->second;
                     return std::nullopt;
                   });
}

status_answer make_status_answer(const std::vector<task_status>& all,
                                 const task_clocks& clocks) {
  // The view's JSON writes an unknown time (0) as null.
  auto known = [](double x) {
    return x > 0 ? std::optional<double>{x} : std::nullopt;
  };
  return make_rows(
    all, clocks.now, [&](const std::string& id) -> std::optional<task_clock> {
      auto* t = clocks.find(id);
      if (!t)
        return std::nullopt;
      return task_clock{known(t->submitted_ts), known(t->next_retry_ts),
                        known(t->finished_ts), t->last_decision};
    });
}

} // namespace tasksup::app

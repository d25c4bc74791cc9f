#include "status_record.hpp"

#include "json_text.hpp"

#include "tasksup/supervisor/text.hpp"

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

namespace tasksup::app {

namespace {

/// The times in the statistics' view (`(view)`, JSON text) as the typed
/// answer to `(clock)` carries them: a null or absent time is 0 ("unknown"),
/// as the view writes an unknown time (0) as null.
task_clocks parse_times(const std::string& text) {
  task_clocks out;
  boost::system::error_code ec;
  auto doc = boost::json::parse(text, ec);
  if (ec || !doc.is_object())
    return out;
  out.now = json_number_at(doc.get_object(), "now").value_or(0);
  auto* tasks = doc.get_object().if_contains("tasks");
  if (!tasks || !tasks->is_array())
    return out;
  std::map<std::string, task_times> by_id;
  for (auto& t : tasks->get_array()) {
    auto* o = t.if_object();
    if (!o || !o->contains("task_id") || !o->at("task_id").is_string())
      continue;
    task_times c;
    c.submitted_ts = json_number_at(*o, "submitted_ts").value_or(0);
    c.next_retry_ts = json_number_at(*o, "next_retry_ts").value_or(0);
    c.finished_ts = json_number_at(*o, "finished_ts").value_or(0);
    if (auto* d = o->if_contains("last_decision"); d && d->is_string())
      c.last_decision = d->get_string();
    by_id[std::string{o->at("task_id").get_string()}] = std::move(c);
  }
  for (auto& [id, times] : by_id) { // ascending, as task_clocks::find needs
    out.task_ids.push_back(id);
    out.times.push_back(std::move(times));
  }
  return out;
}

/// `s` as a JSON string value: invalid UTF-8 repaired, as the JSON writer
/// repairs it.
boost::json::value text_value(const std::string& s) {
  return boost::json::value(valid_utf8(s) ? s : sanitize_utf8(s));
}

/// A number as JSON spells it: one JSON cannot spell is null.
boost::json::value number_value(double x) {
  return std::isfinite(x) ? boost::json::value(x) : boost::json::value{};
}

/// The result as the object `task_done` carries (`write_result_fields`),
/// key for key, built from the typed result.
boost::json::object result_object(const task_result& r) {
  boost::json::object out;
  out.reserve(6);
  out["outcome"] = to_string(r.outcome);
  out["exit_code"] = r.exit_code;
  out["error"] = r.error ? text_value(*r.error) : boost::json::value{};
  boost::json::array artifacts;
  artifacts.reserve(r.artifacts.size());
  for (auto& a : r.artifacts)
    artifacts.push_back(text_value(a));
  out["artifacts"] = std::move(artifacts);
  if (boost::system::error_code ec; !r.answer.empty())
    if (auto answer = boost::json::parse(r.answer, ec); !ec)
      out["answer"] = std::move(answer);
  auto& m = r.metadata;
  boost::json::object meta;
  meta.reserve(9);
  meta["agent_used"] = text_value(m.agent_used);
  meta["agent_id"] = text_value(m.agent_id);
  meta["retry_count"] = m.retry_count;
  meta["total_attempts"] = m.total_attempts;
  meta["fallback_count"] = m.fallback_count;
  meta["total_retries"] = m.total_retries;
  boost::json::object by_agent;
  for (auto& [agent, n] : m.retries_by_agent)
    by_agent[agent] = n; // agent ids are validated identifiers
  meta["retries_by_agent"] = std::move(by_agent);
  if (m.usage)
    meta["usage"] = boost::json::object{
      {"input_tokens", m.usage->input_tokens},
      {"output_tokens", m.usage->output_tokens},
      {"cached_input_tokens", m.usage->cached_input_tokens}};
  if (m.cost_usd)
    meta["cost_usd"] = number_value(*m.cost_usd);
  out["metadata"] = std::move(meta);
  out["task_id"] = text_value(r.task_id);
  return out;
}

/// One status record as JSON (the result as `task_done` carries it) with
/// its times (null when the node does not know them).
boost::json::object to_json(const task_status& s, const task_times* c) {
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
  // An unknown time (0) is null.
  auto put_time = [&](const char* key, double x) {
    if (x > 0)
      out[key] = x;
    else
      out[key] = nullptr;
  };
  put_time("submitted_ts", c ? c->submitted_ts : 0);
  put_time("next_retry_ts",
           c && s.state == task_state::backoff ? c->next_retry_ts : 0);
  put_time("finished_ts", c ? c->finished_ts : 0);
  put_time("resume_ts", s.resume_at);
  if (s.result) {
    out["result"] = result_object(*s.result);
  } else {
    out["result"] = nullptr;
  }
  if (!s.tree.empty()) {
    // A group: its tree, the group first, each member below its group.
    boost::json::array tree;
    tree.reserve(s.tree.size());
    for (auto& r : s.tree) {
      boost::json::object row;
      row["depth"] = r.depth;
      row["id"] = r.id;
      row["kind"] = r.group ? "group" : "task";
      if (r.group)
        row["strategy"] = std::string{to_string(r.strategy)};
      if (r.depth > 0) {
        row["restart"] = std::string{to_string(r.restart)};
        row["significant"] = r.significant;
      }
      row["phase"] = std::string{to_string(r.phase)};
      if (r.last)
        row["last"] = std::string{to_string(*r.last)};
      else
        row["last"] = nullptr;
      row["restarts"] = r.restarts;
      if (!r.depends_on.empty()) {
        boost::json::array deps;
        for (auto& d : r.depends_on)
          deps.emplace_back(d);
        row["depends_on"] = std::move(deps);
      }
      tree.push_back(std::move(row));
    }
    out["tree"] = std::move(tree);
  }
  return out;
}

} // namespace

status_answer make_status_answer(const std::vector<task_status>& all,
                                 const std::string& view_text) {
  return make_status_answer(all, parse_times(view_text));
}

status_answer make_status_answer(const std::vector<task_status>& all,
                                 const task_clocks& clocks) {
  status_answer out;
  out.now = clocks.now;
  out.rows.reserve(all.size());
  for (auto& s : all) {
    auto* c = clocks.find(s.task_id);
    out.rows.push_back(
      status_row{to_json(s, c), c ? c->last_decision : std::string{}});
  }
  return out;
}

status_query make_status_query(const status_page_options& p,
                               const status_filter& filter) {
  status_query q;
  q.limit = p.limit;
  q.after = p.after;
  q.agent = filter.agent;
  for (std::size_t i = 0; i < all_task_states.size(); ++i)
    if (filter.states.count(std::string{to_string(all_task_states[i])}) > 0)
      q.states |= 1u << i;
  for (std::size_t i = 0; i < all_task_outcomes.size(); ++i)
    if (filter.outcomes.count(std::string{to_string(all_task_outcomes[i])}) > 0)
      q.outcomes |= 1u << i;
  return q;
}

status_answer make_status_answer(const status_page& page) {
  status_answer out;
  out.now = page.now;
  out.rows.reserve(page.tasks.size());
  for (std::size_t i = 0; i < page.tasks.size(); ++i) {
    auto* c = i < page.times.size() ? &page.times[i] : nullptr;
    out.rows.push_back(status_row{to_json(page.tasks[i], c),
                                  c ? c->last_decision : std::string{}});
  }
  out.paging = status_paging{page.total, page.matched, page.more};
  return out;
}

boost::json::object schedule_record(const schedule_info& x) {
  boost::json::object o;
  o["name"] = x.name;
  o["source"] = x.source;
  o["timing"] = x.timing;
  o["overlap"] = x.overlap;
  o["paused"] = x.paused;
  auto time = [](double t) {
    return t > 0 ? boost::json::value(t) : boost::json::value(nullptr);
  };
  o["next_ts"] = time(x.next_s);
  o["last_ts"] = time(x.last_s);
  o["running"] = x.running.empty() ? boost::json::value(nullptr)
                                   : boost::json::value(x.running);
  o["runs"] = x.runs;
  o["skipped"] = x.skipped;
  return o;
}

} // namespace tasksup::app

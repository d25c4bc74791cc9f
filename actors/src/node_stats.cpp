#include "tasksup/actors/node_stats.hpp"

// The statistics fold: events in, counters, task times and finished
// attempts kept; the per-agent figures and the fallback order read from
// them. Their Prometheus text is in node_stats_prometheus.cpp, the
// dashboard's JSON in node_stats_json.cpp.

#include "tasksup/actors/events.hpp"
#include "tasksup/supervisor/group_spec.hpp"
#include "tasksup/supervisor/time_words.hpp"

#include "tasksup/supervisor/wilson_interval.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>
#include <variant>

namespace tasksup {

namespace {

std::string text_at(const boost::json::object& obj, std::string_view key) {
  if (auto* v = obj.if_contains(key); v && v->is_string())
    return std::string{v->get_string()};
  return {};
}

double number_at(const boost::json::object& obj, std::string_view key) {
  auto* v = obj.if_contains(key);
  if (!v)
    return 0;
  if (v->is_double())
    return v->get_double();
  if (v->is_int64())
    return static_cast<double>(v->get_int64());
  if (v->is_uint64())
    return static_cast<double>(v->get_uint64());
  return 0;
}

/// The `q`-quantile of sorted `xs` (nearest rank).
double quantile(const std::vector<double>& xs, double q) {
  if (xs.empty())
    return 0;
  auto rank = static_cast<std::size_t>(std::ceil(q * xs.size()));
  return xs[std::min(xs.size() - 1, rank == 0 ? 0 : rank - 1)];
}

std::string seconds_text(double s) {
  char buf[32];
  if (s < 10)
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
  else
    std::snprintf(buf, sizeof(buf), "%.0f s", s);
  return buf;
}

std::string percent(double x) {
  return std::to_string(static_cast<int>(std::lround(x * 100))) + "%";
}

std::string cut(std::string s, std::size_t n) {
  if (s.size() > n)
    s.resize(n);
  return s;
}

} // namespace

std::string_view to_string(attempt_decision x) noexcept {
  switch (x) {
    case attempt_decision::succeeded:
      return "succeeded";
    case attempt_decision::retry:
      return "retry";
    case attempt_decision::fallback:
      return "fallback";
    case attempt_decision::failed:
      return "failed";
    case attempt_decision::stopped:
      return "stopped";
    case attempt_decision::restarted:
      return "restarted";
    case attempt_decision::user_fallback:
      return "user_fallback";
    case attempt_decision::quota_wait:
      return "quota_wait";
    case attempt_decision::not_now:
      return "not_now";
  }
  return "failed";
}

void node_stats::histogram::observe(double x) {
  if (!std::isfinite(x) || x < 0)
    return;
  for (std::size_t i = 0; i < duration_buckets.size(); ++i)
    if (x <= duration_buckets[i])
      ++counts[i];
  ++count;
  sum += x;
}

node_stats::node_stats() : node_stats(limits{}) {}

node_stats::node_stats(limits lim) : lim_(lim) {}

bool node_stats::knows(const std::string& task_id) const {
  return tasks_.count(task_id) > 0;
}

const task_times* node_stats::times(const std::string& task_id) const {
  auto i = tasks_.find(task_id);
  return i == tasks_.end() ? nullptr : &i->second.times;
}

task_clocks node_stats::clocks(double now) const {
  task_clocks out;
  out.now = now;
  out.task_ids.reserve(tasks_.size());
  out.times.reserve(tasks_.size());
  for (auto& [id, track] : tasks_) { // a std::map: ascending
    out.task_ids.push_back(id);
    out.times.push_back(track.times);
  }
  return out;
}

task_clocks node_stats::clocks(double now, const std::string& task_id) const {
  task_clocks out;
  out.now = now;
  if (auto* t = times(task_id)) {
    out.task_ids.push_back(task_id);
    out.times.push_back(*t);
  }
  return out;
}

task_clocks node_stats::clocks(double now,
                               std::vector<std::string> task_ids) const {
  std::sort(task_ids.begin(), task_ids.end());
  task_clocks out;
  out.now = now;
  for (auto& id : task_ids)
    if (auto* t = times(id);
        t && (out.task_ids.empty() || out.task_ids.back() != id)) {
      out.task_ids.push_back(id);
      out.times.push_back(*t);
    }
  return out;
}

const task_times* task_clocks::find(const std::string& task_id) const {
  auto i = std::lower_bound(task_ids.begin(), task_ids.end(), task_id);
  if (i == task_ids.end() || *i != task_id)
    return nullptr;
  return &times[static_cast<std::size_t>(i - task_ids.begin())];
}

node_stats::task_track& node_stats::track(const std::string& task_id) {
  auto i = tasks_.find(task_id);
  if (i != tasks_.end())
    return i->second;
  while (tasks_.size() >= std::max<std::size_t>(1, lim_.max_tasks) &&
         !task_order_.empty()) {
    tasks_.erase(task_order_.front());
    task_order_.pop_front();
  }
  task_order_.push_back(task_id);
  return tasks_[task_id];
}

std::string node_stats::agent_label(const std::string& agent_id) {
  if (agent_labels_.count(agent_id) > 0)
    return agent_id;
  if (agent_labels_.size() < lim_.max_agent_labels) {
    agent_labels_.emplace(agent_id, true);
    return agent_id;
  }
  return "other";
}

void node_stats::settle(task_track& t, attempt_decision d) {
  if (!t.pending)
    return;
  auto rec = std::move(t.pending->rec);
  t.pending.reset();
  rec.decision = d;
  // An attempt the user moved past was not judged: it has no failure class.
  auto cls = rec.cls ? std::string{to_string(*rec.cls)}
             : rec.exit_code == 0 || d == attempt_decision::user_fallback
               ? std::string{"none"}
               : std::string{"unknown"};
  auto agent = agent_label(rec.agent_id);
  ++attempts_[{agent, cls, std::string{to_string(d)}}];
  if (d == attempt_decision::retry)
    ++retries_[{agent, cls}];
  records_.push_back(std::move(rec));
  while (records_.size() > std::max<std::size_t>(1, lim_.max_records))
    records_.pop_front();
}

namespace {

/// What the figures read from one event, from its typed keys (events of
/// this process) or from its JSON (read back from the journal): one path
/// for both, and no JSON rendered and parsed back for the events of this
/// node.
struct event_facts {
  std::string agent_id;
  double duration_s = 0;
  int exit_code = 0;
  bool started = true;
  std::string cls;
  std::string rule;
  std::string line;
  double delay_s = 0;
  int retry_count = 0;
  int max_retries = 0;
  int restart = 0;
  double ran_s = 0;
  bool stable = false;
  std::string agent;
  std::string delay_source;
  bool capped = false;
  std::string reason;
  std::string from;
  std::string to;
  std::string cause;
  std::string mode;
  std::string outcome;
  std::optional<std::string> error;
  /// A `step` event's step and message (a `group` event's change is its
  /// step, how the member ended its cause).
  std::string step;
  std::string message;
  /// A `group` restart's members.
  std::vector<std::string> members;
};

struct typed_facts {
  event_facts& f;

  void operator()(const event_data::attempt_started& d) const {
    f.agent_id = d.agent_id;
  }
  void operator()(const event_data::attempt_exited& d) const {
    f.duration_s = d.duration_s;
    f.exit_code = d.exit_code;
    f.started = d.started;
  }
  void operator()(const event_data::classified& d) const {
    f.cls = to_string(d.c.cls);
    f.rule = d.c.rule;
    f.line = d.c.line;
  }
  void operator()(const event_data::retry_scheduled& d) const {
    f.delay_s = d.delay.delay_s;
    f.retry_count = d.retry_count;
    f.max_retries = d.max_retries;
    f.restart = d.restart;
    f.ran_s = d.ran_s;
    f.stable = d.stable;
    f.agent = d.agent;
    f.delay_source = to_string(d.delay.source);
    f.capped = d.delay.capped;
    f.reason = d.reason;
  }
  void operator()(const event_data::agent_switched& d) const {
    f.from = d.from;
    f.to = d.to;
    f.reason = d.reason;
    f.cause = d.cause;
  }
  void operator()(const event_data::user_stop& d) const {
    f.mode = to_string(d.mode);
  }
  void operator()(const event_data::task_done& d) const {
    f.outcome = to_string(d.result().outcome);
    f.error = d.result().error;
  }
  void operator()(const event_data::escalated& d) const {
    f.outcome = to_string(d.outcome);
  }
  void operator()(const event_data::step& d) const {
    f.step = d.step;
    f.message = d.message;
  }
  void operator()(const event_data::group& d) const {
    f.step = d.change;
    f.cause = d.how;
    f.members = d.members;
  }
  template<class Other>
  void operator()(const Other&) const {
    // Nothing the figures read.
  }
};

std::optional<event_facts> facts_of(const event& ev) {
  event_facts f;
  if (auto* typed = ev.fields()) {
    std::visit(typed_facts{f}, typed->data);
    return f;
  }
  boost::system::error_code ec;
  auto doc = boost::json::parse(ev.json(), ec);
  if (ec || !doc.is_object())
    return std::nullopt;
  auto& obj = doc.get_object();
  f.agent_id = text_at(obj, "agent_id");
  f.duration_s = number_at(obj, "duration_s");
  f.exit_code = static_cast<int>(number_at(obj, "exit_code"));
  if (auto* started = obj.if_contains("started");
      started && started->is_bool() && !started->get_bool())
    f.started = false;
  f.cls = text_at(obj, "class");
  f.rule = text_at(obj, "rule");
  f.line = text_at(obj, "line");
  f.delay_s = number_at(obj, "delay_s");
  f.retry_count = static_cast<int>(number_at(obj, "retry_count"));
  f.max_retries = static_cast<int>(number_at(obj, "max_retries"));
  f.restart = static_cast<int>(number_at(obj, "restart"));
  f.ran_s = number_at(obj, "ran_s");
  if (auto* s = obj.if_contains("stable"); s && s->is_bool())
    f.stable = s->get_bool();
  f.agent = text_at(obj, "agent");
  f.delay_source = text_at(obj, "delay_source");
  if (auto* c = obj.if_contains("capped"); c && c->is_bool())
    f.capped = c->get_bool();
  f.reason = text_at(obj, "reason");
  f.from = text_at(obj, "from");
  f.to = text_at(obj, "to");
  f.cause = text_at(obj, "cause");
  f.mode = text_at(obj, "mode");
  f.outcome = text_at(obj, "outcome");
  if (auto* err = obj.if_contains("error"); err && err->is_string())
    f.error = std::string{err->get_string()};
  f.step = text_at(obj, "step");
  f.message = text_at(obj, "message");
  if (ev.kind == event_kind::group) {
    f.step = text_at(obj, "change");
    f.cause = text_at(obj, "how");
    if (auto* ms = obj.if_contains("members"); ms && ms->is_array())
      for (auto& m : ms->get_array())
        if (m.is_string() && f.members.size() < max_group_members)
          f.members.emplace_back(
            cut(std::string{m.get_string()}, wire::max_id_bytes));
  }
  return f;
}

} // namespace

void node_stats::add(const event& ev) {
  if (ev.kind == event_kind::log)
    return;
  auto facts = facts_of(ev);
  if (!facts)
    return;
  auto& f = *facts;
  switch (ev.kind) {
    case event_kind::log:
      return;
    case event_kind::step:
      // Steps (preflight, gates, delivery) show in the task's events; their
      // verdicts reach the figures as classifications and ends. A quota
      // wait is the decision on the attempt that hit the quota.
      if (f.step == "quota_wait" || f.step == "not_now") {
        auto& t = track(ev.task_id);
        settle(t, f.step == "not_now" ? attempt_decision::not_now
                                      : attempt_decision::quota_wait);
        t.times.last_decision = cut(f.message, max_line_bytes);
      }
      return;
    case event_kind::group:
      // A group's restart decision: each member it restarts is restarted,
      // with the cause (how the member that caused it ended).
      if (f.step == "restart")
        for (auto& m : f.members) {
          auto i = tasks_.find(m);
          auto agent = i == tasks_.end() || i->second.agent_id.empty()
                         ? std::string{"-"}
                         : i->second.agent_id;
          ++restarts_[{agent_label(agent), "group_" + f.cause}];
        }
      return;
    case event_kind::task_submitted: {
      ++submitted_;
      track(ev.task_id).times.submitted_ts = ev.ts;
      return;
    }
    case event_kind::attempt_started: {
      auto& t = track(ev.task_id);
      settle(t, attempt_decision::restarted);
      if (ev.attempt > 1) {
        auto& r = t.restarts;
        auto old = std::find_if(r.begin(), r.end(), [&](double ts) {
          return ts >= ev.ts - restart_window_s;
        });
        r.erase(r.begin(), old);
        if (r.size() == max_restart_times)
          r.erase(r.begin());
        r.push_back(ev.ts);
      }
      t.agent_id = f.agent_id;
      t.times.attempt_started_ts = ev.ts;
      t.times.next_retry_ts = 0;
      return;
    }
    case event_kind::attempt_exited: {
      auto& t = track(ev.task_id);
      settle(t, attempt_decision::restarted);
      pending_attempt p;
      p.rec.task_id = ev.task_id;
      p.rec.agent_id = t.agent_id.empty() ? "unknown" : t.agent_id;
      p.rec.attempt = ev.attempt;
      p.rec.ended_ts = ev.ts;
      p.rec.duration_s = f.duration_s;
      p.rec.exit_code = f.exit_code;
      if (!f.started)
        p.rec.exit_code = p.rec.exit_code == 0 ? -1 : p.rec.exit_code;
      durations_[agent_label(p.rec.agent_id)].observe(p.rec.duration_s);
      if (p.rec.exit_code != 0 && t.first_failure_ts == 0)
        t.first_failure_ts = ev.ts;
      if (p.rec.exit_code != 0) {
        if (t.failing_since_ts == 0)
          t.failing_since_ts = ev.ts;
      } else if (t.failing_since_ts > 0) {
        t.last_recovery_s = ev.ts - t.failing_since_ts;
        t.failing_since_ts = 0;
      }
      t.pending = std::move(p);
      return;
    }
    case event_kind::classified: {
      auto& t = track(ev.task_id);
      if (t.pending) {
        t.pending->rec.cls = parse_error_class(f.cls);
        t.pending->rec.rule = cut(f.rule, max_line_bytes);
        t.pending->rec.line = cut(f.line, max_line_bytes);
        t.pending->judged = true;
      }
      return;
    }
    case event_kind::retry_scheduled: {
      auto& t = track(ev.task_id);
      std::string cls = "unknown";
      if (t.pending && t.pending->rec.cls)
        cls = std::string{to_string(*t.pending->rec.cls)};
      auto delay = f.delay_s;
      t.times.next_retry_ts = ev.ts + delay;
      if (f.restart > 0) {
        // A permanent task restarting after exit 0: not a retry.
        settle(t, attempt_decision::restarted);
        ++restarts_[{agent_label(f.agent), "clean_exit"}];
        t.times.last_decision =
          "restarting (" +
          restart_words(static_cast<std::size_t>(f.restart), f.ran_s,
                        f.stable) +
          ") " + f.agent + " after exit 0, in " + seconds_text(delay) + " (" +
          f.delay_source + (f.capped ? ", capped" : "") + ")";
        return;
      }
      settle(t, attempt_decision::retry);
      t.times.last_decision = "retry " + std::to_string(f.retry_count) + "/" +
                              std::to_string(f.max_retries) + " of " + f.agent +
                              " after " + cls + ", in " + seconds_text(delay) +
                              " (" + f.delay_source +
                              (f.capped ? ", capped" : "") + ")";
      if (!f.reason.empty())
        t.times.last_decision += ": " + f.reason;
      return;
    }
    case event_kind::agent_switched: {
      auto& t = track(ev.task_id);
      auto forced = f.cause == "user";
      settle(t, forced ? attempt_decision::user_fallback
                       : attempt_decision::fallback);
      ++fallbacks_[{agent_label(f.from), agent_label(f.to)}];
      t.times.last_decision = std::string{forced ? "forced " : ""} +
                              "fallback from " + f.from + " to " + f.to;
      if (!f.reason.empty())
        t.times.last_decision += ": " + f.reason;
      return;
    }
    case event_kind::user_stop: {
      auto& mode = f.mode;
      ++user_stops_[mode == "kill" ? "kill" : "cancel"];
      track(ev.task_id).times.last_decision = "user stop (" + mode + ")";
      return;
    }
    case event_kind::task_done: {
      auto& t = track(ev.task_id);
      auto outcome = f.outcome;
      if (outcome != "succeeded" && outcome != "failed" && outcome != "stopped")
        outcome = "failed";
      settle(t, outcome == "succeeded" ? attempt_decision::succeeded
                : outcome == "stopped" ? attempt_decision::stopped
                                       : attempt_decision::failed);
      ++finished_[outcome];
      if (outcome == "succeeded" && t.first_failure_ts > 0)
        recovery_.observe(ev.ts - t.first_failure_ts);
      t.first_failure_ts = 0;
      t.times.finished_ts = ev.ts;
      t.times.next_retry_ts = 0;
      if (outcome == "succeeded")
        t.times.last_decision = "succeeded on attempt " +
                                std::to_string(ev.attempt) + " (" +
                                (t.agent_id.empty() ? "?" : t.agent_id) + ")";
      else if (f.error)
        t.times.last_decision = *f.error;
      return;
    }
    case event_kind::escalated: {
      auto outcome = f.outcome;
      if (outcome != "succeeded" && outcome != "failed" && outcome != "stopped")
        outcome = "failed";
      ++escalations_[outcome];
      return;
    }
    case event_kind::warning:
      ++warnings_;
      return;
  }
}

std::vector<agent_summary> node_stats::agents(double now, double window_s,
                                              const node_health& health) const {
  std::map<std::string, agent_summary> by_agent;
  std::map<std::string, std::vector<double>> durations;
  for (auto& r : records_) {
    if (window_s > 0 && r.ended_ts < now - window_s)
      continue;
    auto& a = by_agent[r.agent_id];
    a.agent_id = r.agent_id;
    ++a.attempts;
    durations[r.agent_id].push_back(r.duration_s);
    if (r.decision == attempt_decision::stopped ||
        r.decision == attempt_decision::user_fallback) {
      ++a.stopped;
    } else if (r.exit_code == 0) {
      ++a.succeeded;
    } else {
      ++a.failed;
      auto cls = r.cls ? std::string{to_string(*r.cls)} : "unknown";
      ++a.failure_classes[cls];
      a.last_failure = r;
    }
  }
  for (auto& b : health.breakers)
    if (auto i = by_agent.find(b.agent_id); i != by_agent.end())
      i->second.breaker = b.state;
  std::vector<agent_summary> out;
  for (auto& [id, a] : by_agent) {
    auto judged = a.succeeded + a.failed;
    a.success_rate =
      judged > 0 ? static_cast<double>(a.succeeded) / judged : 0.0;
    a.success_lower_bound = wilson_lower_bound(a.succeeded, judged);
    auto& d = durations[id];
    std::sort(d.begin(), d.end());
    a.median_duration_s = quantile(d, 0.5);
    a.p90_duration_s = quantile(d, 0.9);
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<restarting_task> node_stats::restarting(double now,
                                                    std::size_t* count) const {
  std::vector<restarting_task> out;
  for (const auto& [id, t] : tasks_) {
    auto n =
      std::count_if(t.restarts.begin(), t.restarts.end(), [&](double ts) {
        return ts >= now - restart_window_s && ts <= now;
      });
    if (n < restarting_often)
      continue;
    restarting_task r;
    r.task_id = id;
    r.agent_id = t.agent_id;
    r.restarts = static_cast<int>(n);
    r.last_restart_ts = t.restarts.back();
    if (t.last_recovery_s >= 0)
      r.last_recovery_s = t.last_recovery_s;
    if (t.failing_since_ts > 0)
      r.failing_since_ts = t.failing_since_ts;
    out.push_back(std::move(r));
  }
  if (count != nullptr)
    *count = out.size();
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
    return x.restarts != y.restarts ? x.restarts > y.restarts
                                    : x.task_id < y.task_id;
  });
  if (out.size() > max_restarting_listed)
    out.resize(max_restarting_listed);
  return out;
}

std::vector<fallback_suggestion>
node_stats::fallback_order(const std::vector<agent_summary>& agents) {
  std::vector<const agent_summary*> order;
  for (auto& a : agents)
    order.push_back(&a);
  auto open = [](const agent_summary* a) {
    return a->breaker && *a->breaker == breaker_state::open;
  };
  std::stable_sort(order.begin(), order.end(), [&](auto* x, auto* y) {
    if (open(x) != open(y))
      return !open(x);
    if (x->success_lower_bound != y->success_lower_bound)
      return x->success_lower_bound > y->success_lower_bound;
    if (x->median_duration_s != y->median_duration_s)
      return x->median_duration_s < y->median_duration_s;
    return x->agent_id < y->agent_id;
  });
  std::vector<fallback_suggestion> out;
  for (auto* a : order) {
    auto judged = a->succeeded + a->failed;
    std::string why;
    if (judged == 0) {
      why = "no judged attempts in the window";
    } else {
      why = "succeeded " + std::to_string(a->succeeded) + " of " +
            std::to_string(judged) + " (" + percent(a->success_rate) +
            ", at least " + percent(a->success_lower_bound) +
            " at 95% confidence), median " + seconds_text(a->median_duration_s);
      if (!a->failure_classes.empty()) {
        auto top = std::max_element(
          a->failure_classes.begin(), a->failure_classes.end(),
          [](auto& x, auto& y) { return x.second < y.second; });
        why += ", mostly " + top->first + " failures";
      }
    }
    if (open(a))
      why = "circuit breaker open; " + why;
    out.push_back({a->agent_id, std::move(why)});
  }
  return out;
}

} // namespace tasksup

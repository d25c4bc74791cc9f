#include "tasksup/actors/node_stats.hpp"

#include "tasksup/actors/events.hpp"
#include "tasksup/supervisor/time_words.hpp"

#include "tasksup/supervisor/json_writer.hpp"

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

/// A time as a number when positive, else null (an unknown time).
void time_or_null(json_writer& w, double x) {
  if (x > 0)
    w.number(x);
  else
    w.null();
}

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

/// Wilson score interval lower bound at 95 %.
double wilson_lower(int ok, int n) {
  if (n <= 0)
    return 0;
  constexpr double z = 1.96;
  double p = static_cast<double>(ok) / n;
  double z2n = z * z / n;
  double centre = p + z2n / 2;
  double margin = z * std::sqrt(p * (1 - p) / n + z2n / (4.0 * n));
  return std::max(0.0, (centre - margin) / (1 + z2n));
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

/// Prometheus sample value: integers plainly, others with enough digits.
std::string sample(double x) {
  if (std::isnan(x))
    return "NaN";
  if (std::isinf(x))
    return x > 0 ? "+Inf" : "-Inf";
  std::string out;
  append_json_number(out, x);
  if (out.size() > 2 && out.compare(out.size() - 2, 2, ".0") == 0)
    out.resize(out.size() - 2);
  return out;
}

/// Writes the HELP and TYPE lines of one family.
void family(std::string& out, std::string_view name, std::string_view type,
            std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

using labels_t = std::vector<std::pair<std::string_view, std::string_view>>;

void line(std::string& out, std::string_view name, const labels_t& labels,
          double value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    bool first = true;
    for (auto& [k, v] : labels) {
      if (!first)
        out += ',';
      first = false;
      out += k;
      out += "=\"";
      out += prometheus_label_value(v);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += sample(value);
  out += '\n';
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

std::string prometheus_label_value(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
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
  /// A `step` event's step and message.
  std::string step;
  std::string message;
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
    case event_kind::task_submitted: {
      ++submitted_;
      track(ev.task_id).times.submitted_ts = ev.ts;
      return;
    }
    case event_kind::attempt_started: {
      auto& t = track(ev.task_id);
      settle(t, attempt_decision::restarted);
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
    a.success_lower_bound = wilson_lower(a.succeeded, judged);
    auto& d = durations[id];
    std::sort(d.begin(), d.end());
    a.median_duration_s = quantile(d, 0.5);
    a.p90_duration_s = quantile(d, 0.9);
    out.push_back(std::move(a));
  }
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

std::string node_stats::prometheus(const std::vector<task_status>& tasks,
                                   const node_health& health,
                                   const journal_figures* journal) const {
  std::string out;
  out.reserve(4096);
  family(out, "tasksup_tasks_submitted_total", "counter",
         "Tasks submitted to this node.");
  line(out, "tasksup_tasks_submitted_total", {}, submitted_);

  family(out, "tasksup_tasks_finished_total", "counter",
         "Tasks finished, by outcome.");
  for (auto o : {"succeeded", "failed", "stopped"}) {
    auto i = finished_.find(o);
    line(out, "tasksup_tasks_finished_total", {{"outcome", o}},
         i == finished_.end() ? 0 : i->second);
  }

  family(out, "tasksup_attempts_total", "counter",
         "Finished attempts by agent, failure class (none for success and "
         "for a fallback the user forced) and the decision that followed.");
  for (auto& [k, n] : attempts_)
    line(out, "tasksup_attempts_total",
         {{"agent", std::get<0>(k)},
          {"class", std::get<1>(k)},
          {"decision", std::get<2>(k)}},
         n);

  family(out, "tasksup_retries_total", "counter",
         "Retries scheduled, by agent and failure class.");
  for (auto& [k, n] : retries_)
    line(out, "tasksup_retries_total",
         {{"agent", k.first}, {"class", k.second}}, n);

  family(out, "tasksup_restarts_total", "counter",
         "Restarts that were no retry of a failure (a permanent task's "
         "exit 0: cause clean_exit), by agent and cause.");
  for (auto& [k, n] : restarts_)
    line(out, "tasksup_restarts_total",
         {{"agent", k.first}, {"cause", k.second}}, n);

  family(out, "tasksup_fallbacks_total", "counter",
         "Switches from one agent to the next in a task's chain.");
  for (auto& [k, n] : fallbacks_)
    line(out, "tasksup_fallbacks_total", {{"from", k.first}, {"to", k.second}},
         n);

  family(out, "tasksup_escalations_total", "counter",
         "Results escalated to the parent, by outcome.");
  for (auto o : {"succeeded", "failed", "stopped"}) {
    auto i = escalations_.find(o);
    line(out, "tasksup_escalations_total", {{"outcome", o}},
         i == escalations_.end() ? 0 : i->second);
  }

  family(out, "tasksup_user_stops_total", "counter",
         "Stop requests by mode (cancel or kill).");
  for (auto m : {"cancel", "kill"}) {
    auto i = user_stops_.find(m);
    line(out, "tasksup_user_stops_total", {{"mode", m}},
         i == user_stops_.end() ? 0 : i->second);
  }

  family(out, "tasksup_warnings_total", "counter",
         "Warnings (agent chain problems).");
  line(out, "tasksup_warnings_total", {}, warnings_);

  family(out, "tasksup_tasks", "gauge", "Tasks the node knows, by state.");
  std::array<int, detail::enum_size<task_state>::value> by_state{};
  for (auto& s : tasks)
    if (auto i = static_cast<std::size_t>(s.state); i < by_state.size())
      ++by_state[i];
  for (std::size_t i = 0; i < by_state.size(); ++i)
    line(out, "tasksup_tasks",
         {{"state", to_string(static_cast<task_state>(i))}}, by_state[i]);

  family(out, "tasksup_agent_breaker_state", "gauge",
         "1 for the current circuit-breaker state of each agent, else 0.");
  std::size_t breakers = 0;
  for (auto& b : health.breakers) {
    // Agent ids come from task files: bound the label set.
    if (++breakers > lim_.max_agent_labels)
      break;
    for (auto st :
         {breaker_state::closed, breaker_state::open, breaker_state::half_open})
      line(out, "tasksup_agent_breaker_state",
           {{"agent", b.agent_id}, {"state", to_string(st)}},
           b.state == st ? 1 : 0);
  }

  family(out, "tasksup_account_quota_reset_timestamp_seconds", "gauge",
         "When each account closed for a used-up usage quota reopens "
         "(seconds since the Unix epoch); accounts that are open are not "
         "listed.");
  std::size_t accounts = 0;
  for (auto& q : health.quotas) {
    if (++accounts > lim_.max_agent_labels)
      break;
    line(out, "tasksup_account_quota_reset_timestamp_seconds",
         {{"account", q.account}}, q.reset_at);
  }

  family(out, "tasksup_retry_budget_limited", "gauge",
         "1 when the node's retry budget has a capacity, 0 when unlimited.");
  line(out, "tasksup_retry_budget_limited", {}, health.budget_limited ? 1 : 0);
  if (health.budget_limited) {
    family(out, "tasksup_retry_budget_tokens", "gauge",
           "Retry tokens available now.");
    line(out, "tasksup_retry_budget_tokens", {}, health.budget_tokens);
    family(out, "tasksup_retry_budget_capacity", "gauge",
           "Retry tokens the budget holds when full.");
    line(out, "tasksup_retry_budget_capacity", {}, health.budget_capacity);
  }

  family(out, "tasksup_attempt_slots_in_use", "gauge",
         "Attempt slots held by tasks (running or judging an attempt).");
  line(out, "tasksup_attempt_slots_in_use", {}, health.slots_in_use);
  family(out, "tasksup_attempt_slots", "gauge",
         "Attempts the node runs at once at most (max_concurrent).");
  line(out, "tasksup_attempt_slots", {}, health.slot_limit);
  family(out, "tasksup_queue_length", "gauge",
         "Tasks waiting for an attempt slot.");
  line(out, "tasksup_queue_length", {}, health.queued);

  auto hist = [&](std::string_view name, const histogram& h,
                  const labels_t& labels) {
    std::string bucket{name};
    bucket += "_bucket";
    for (std::size_t i = 0; i < duration_buckets.size(); ++i) {
      auto le = sample(duration_buckets[i]);
      auto l = labels;
      l.emplace_back("le", le);
      line(out, bucket, l, h.counts[i]);
    }
    auto l = labels;
    l.emplace_back("le", "+Inf");
    line(out, bucket, l, h.count);
    line(out, std::string{name} + "_sum", labels, h.sum);
    line(out, std::string{name} + "_count", labels, h.count);
  };
  family(out, "tasksup_attempt_duration_seconds", "histogram",
         "How long attempts ran, by agent.");
  for (auto& [agent, h] : durations_)
    hist("tasksup_attempt_duration_seconds", h, {{"agent", agent}});
  family(out, "tasksup_time_to_recovery_seconds", "histogram",
         "From a task's first failed attempt to its success.");
  hist("tasksup_time_to_recovery_seconds", recovery_, {});

  family(out, "tasksup_journal_enabled", "gauge",
         "1 when the node keeps a journal (and its figures follow), else 0.");
  line(out, "tasksup_journal_enabled", {}, journal != nullptr ? 1 : 0);
  if (journal != nullptr)
    append_journal(out, *journal);
  return out;
}

void node_stats::append_journal(std::string& out, const journal_figures& j) {
  family(out, "tasksup_journal_size_bytes", "gauge",
         "Size of the journal's database file and write-ahead log.");
  line(out, "tasksup_journal_size_bytes", {}, static_cast<double>(j.bytes));
  family(out, "tasksup_journal_tasks", "gauge",
         "Tasks stored in the journal, finished or not.");
  line(out, "tasksup_journal_tasks", {{"state", "unfinished"}},
       static_cast<double>(j.unfinished));
  line(out, "tasksup_journal_tasks", {{"state", "finished"}},
       static_cast<double>(j.tasks - j.unfinished));
  family(out, "tasksup_journal_records_written_total", "counter",
         "Writes committed to the journal, by kind (task, input of a task "
         "machine, event, end of a task, node state).");
  for (std::size_t i = 0; i < journal_write_kinds.size(); ++i)
    line(out, "tasksup_journal_records_written_total",
         {{"kind", journal_write_kinds[i]}},
         i < j.written.size() ? static_cast<double>(j.written[i]) : 0);
  family(out, "tasksup_journal_commits_total", "counter",
         "Group commits: every write that arrived together goes to the "
         "journal's log in one transaction.");
  line(out, "tasksup_journal_commits_total", {},
       static_cast<double>(j.commits));
  family(out, "tasksup_journal_syncs_total", "counter",
         "Syncs of the journal to disk: one before a client is told of "
         "what was committed (a submission, a control request, a task's end "
         "or delivery), none for an attempt's progress.");
  line(out, "tasksup_journal_syncs_total", {}, static_cast<double>(j.syncs));
  family(out, "tasksup_journal_commit_failures_total", "counter",
         "Commits that failed (the writes are kept and retried every "
         "second).");
  line(out, "tasksup_journal_commit_failures_total", {},
       static_cast<double>(j.commit_failures));
  family(out, "tasksup_journal_commit_duration_seconds", "histogram",
         "How long a group commit took (its writes into the log; syncs to "
         "disk run beside the next commits).");
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < journal_commit_buckets.size(); ++i) {
    cumulative += i < j.commit_buckets.size() ? j.commit_buckets[i] : 0;
    auto le = sample(journal_commit_buckets[i]);
    line(out, "tasksup_journal_commit_duration_seconds_bucket", {{"le", le}},
         static_cast<double>(cumulative));
  }
  line(out, "tasksup_journal_commit_duration_seconds_bucket", {{"le", "+Inf"}},
       static_cast<double>(j.commits));
  line(out, "tasksup_journal_commit_duration_seconds_sum", {},
       j.commit_seconds);
  line(out, "tasksup_journal_commit_duration_seconds_count", {},
       static_cast<double>(j.commits));
  family(out, "tasksup_journal_pending_writes", "gauge",
         "Writes waiting for the next commit.");
  line(out, "tasksup_journal_pending_writes", {},
       static_cast<double>(j.pending));
  family(out, "tasksup_journal_failing", "gauge",
         "1 while commits fail: new submissions are refused, accepted work "
         "is kept and retried.");
  line(out, "tasksup_journal_failing", {}, j.failing ? 1 : 0);
  family(out, "tasksup_journal_disk_full", "gauge",
         "1 while commits fail because the disk (or the journal's size "
         "limit) is full.");
  line(out, "tasksup_journal_disk_full", {}, j.disk_full ? 1 : 0);
  family(out, "tasksup_journal_pruned_tasks_total", "counter",
         "Finished tasks removed from the journal by retention (age and "
         "count).");
  line(out, "tasksup_journal_pruned_tasks_total", {},
       static_cast<double>(j.pruned));
}

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
  w.end_object();
  return w.take();
}

namespace {

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

std::string
node_stats::cluster_prometheus(const std::vector<node_load>& nodes,
                               const std::vector<task_status>& tasks) {
  std::string out;
  family(out, "tasksup_cluster_nodes", "gauge",
         "Worker nodes joined to this coordinator.");
  line(out, "tasksup_cluster_nodes", {}, static_cast<double>(nodes.size()));
  // Sorted by name; past the label cap, the rest are summed as "other".
  std::map<std::string, std::pair<double, double>> by_node;
  std::pair<double, double> other{0, 0};
  bool any_other = false;
  auto sorted = nodes;
  std::sort(sorted.begin(), sorted.end(),
            [](const node_load& a, const node_load& b) {
              return a.offer.name < b.offer.name;
            });
  for (auto& n : sorted) {
    auto* slot =
      by_node.size() < max_node_labels ? &by_node[n.offer.name] : &other;
    any_other = any_other || slot == &other;
    slot->first += n.offer.max_concurrent;
    slot->second += n.running;
  }
  family(out, "tasksup_node_slots", "gauge",
         "Attempt slots a worker node offers (max_concurrent).");
  for (auto& [name, v] : by_node)
    line(out, "tasksup_node_slots", {{"node", name}}, v.first);
  if (any_other)
    line(out, "tasksup_node_slots", {{"node", "other"}}, other.first);
  family(out, "tasksup_node_slots_in_use", "gauge",
         "Attempts placed on a worker node that still run.");
  for (auto& [name, v] : by_node)
    line(out, "tasksup_node_slots_in_use", {{"node", name}}, v.second);
  if (any_other)
    line(out, "tasksup_node_slots_in_use", {{"node", "other"}}, other.second);
  family(out, "tasksup_placement_waiting", "gauge",
         "Queued tasks waiting for a worker node that fits and has a free "
         "slot (0 without worker nodes).");
  double waiting = 0;
  if (!nodes.empty())
    for (auto& t : tasks)
      if (t.state == task_state::queued && !t.waiting_for.empty())
        ++waiting;
  line(out, "tasksup_placement_waiting", {}, waiting);
  return out;
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

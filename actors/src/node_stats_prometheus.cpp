#include "tasksup/actors/node_stats.hpp"

// node_stats' figures as the Prometheus text exposition (format 0.0.4):
// what `/metrics` serves.

#include "tasksup/supervisor/json_writer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tasksup {

namespace {

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
         "Restarts that were no retry of a failure, by agent and cause: a "
         "permanent task's exit 0 (clean_exit), or a group's restart of its "
         "member (group_failed, group_normal, group_stopped: how the member "
         "that caused it ended).");
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

std::string node_stats::restarting_prometheus(double now) const {
  // How many, not which: no task id is a label (`tasksup agents` and the
  // dashboard name them).
  std::string out;
  std::size_t count = 0;
  restarting(now, &count);
  family(out, "tasksup_tasks_restarting_often", "gauge",
         "Tasks that started at least 3 attempts after their first in the "
         "last hour.");
  line(out, "tasksup_tasks_restarting_often", {}, static_cast<double>(count));
  return out;
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

} // namespace tasksup

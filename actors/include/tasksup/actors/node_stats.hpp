#pragma once

// What an operator looks at: figures folded from a node's event stream.
// `node_stats` is fed every event the registry publishes (or replays from a
// task's history) and keeps counters and histograms for Prometheus, the
// times of each task for the dashboard (age, next retry), and a bounded
// record of finished attempts for per-agent statistics. It reads no clock
// and does no I/O: callers pass `now`.

#include "tasksup/actors/journal_figures.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/placement.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace tasksup {

/// What the supervisor decided after an attempt ended.
enum class attempt_decision : std::uint8_t {
  /// Exit 0: the task succeeded.
  succeeded,
  /// Retried with the same agent after a backoff.
  retry,
  /// Moved on to the next agent of the chain.
  fallback,
  /// The task failed (fatal class, retries and agents exhausted, limits).
  failed,
  /// The user stopped the task.
  stopped,
  /// A new attempt started without a recorded decision (`permanent` tasks).
  restarted,
  /// The user forced a fallback: not the agent's failure.
  user_fallback,
  /// The agent's quota was used up: the task waits for its reset.
  quota_wait,
  /// The agent said "not now" (a rule): the task waits, spending nothing.
  not_now,
};

/// "succeeded", "retry", "fallback", "failed", "stopped", "restarted",
/// "user_fallback", "quota_wait" or "not_now".
std::string_view to_string(attempt_decision x) noexcept;

/// One finished attempt as the statistics keep it.
struct attempt_record {
  std::string task_id;
  std::string agent_id;
  int attempt = 0;
  /// When it exited (seconds since the epoch) and how long it ran.
  double ended_ts = 0;
  double duration_s = 0;
  int exit_code = 0;
  /// The classification of a failure (absent on success).
  std::optional<error_class> cls;
  std::string rule;
  /// The matched output line, cut to `node_stats::max_line_bytes`.
  std::string line;
  attempt_decision decision = attempt_decision::failed;
};

/// One agent's figures over a window.
struct agent_summary {
  std::string agent_id;
  /// Attempts that ended in the window, and of those: succeeded, failed,
  /// stopped by the user or moved past by a forced fallback (left out of
  /// the success rate: not the agent's
  /// doing).
  int attempts = 0;
  int succeeded = 0;
  int failed = 0;
  int stopped = 0;
  /// succeeded / (succeeded + failed); 0 when nothing was judged.
  double success_rate = 0;
  /// The Wilson score lower bound (95 %) of the success rate: a rate from
  /// few attempts counts for less than the same rate from many.
  double success_lower_bound = 0;
  double median_duration_s = 0;
  double p90_duration_s = 0;
  /// Failures by class name.
  std::map<std::string, int> failure_classes;
  std::optional<attempt_record> last_failure;
  /// The agent's circuit breaker, when the registry has state for it.
  std::optional<breaker_state> breaker;
};

/// A task that started new attempts often lately: a crash loop, or a
/// loop member that keeps restarting.
struct restarting_task {
  std::string task_id;
  /// The agent of its latest attempt.
  std::string agent_id;
  /// Attempts it started after its first one within the last hour.
  int restarts = 0;
  double last_restart_ts = 0;
  /// How long its latest recovery took: from the end of a failed attempt
  /// to the end of the next attempt that exited 0 (none yet: absent).
  std::optional<double> last_recovery_s;
  /// Set while it has not recovered: when the first failed attempt since
  /// its last success ended.
  std::optional<double> failing_since_ts;
};

/// The agents in the order a task's fallback chain should try them, each
/// with the reason for its place.
struct fallback_suggestion {
  std::string agent_id;
  std::string why;
};

/// The times of every task the statistics keep, with the node's clock: the
/// answer to `clock_atom`, which `status` on the node's own machine reads
/// instead of the view's JSON. Local to a node (not registered for the
/// wire).
struct task_clocks {
  double now = 0;
  /// Ascending.
  std::vector<std::string> task_ids;
  /// The times of `task_ids[i]` at `i`.
  std::vector<task_times> times;

  /// The times of `task_id`, or null.
  const task_times* find(const std::string& task_id) const;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_clocks& x) {
  return f(caf::meta::type_name("task_clocks"), x.now, x.task_ids, x.times);
}

/// Figures folded from events. Bounded: at most `max_agent_labels` agent ids
/// become metric labels (the rest count as "other": agent ids come from
/// task files, which anyone who can submit writes), at most `max_records`
/// finished attempts and `max_tasks` tasks are kept, oldest first out.
class node_stats {
public:
  /// Bounds on what is kept.
  struct limits {
    std::size_t max_agent_labels = 64;
    std::size_t max_records = 20000;
    std::size_t max_tasks = 20000;
  };

  /// Upper bounds of the duration histograms, in seconds.
  static constexpr std::array<double, 11> duration_buckets{
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 14400};

  /// Matched lines are cut to this many bytes.
  static constexpr std::size_t max_line_bytes = 240;

  node_stats();
  explicit node_stats(limits lim);

  /// Folds one event in (log lines are ignored).
  void add(const event& ev);

  /// Whether any event of `task_id` was folded in (and not evicted).
  bool knows(const std::string& task_id) const;

  /// The task's times, or null.
  const task_times* times(const std::string& task_id) const;

  /// Every task's times, with `now` as the clock.
  task_clocks clocks(double now) const;

  /// The times of `task_id` alone (none when it is unknown).
  task_clocks clocks(double now, const std::string& task_id) const;

  /// The times of those of `task_ids` it knows.
  task_clocks clocks(double now, std::vector<std::string> task_ids) const;

  /// Finished attempts kept, oldest first.
  const std::deque<attempt_record>& records() const noexcept {
    return records_;
  }

  /// Per-agent figures over the attempts that ended in
  /// [`now - window_s`, `now`] (`window_s` <= 0: every kept attempt), with
  /// the breaker states of `health`; sorted by agent id.
  std::vector<agent_summary> agents(double now, double window_s,
                                    const node_health& health) const;

  /// A task restarts often with this many new attempts after its first
  /// within `restart_window_s`.
  static constexpr int restarting_often = 3;
  static constexpr double restart_window_s = 3600;
  /// Tasks listed as restarting often, at most.
  static constexpr std::size_t max_restarting_listed = 10;
  /// Restart times kept per task (the oldest go first).
  static constexpr std::size_t max_restart_times = 256;

  /// The tasks that restarted often in the hour before `now`
  /// (`restarting_often` or more), most restarts first (then by id), at
  /// most `max_restarting_listed`; `count` (when given) gets how many there
  /// are in all.
  std::vector<restarting_task> restarting(double now,
                                          std::size_t* count = nullptr) const;

  /// `restarting(now)` for Prometheus: how many tasks restart often
  /// (`tasksup_tasks_restarting_often`; no task id is a label).
  std::string restarting_prometheus(double now) const;

  /// The suggested fallback order for `agents`: closed breakers first, then
  /// by the lower bound of the success rate, then the median duration.
  static std::vector<fallback_suggestion>
  fallback_order(const std::vector<agent_summary>& agents);

  /// The Prometheus text exposition (format 0.0.4) of the counters and
  /// histograms, the task states of `tasks`, the figures of `health` and,
  /// for a node with a journal, those of `journal`.
  std::string prometheus(const std::vector<task_status>& tasks,
                         const node_health& health,
                         const journal_figures* journal = nullptr) const;

  /// Worker node names that become `node` label values at most; the rest
  /// are summed under "other" (names come from the joining nodes).
  static constexpr std::size_t max_node_labels = 64;

  /// The cluster's families: worker nodes joined
  /// (`tasksup_cluster_nodes`), each node's slots and slots in use
  /// (`tasksup_node_slots{node}`, `tasksup_node_slots_in_use{node}`, by
  /// name, at most `max_node_labels` names), and queued tasks that wait
  /// for a fitting worker node (`tasksup_placement_waiting`).
  static std::string cluster_prometheus(const std::vector<node_load>& nodes,
                                        const std::vector<task_status>& tasks);

  /// `agents(...)`, the fallback order and `restarting(now)` as one JSON
  /// object.
  std::string agents_json(double now, double window_s,
                          const node_health& health) const;

  /// Every task of `tasks` with its times, as a JSON object for the
  /// dashboard's list (`now` is the node's clock, for countdowns).
  std::string tasks_json(const std::vector<task_status>& tasks,
                         double now) const;

  /// One page of the list, newest first (by submission time, then id):
  /// at most `limit` tasks after the task `after` (from the start when it
  /// is empty or unknown), with `total`, the counts by state of all of them,
  /// and `next` (the id to pass as `after` for the following page, or null).
  std::string tasks_page_json(std::vector<task_status> tasks, double now,
                              std::size_t limit,
                              const std::string& after) const;

  /// One task with its events (`history`, as the registry keeps them).
  std::string task_json(const task_status& status,
                        const std::vector<event>& history, double now) const;

private:
  /// The journal's families of `prometheus`.
  static void append_journal(std::string& out, const journal_figures& j);

  /// A finished attempt waiting for the decision that follows it.
  struct pending_attempt {
    attempt_record rec;
    bool judged = false;
  };

  /// What is tracked per task.
  struct task_track {
    task_times times;
    std::string agent_id;
    std::optional<pending_attempt> pending;
    /// The end of the first failed attempt since the last success.
    double first_failure_ts = 0;
    /// The same, reset by an attempt that exits 0 (not only by the task's
    /// success): what `restarting_task` reports.
    double failing_since_ts = 0;
    double last_recovery_s = -1;
    /// When it started attempts after its first, within the last hour of
    /// the latest one, oldest first.
    std::vector<double> restarts;
  };

  /// A fixed-bucket histogram.
  struct histogram {
    std::array<std::uint64_t, duration_buckets.size()> counts{};
    std::uint64_t count = 0;
    double sum = 0;
    void observe(double x);
  };

  task_track& track(const std::string& task_id);
  void settle(task_track& t, attempt_decision d);
  std::string agent_label(const std::string& agent_id);

  limits lim_;
  std::map<std::string, task_track> tasks_;
  std::deque<std::string> task_order_;
  std::deque<attempt_record> records_;
  std::map<std::string, bool> agent_labels_;

  std::uint64_t submitted_ = 0;
  std::uint64_t warnings_ = 0;
  std::map<std::string, std::uint64_t> finished_;
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t>
    attempts_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> retries_;
  /// Restarts that were no retry, by agent and cause (`clean_exit`).
  std::map<std::pair<std::string, std::string>, std::uint64_t> restarts_;
  std::map<std::pair<std::string, std::string>, std::uint64_t> fallbacks_;
  std::map<std::string, std::uint64_t> escalations_;
  std::map<std::string, std::uint64_t> user_stops_;
  std::map<std::string, histogram> durations_;
  histogram recovery_;
};

/// Escapes a Prometheus label value (backslash, double quote, newline).
std::string prometheus_label_value(std::string_view text);

} // namespace tasksup

#pragma once

#include "tasksup/supervisor/time_words.hpp"

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tasksup {
struct event;
} // namespace tasksup

namespace tasksup::app {

/// Turns the JSON event stream into lines a person can follow:
/// each attempt with its agent, the classification with rule and matched
/// line, `retrying (1/3) in 15s`, agent switches and a final summary. A pure
/// function of the events, so `run`, `events --follow` and a saved JSON-lines
/// file all render alike. Unknown events and missing keys are tolerated:
/// events come from other nodes and other versions. An event built in this
/// process renders from its typed keys (`event::fields`), with the same
/// text as from its JSON and without parsing it back.
class progress_view {
public:
  struct options {
    /// Show the agents' own output lines (indented under their attempt).
    bool show_output = true;
    /// Prefix every line with `[task_id] ` (for streams of many tasks).
    bool prefix_task = false;
    /// ANSI colours (only for terminals).
    bool color = false;
    /// Prefix every line with the event's time in ISO 8601 (UTC), e.g.
    /// `2026-11-22T20:42:00Z ` (events without a time get none).
    bool show_time = false;
  };

  progress_view();
  explicit progress_view(options opts);

  /// Renders one event; returns the lines to print (possibly none).
  std::vector<std::string> render(const boost::json::object& event);

  /// What the caller adds to `task_done` for the human view only (the
  /// JSON keys `duration_s` and `log_dir` in the JSON form).
  struct extra {
    /// The task's wall time as the caller saw it.
    std::optional<double> duration_s;
    /// Where the attempts' output is kept; empty for none.
    std::string log_dir;
  };

  /// Renders one event from its typed keys; an event without them (read
  /// back from JSON) is rendered from its JSON.
  std::vector<std::string> render(const event& ev, const extra& more = {});

  /// The retry currently being waited out, if any: its task, the text
  /// (`retrying (1/3)`) and its delay in seconds, for a live countdown.
  struct pending_retry {
    std::string task_id;
    std::string text;
    double delay_s = 0;
  };

  /// The last scheduled retry not yet followed by an attempt or the end.
  const std::optional<pending_retry>& pending() const noexcept {
    return pending_;
  }

  /// The attempt running now (started, not yet exited): its words
  /// (`attempt 2: codex`), for a live elapsed-time line.
  const std::optional<std::string>& running() const noexcept {
    return running_;
  }

private:
  /// `task_done`'s lines as text, from either form.
  struct done_text {
    std::string outcome;
    std::optional<double> exit_code;
    std::string error;
    /// "  agent used: ..., attempts: ..."; none without metadata.
    std::optional<std::string> summary;
    std::optional<double> duration_s;
    /// Whether the result lists artifacts (the list keeps the text ones).
    bool list_artifacts = false;
    std::vector<std::string> artifacts;
    std::string log_dir;
  };

  // One formatter per kind, shared by the JSON and the typed form so that
  // both read alike; strings are raw (made printable here).
  std::string prefix(std::optional<double> ts,
                     const std::string& task_id) const;
  std::string paint(const char* code, const std::string& text) const;
  void started(std::vector<std::string>& out, const std::string& pre,
               const std::string& attempt, const std::string& agent,
               const std::string& cli, std::string where);
  std::string classified(const std::string& cls, const std::string& rule,
                         const std::string& line,
                         std::optional<double> hint) const;
  /// `restart` > 0: a permanent task's restart after exit 0, not a retry,
  /// after a run of `ran_s` (`stable`: long enough to reset its backoff).
  void retrying(std::vector<std::string>& out, const std::string& pre,
                const std::string& task_id, const std::string& n,
                const std::string& max, const std::string& agent, double delay,
                int restart, double ran_s, bool stable);
  void switched(std::vector<std::string>& out, const std::string& pre,
                const std::string& from, const std::string& to,
                std::string reason);
  void stopped(std::vector<std::string>& out, const std::string& pre,
               const std::string& mode, const std::string& message);
  std::string step_line(bool passed, const std::string& step,
                        const std::string& name,
                        const std::string& message) const;
  void done(std::vector<std::string>& out, const std::string& pre,
            const done_text& d);
  /// A `group` event's line (nothing for a change it does not know).
  void group(std::vector<std::string>& out, const std::string& pre,
             const std::string& change, const std::string& member,
             const std::string& how, const std::vector<std::string>& members,
             double restarts, const std::string& outcome) const;
  static std::string summary(const std::string& agent_used,
                             const std::string& agent_id,
                             const std::string& attempts,
                             const std::string& retries,
                             const std::string& fallbacks);

  options opts_;
  std::optional<pending_retry> pending_;
  std::optional<std::string> running_;
};

/// Formats seconds for people: `450ms`, `15s`, `1m30s`, `2h05m`.
using tasksup::human_duration;

} // namespace tasksup::app

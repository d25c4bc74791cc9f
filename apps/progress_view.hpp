#pragma once

#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tasksup::app {

/// Turns the JSON event stream of SPEC §9 into lines a person can follow:
/// each attempt with its agent, the classification with rule and matched
/// line, `retrying (1/3) in 15s`, agent switches and a final summary. A pure
/// function of the events, so `run`, `events --follow` and a saved JSON-lines
/// file all render alike. Unknown events and missing keys are tolerated:
/// events come from other nodes and other versions.
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
  std::string prefix(const boost::json::object& event) const;
  std::string paint(const char* code, const std::string& text) const;

  options opts_;
  std::optional<pending_retry> pending_;
  std::optional<std::string> running_;
};

/// Formats seconds for people: `450ms`, `15s`, `1m30s`, `2h05m`.
std::string human_duration(double seconds);

} // namespace tasksup::app

#pragma once

#include "progress_view.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {
struct event;
} // namespace tasksup

namespace tasksup::app {

/// Whether NO_COLOR asks for no colours (set and not empty).
bool no_color();

/// Where the events of `run` and `events` go: every event as one JSON line
/// to an optional JSON stream, and through `progress_view` to a human
/// stream. On a terminal a pending retry shows a countdown, and a running
/// attempt its elapsed time, that `tick` rewrites in place; elsewhere only
/// whole lines are written, so logs and pipes never see carriage returns or
/// escape codes. NO_COLOR (set and not empty, see no-color.org) turns the
/// colours off.
class event_console {
public:
  struct options {
    /// Human output; null for none.
    std::FILE* human = stdout;
    /// Whether `human` is a terminal (countdown, colours).
    bool terminal = false;
    /// Only the final summary and warnings on `human`.
    bool quiet = false;
    /// The view's settings (agent output, task prefixes, colours).
    progress_view::options view;
    /// JSON lines of every event; null for none.
    std::FILE* json = nullptr;
  };

  explicit event_console(options opts);

  /// Writes one event given as its JSON text. `extra` keys are
  /// added for the human view only (e.g. `duration_s`, `log_dir` on
  /// `task_done`); the JSON stream gets the event exactly as received.
  /// Text that is not a JSON object is reported as a warning line.
  void write(std::string_view json,
             const boost::json::object& extra = boost::json::object{});

  /// Writes one event of this process: the JSON stream gets `ev.json`, the
  /// human view renders from its typed keys (`progress_view::render`), so
  /// nothing is parsed back. `more` as `extra` above.
  void write(const event& ev, const progress_view::extra& more = {});

  /// Refreshes the countdown of a pending retry (terminals only); call about
  /// once a second.
  void tick();

  /// Writes a line of its own to the human stream (after clearing the
  /// countdown).
  void note(const std::string& line);

  /// Clears the countdown line, if one is shown.
  void clear_countdown();

private:
  void write_json(std::string_view json);
  /// Prints a rendered event's lines and follows the view's state.
  void show(const std::vector<std::string>& lines, bool started, bool scheduled,
            bool always);
  void print(const std::string& line);

  options opts_;
  progress_view view_;
  /// When the pending retry was scheduled, for its countdown.
  std::optional<std::chrono::steady_clock::time_point> pending_since_;
  /// When the running attempt started, for its elapsed time.
  std::optional<std::chrono::steady_clock::time_point> running_since_;
  bool countdown_shown_ = false;
};

} // namespace tasksup::app

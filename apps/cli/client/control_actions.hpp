#pragma once

// The control commands' actions (`tasksup stop | kill | retry-now |
// fallback-now | forget | pause | resume TASK`) and what each prints, shared by
// the command over the node's TCP port (control_commands.cpp) and over its
// local control socket (front/main.cpp). No CAF here.

#include <string>
#include <string_view>

namespace tasksup::app {

/// One control action.
struct control_action {
  /// The command and the control socket's action name.
  const char* name;
  /// Printed when it took effect: prefix, task id, suffix.
  const char* done_prefix;
  const char* done_suffix;
  /// Printed when it did not: "task <id> <noop>".
  const char* noop;

  std::string done_text(const std::string& task_id) const {
    return done_prefix + task_id + done_suffix;
  }

  std::string noop_text(const std::string& task_id) const {
    return "task " + task_id + " " + noop;
  }
};

inline constexpr control_action control_actions[] = {
  {"stop", "stopping ", "", "has already finished"},
  {"kill", "killing ", "", "has already finished"},
  {"retry-now", "retrying ", " now", "is not waiting to retry"},
  {"fallback-now", "falling back to the next agent of ", "",
   "cannot fall back (finished, or no next agent)"},
  {"forget", "forgot ", "", "has not finished (stop it first)"},
  {"pause", "paused ", "", "is already paused, or has finished"},
  {"resume", "resumed ", "", "is not paused"},
};

/// The action called `name`, or null.
inline const control_action* find_control_action(std::string_view name) {
  for (auto& a : control_actions)
    if (name == a.name)
      return &a;
  return nullptr;
}

} // namespace tasksup::app

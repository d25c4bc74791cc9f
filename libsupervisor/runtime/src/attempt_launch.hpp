#pragma once

// Launching an attempt of the process runtime: its private directories,
// environment, memory cgroup and output capture, then its own shim
// (`tasksup-shim --attempt-dir`) or the request for the task's serving
// shim. Private to the runtime.

#include "attempt.hpp"
#include "attempt_reaper.hpp"
#include "shim_pool.hpp"

#include <optional>
#include <string>

namespace tasksup::runtime::detail {

class attempt_launcher {
public:
  attempt_launcher(const process_runtime_options& options,
                   shim_launcher& program, attempt_reaper& reaper,
                   warning_sink& warn)
    : options_(options), program_(program), reaper_(reaper), warn_(warn) {}

  /// Prepares `a` (id and callbacks set; `sink` receives its lines) as
  /// `spec` asks. Returns the request for the task's serving shim when
  /// shims serve (`shim_idle_timeout`); else `a` runs under a shim of its
  /// own (its pid set), or never ran and says why.
  std::optional<shim_request> launch(attempt& a, attempt_spec spec,
                                     output_capture::line_callback sink);

  /// Why an attempt whose shim did not report the agent's start failed.
  std::string not_reported_text() const;

private:
  const process_runtime_options& options_;
  shim_launcher& program_;
  attempt_reaper& reaper_;
  warning_sink& warn_;
};

} // namespace tasksup::runtime::detail

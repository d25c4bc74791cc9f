#pragma once

// Internal to tasksup::actors: reading an attempt's output log for
// `tasksup logs`, on the node that ran it (the registry for its own
// attempts, a worker node's agent for those placed there).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tasksup::detail {

/// The most output one `logs` answer carries.
inline constexpr std::size_t log_chunk_bytes = 64 * 1024;

/// A piece of an attempt's log.
struct attempt_log_chunk {
  /// The attempt read (the latest when 0 was asked; 0 when none ran here).
  int attempt = 0;
  /// The offset after `data`.
  std::uint64_t next = 0;
  std::string data;
  /// Nothing more will come: the attempt is over and all was read.
  bool complete = false;
  /// The attempt's log file is here.
  bool found = false;
};

/// Up to `log_chunk_bytes` of `<task_dir>/attempt-<attempt>/output.log`
/// from `offset` (`attempt` 0: the latest attempt there); `finished`: the
/// task has ended, so its latest attempt's log is complete. Nullopt when
/// `attempt` is after the latest attempt there and has no log.
std::optional<attempt_log_chunk> read_attempt_log(const std::string& task_dir,
                                                  int attempt,
                                                  std::uint64_t offset,
                                                  bool finished);

} // namespace tasksup::detail

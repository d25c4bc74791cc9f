#pragma once

// What the node journals, as bytes: a task as it was accepted, each input of
// its task machine with the time it was fed, and a finished task's status.
// The format is CAF's binary serialization of the `inspect` overloads below
// (the same checks as for network messages: a damaged journal is refused
// with an error, never trusted). Replaying a task's inputs through its task
// machine gives back the state it had (tests/actors/journal_codec_test.cpp).

#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/task_machine.hpp"
#include "tasksup/supervisor/task_spec.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// A task as the node accepted it: enough to build its supervisor again.
struct journaled_task {
  task_spec spec;
  std::string trace_id;
  std::uint64_t seed = 0;
  /// The round-robin pick of the first agent.
  std::optional<std::string> start_agent_id;
  /// Attempts of the task's earlier runs (a group member's rerun): its
  /// attempts are numbered from this plus 1.
  int attempts_before = 0;
};

/// One input of a task machine and the time it was fed (seconds on the
/// node's clock, see `node_clock`).
struct journaled_input {
  double at_s = 0;
  machine_input in;
};

/// Bytes of `x`. Every number is written finite and within
/// `wire::max_number` of zero (clamped there: numbers are bounded where they
/// enter the node, so this only guards CAF's float encoder, which does not
/// end on an infinity).
std::string encode(const journaled_task& x);
std::string encode(const journaled_input& x);
std::string encode(const task_status& x);

/// `x` from bytes, or an error saying what is wrong with them (`what` names
/// the record in the error, e.g. "task 't1', record 4"). A number that is
/// not finite, or beyond `wire::max_number`, loads clamped and adds a
/// warning naming the record to `warnings` (when given).
expected<journaled_task>
decode_task(std::string_view bytes, const std::string& what,
            std::vector<std::string>* warnings = nullptr);
expected<journaled_input>
decode_input(std::string_view bytes, const std::string& what,
             std::vector<std::string>* warnings = nullptr);
expected<task_status>
decode_status(std::string_view bytes, const std::string& what,
              std::vector<std::string>* warnings = nullptr);

/// The state of a task machine as bytes: two states are equal when their
/// bytes are (the replay tests compare with it).
std::string fingerprint(const task_machine_state& st);

} // namespace tasksup

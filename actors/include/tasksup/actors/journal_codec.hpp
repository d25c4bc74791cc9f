#pragma once

// What the node journals, as bytes: a task as it was accepted, each input of
// its task machine with the time it was fed, and a finished task's status;
// likewise a group of a tree (a row of its own), each input of its group
// machine, and its end.
// The format is CAF's binary serialization of the `inspect` overloads below
// (the same checks as for network messages: a damaged journal is refused
// with an error, never trusted). Replaying a task's inputs through its task
// machine gives back the state it had (tests/actors/journal_codec_test.cpp).

#include "tasksup/actors/protocol.hpp"

#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/group_machine.hpp"
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
  /// For a group's task member: the run of it this is (the group's run
  /// token, `group_host_actor`); 0 for a task of its own.
  std::int64_t member_run = 0;
};

/// A group of a tree as the node accepted it: each group of a tree has a
/// journal row of its own (its id, its inputs, its events, its end).
struct journaled_group {
  /// The id of the tree's top group (the group's own id for the top).
  std::string top;
  /// The top group: the document as it was submitted (JSON text), which a
  /// restarted node parses again; empty for a nested group.
  std::string document;
  /// The trace id of the tree's events.
  std::string trace_id;
  /// The top group's seed (its span ids, its run tokens).
  std::uint64_t seed = 0;
};

/// One input of a group machine (group_machine.hpp) and the time it was
/// fed: replayed in order, the inputs give back the machine's state, its
/// restart window and its history.
struct journaled_group_input {
  enum kind_t : std::uint8_t {
    /// The group (re)starts: a fresh machine, then `start`.
    start,
    started,
    start_failed,
    ended,
    /// `stop` with stop_mode cancel, or kill.
    stop,
    kill,
  };
  kind_t kind = start;
  double at_s = 0;
  /// The member, for started, start_failed and ended.
  std::uint32_t member = 0;
  /// How the member's run ended, for ended.
  member_end how = member_end::normal;
  /// For start of a nested group: its parent's token for this run of it.
  std::int64_t run = 0;
};

/// A group's end as the journal keeps it.
struct journaled_group_end {
  /// Its result; none for a nested group that never ended by itself (its
  /// tree ended first).
  std::optional<task_result> result;
  /// Its restart decisions in all.
  std::uint64_t restarts = 0;
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
std::string encode(const journaled_group& x);
std::string encode(const journaled_group_input& x);
std::string encode(const journaled_group_end& x);

/// Whether a journal row's bytes are a group's (`journaled_group`), not a
/// task's.
bool is_group_row(std::string_view bytes) noexcept;

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

expected<journaled_group>
decode_group(std::string_view bytes, const std::string& what,
             std::vector<std::string>* warnings = nullptr);
expected<journaled_group_input>
decode_group_input(std::string_view bytes, const std::string& what,
                   std::vector<std::string>* warnings = nullptr);
expected<journaled_group_end>
decode_group_end(std::string_view bytes, const std::string& what,
                 std::vector<std::string>* warnings = nullptr);

/// The state of a task machine as bytes: two states are equal when their
/// bytes are (the replay tests compare with it).
std::string fingerprint(const task_machine_state& st);

} // namespace tasksup

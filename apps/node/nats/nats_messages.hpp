#pragma once

// What the node's NATS bridge (nats_bridge.hpp) reads and writes, without
// NATS itself: the task a submission message becomes, what an answer of the
// node does to that message, and the CloudEvents-style document each event
// is published as (docs/BEHAVIOUR.md, "NATS JetStream").

#include "tasksup/actors/protocol.hpp"
#include "tasksup/supervisor/expected.hpp"

#include <caf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::app {

/// The largest submission message taken; a larger one is terminated.
inline constexpr std::size_t max_submission_bytes = 1u << 20;

/// A submission made ready for the node: its task's id and the task
/// document with that id in it.
struct intake_task {
  std::string id;
  std::string json;
};

/// Reads the submission `payload` (untrusted): a JSON object, a task or a
/// workflow as `tasksup submit` takes it. Its id is its own `id`, else the
/// message's `msg_id` (the `Nats-Msg-Id` header) made a task id, else
/// `nats-<stream_seq>`: a redelivered message, or one published again with
/// the same id, names the same task. An error says why the message can
/// never become a task (too large, not JSON, not an object, an `id` that is
/// not a string).
expected<intake_task> read_submission(std::string_view payload,
                                      std::string_view msg_id,
                                      std::uint64_t stream_seq);

/// What the bridge does with a message once the node answered its
/// submission.
enum class intake_verdict : std::uint8_t {
  /// The task is journaled (or was already: a duplicate): ack.
  ack,
  /// The node could not take it now (its journal failed, it stands by,
  /// it did not answer): ask for redelivery later.
  retry,
  /// The task can never be taken (invalid): terminate, no redelivery.
  poison,
};

/// "ack", "retry" or "poison".
std::string_view to_string(intake_verdict x) noexcept;

/// The verdict on a submission the node refused with `err`.
intake_verdict verdict_for(const caf::error& err) noexcept;

/// The subject a task's events are published on: `prefix.<task id>`. A
/// task id's dots stay (a workflow's members are `prefix.wf.step`, so
/// `prefix.wf.>` takes a whole workflow); a dot that would leave a token
/// empty (a leading, trailing or doubled one) becomes `_`.
std::string event_subject(std::string_view prefix, std::string_view task_id);

/// `ts` (seconds since the epoch) as RFC 3339 in UTC with milliseconds:
/// `2026-11-29T20:07:36.123Z`.
std::string rfc3339_utc(double ts);

/// One event as the document published for it: a CloudEvents 1.0 envelope
/// (`specversion`, `id`, `source`, `type` = "dev.tasksup." + the event's
/// kind, `subject` = the task id, `time`, `datacontenttype`) whose `data`
/// is the event's own JSON line.
std::string cloud_event(const event& ev, std::string_view id,
                        std::string_view source);

} // namespace tasksup::app

namespace tasksup::app {

/// Whether the NATS subject `subject` matches `pattern` (`*` one token,
/// a last `>` one or more).
bool subject_matches(std::string_view pattern, std::string_view subject);

/// The stream sequence number a JetStream message's reply subject (its ack
/// subject) carries: `$JS.ACK.<stream>.<consumer>.<delivered>.<stream
/// seq>.<consumer seq>.<time>.<pending>`, or the longer form with a domain
/// and an account hash before the stream. 0 when `reply` is neither.
std::uint64_t stream_seq_of_reply(std::string_view reply);

/// The URLs of `url` (comma-separated), each trimmed of blanks; empty
/// ones dropped.
std::vector<std::string> split_nats_urls(std::string_view url);

/// `url` (one or more, comma-separated) without passwords, for the log.
std::string redact_nats_url(std::string_view url);

} // namespace tasksup::app

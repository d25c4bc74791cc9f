#pragma once

// Size limits on everything a node reads from the network. A message that
// breaks one fails to deserialize (CAF drops it; a request then ends in the
// sender's timeout), so an oversized value never reaches an actor. Container
// counts are checked before any element is read, so a short message cannot
// announce millions of elements and make the reader allocate for them.

#include <cstddef>

namespace tasksup::wire {

/// Largest task text for `(submit_json, text)`: the task file limit.
inline constexpr std::size_t max_task_json_bytes = 16u << 20;

/// Largest BASP payload the node's connection guard lets through (the
/// header's announced length is checked before CAF sizes its buffer): the
/// largest task text plus room for the message around it, so a text just
/// over its limit still gets the door's clear refusal.
inline constexpr std::size_t max_message_bytes =
  max_task_json_bytes + (64u << 10);

/// Largest prompt of a typed task.
inline constexpr std::size_t max_prompt_bytes = 1u << 20;

/// Task, agent, rule and environment ids ([A-Za-z0-9_.-]{1,64} once valid).
inline constexpr std::size_t max_id_bytes = 64;

/// Any other single string: paths, commands, patterns, env values, errors,
/// event JSON, output lines.
inline constexpr std::size_t max_text_bytes = 1u << 20;

/// Entries of any list or map in a message (args, env, mounts, agents,
/// rules, patterns, exit codes, backoff tables, artifacts, output tail).
inline constexpr std::size_t max_list_entries = 4096;

/// Largest magnitude of a number in a message or the journal: seconds (a
/// timestamp, a delay, a deadline), dollars, token budgets. Far beyond any
/// real value, and small enough that a sum of a few is still finite. A
/// number that is not finite, or beyond this, fails to (de)serialize.
inline constexpr double max_number = 1e15;

/// Remote event subscribers one node door serves at once.
inline constexpr std::size_t max_subscribers = 256;

} // namespace tasksup::wire

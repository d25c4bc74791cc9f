#pragma once

#include "tasksup/supervisor/bounded_number.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tasksup {

/// The machine-readable output an agent CLI prints, chosen by its profile.
enum class output_format : uint8_t {
  /// Plain text: no parsing, the text rules classify a failure.
  text,
  /// `claude -p --output-format stream-json --verbose`: one JSON object per
  /// line, ending with a `{"type":"result",...}` line.
  claude_stream_json,
  /// `codex exec --json`: one JSON event per line (`item.completed`,
  /// `turn.completed`, `turn.failed`, `error`).
  codex_jsonl,
  /// `gemini -p --output-format json`: one pretty-printed JSON envelope
  /// (`response`, `stats`, `error`) at the end of the output.
  gemini_json,
};

/// "text", "claude-stream-json", "codex-jsonl" or "gemini-json".
std::string_view to_string(output_format x) noexcept;

/// Parses the names of `to_string`; nullopt for anything else.
std::optional<output_format> parse_output_format(std::string_view str) noexcept;

/// Tokens an attempt used, as its CLI reported them.
struct token_usage {
  std::int64_t input_tokens = 0;
  std::int64_t output_tokens = 0;
  /// Input tokens served from the provider's prompt cache.
  std::int64_t cached_input_tokens = 0;

  /// Adds `x`'s counts, each sum saturating at the int64 bound: counts come
  /// from agent output and are not trusted to stay small.
  token_usage& operator+=(const token_usage& x) noexcept {
    input_tokens = saturating_add(input_tokens, x.input_tokens);
    output_tokens = saturating_add(output_tokens, x.output_tokens);
    cached_input_tokens =
      saturating_add(cached_input_tokens, x.cached_input_tokens);
    return *this;
  }
};

/// The provider error an agent CLI reported in its structured output.
struct structured_error {
  /// The HTTP status of the failed API call, 0 when the CLI did not say.
  int http_status = 0;
  /// The provider's error type or status (`rate_limit_error`,
  /// `insufficient_quota`, `RESOURCE_EXHAUSTED`, `API_KEY_INVALID`, ...) or
  /// the CLI's own error kind; empty when unknown.
  std::string type;
  /// The error text as the CLI printed it (bounded).
  std::string message;
  /// A "come back later" hint found in the error, in seconds.
  std::optional<double> retry_after_s;
};

/// What a structured-output parser learned from one attempt.
struct structured_result {
  /// The agent's final answer (bounded), empty if none was seen.
  std::string final_message;
  /// The error the CLI reported, if any.
  std::optional<structured_error> error;
  /// Token usage, when the CLI reported it.
  std::optional<token_usage> usage;
  /// Cost in US dollars, when the CLI reported it (claude does).
  std::optional<double> cost_usd;
};

} // namespace tasksup

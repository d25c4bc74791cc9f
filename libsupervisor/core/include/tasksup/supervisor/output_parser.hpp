#pragma once

#include "tasksup/supervisor/agent_output.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/outcome.hpp"

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tasksup {

/// Longest final message or error message kept, in bytes.
inline constexpr std::size_t max_structured_text_bytes = 4096;

/// Longest JSON document (one line, or gemini's multi-line envelope) parsed;
/// a longer one is skipped, so untrusted output cannot grow memory.
inline constexpr std::size_t max_structured_doc_bytes = std::size_t{1} << 20;

/// Reads an agent's structured output line by line, as it arrives. Pure: no
/// I/O, no clock. Lines that are not the expected JSON are ignored (CLIs mix
/// warnings into their output), so any input is safe.
class output_parser {
public:
  explicit output_parser(output_format format) noexcept;

  /// Feeds one output line (without its newline). Returns what a person
  /// should see for it: the line itself for text and non-JSON lines, a short
  /// rendering ("assistant: ...", "error: ...", "usage: ...") for events
  /// worth showing, and an empty string for events that are only machinery.
  std::string feed(std::string_view line);

  /// What was learned so far.
  const structured_result& result() const noexcept { return result_; }

  /// The final message whole, when it is at most `max_answer_bytes` (see
  /// answer.hpp); `result().final_message` is bounded for display.
  const std::string& final_text() const noexcept { return final_text_; }

  output_format format() const noexcept { return format_; }

private:
  std::string feed_json_line(std::string_view line);
  std::string feed_gemini(std::string_view line);
  /// The agent's final message (so far): bounded for display, whole for
  /// its answer.
  void keep_final(std::string_view text);

  output_format format_;
  structured_result result_;
  std::string final_text_;
  /// gemini: the envelope being collected, from a line "{" to a line "}".
  std::string pending_;
  bool collecting_ = false;
  bool overflowed_ = false;
};

/// The structured error type a container worker reports for an attempt it
/// stopped after `idle_timeout_s` without output: classified retryable with
/// rule `idle_timeout`, ahead of the crash rule (the kill after the stop's
/// grace period is not a crash).
inline constexpr std::string_view idle_timeout_type = "idle_timeout";

/// The structured error type of an attempt stopped after `idle_timeout_s`
/// during which it printed only its profile's `idle_noise` lines (a CLI
/// looping on "Reconnecting..."): classified retryable with rule
/// `idle_noise`, the line being the last noise line (the error's message).
inline constexpr std::string_view idle_noise_type = "idle_noise";

/// The structured error type of a usage or plan limit that resets at a
/// known time: OpenAI's own code, and what the parser records for Claude
/// Code's rejected subscription limit (`api_error_params.rate_limit_info`
/// with a `five_hour` / `seven_day...` `rateLimitType`).
inline constexpr std::string_view usage_limit_reached_type =
  "usage_limit_reached";

/// Classifies a structured error when its type or status says enough:
/// authentication / permission -> fatal, rate limit -> rate_limit, a usage
/// limit (`usage_limit_reached`, `usage_limit_exceeded`) -> quota_exhausted
/// with the reset read from the message at `now` (`parse_quota_reset`), out
/// of credit -> agent_failure, overload and server errors -> retryable. The
/// rule is `structured:<type>` (or `structured:http_<status>`), the line the
/// error message. Returns nullopt when the error is ambiguous (a bare 429
/// may be a per-minute limit, a quota or an empty account): the text rules
/// decide.
std::optional<classification>
classify_structured(const structured_error& e,
                    std::chrono::system_clock::time_point now);

/// Classifies a failed outcome at wall-clock time `now`: container crashes
/// and infrastructure errors as the rules say, then the structured error
/// when present and decisive, then the text rules. When the structured error
/// says only "rate limit" but the text rules see a quota with a reset
/// (Claude's "You've hit your 5-hour limit · resets 3pm"), the quota wins.
classification classify_attempt(const classifier& rules,
                                const attempt_outcome& outcome,
                                std::string_view agent_cli,
                                std::chrono::system_clock::time_point now);

} // namespace tasksup

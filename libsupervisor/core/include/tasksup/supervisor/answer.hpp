#pragma once

// An agent's answer: the JSON document it ends its work with, found in its
// output and checked against a JSON Schema (draft 7) before the attempt
// counts as a success (docs/BEHAVIOUR.md, Checked answers).

#include "tasksup/supervisor/expected.hpp"

#include <boost/json/value.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// The largest answer read from an attempt's output, in bytes; a larger
/// block is not an answer.
inline constexpr std::size_t max_answer_bytes = 256u << 10;

/// The most schema errors an answer's check reports.
inline constexpr std::size_t max_answer_errors = 20;

/// Finds the last fenced JSON block (a line "```json", the document, a line
/// "```") in output read line by line. Pure; keeps at most one block of
/// `max_answer_bytes` besides the last complete one.
class answer_scanner {
public:
  /// Feeds one output line, without its newline.
  void feed(std::string_view line);

  /// The last complete block's text, if any block was complete and small
  /// enough.
  const std::optional<std::string>& last() const noexcept { return last_; }

private:
  bool open_ = false;
  bool too_big_ = false;
  std::string current_;
  std::optional<std::string> last_;
};

/// The answer in an agent CLI's final message: the whole message when it is
/// a JSON object or array, else its last fenced JSON block.
std::optional<std::string> answer_in_message(std::string_view text);

/// What checking an answer found.
struct answer_verdict {
  bool ok = false;
  /// The answer, serialized compactly, when it parsed as JSON.
  std::string answer;
  /// Why it was refused, one line each ("/plan: expected a string"), at
  /// most `max_answer_errors`.
  std::vector<std::string> errors;
};

/// A JSON Schema (draft 7) answers are checked against, compiled once.
/// Supported: every draft 7 keyword but `patternProperties` (refused) and
/// `format` (an annotation, not checked); `pattern` is matched with RE2, so
/// patterns use its syntax (no backreferences, no lookaround); `$ref` must
/// point within the schema.
class answer_schema {
public:
  ~answer_schema();
  answer_schema(const answer_schema&) = delete;
  answer_schema& operator=(const answer_schema&) = delete;

  /// Compiles `schema`. An error's `path` is the JSON pointer within the
  /// schema of what is wrong, when it is known.
  static expected<std::shared_ptr<const answer_schema>>
  compile(const boost::json::value& schema);

  /// Compiles a schema given as JSON text.
  static expected<std::shared_ptr<const answer_schema>>
  compile_text(std::string_view text);

  /// Checks an answer's text (nullopt: no answer was found).
  answer_verdict check(const std::optional<std::string>& answer) const;

  /// Whether the schema names `field` among its top-level `properties`.
  bool declares(std::string_view field) const;

private:
  struct impl;
  explicit answer_schema(std::unique_ptr<impl> x);
  std::unique_ptr<impl> impl_;
};

/// The text a template `{{steps.<id>.answer.<field>}}` stands for: a string
/// field as it is, any other value as compact JSON; nullopt when the answer
/// has no such top-level field (or is not an object).
std::optional<std::string> answer_field(std::string_view answer,
                                        std::string_view field);

} // namespace tasksup

#pragma once

#include "tasksup/supervisor/error_class.hpp"
#include "tasksup/supervisor/expected.hpp"
#include "tasksup/supervisor/outcome.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// One classification rule. A rule matches an outcome when any of
/// its criteria matches (`match_all` = false, the default) or when every
/// criterion it sets matches (`match_all` = true). Unset criteria are ignored.
struct classifier_rule {
  /// Shown in explanations and events, unique within a rule set.
  std::string id;
  error_class cls = error_class::retryable;
  /// Matches when the exit code is one of these.
  std::vector<int> exit_codes;
  /// Matches when the outcome's OOM flag equals this.
  std::optional<bool> oom_killed;
  /// Matches when the process was killed by one of these signals.
  std::vector<int> signals;
  /// RE2 patterns, case-insensitive, searched in each of the last
  /// `window_lines` output lines. `{agent_cli}` is replaced by the quoted
  /// agent command name (its basename).
  std::vector<std::string> patterns;
  /// How many lines from the end of the output the patterns see; 0 = all.
  std::size_t window_lines = 50;
  /// Require every set criterion instead of any.
  bool match_all = false;
};

/// Longest `classification::line`: a longer matching line is shown as this
/// many bytes around the match, with "..." marking each cut.
inline constexpr std::size_t max_display_line_bytes = 1000;

/// Why an outcome got its class: the class, the id of the rule that matched
/// and the output line that matched (empty when the rule matched on exit
/// code, signal or OOM flag), plus the retry-after hint found in the output.
/// When several lines match, the newest one (nearest the end) is reported.
struct classification {
  error_class cls = error_class::retryable;
  std::string rule;
  std::string line;
  /// Seconds to wait, found in the output, scanning the matching rule's
  /// window from the newest line backwards; unset when none was found (the
  /// policy's default applies). Set only for two classes, meaning:
  /// - `rate_limit`: the "come back later" hint (`parse_retry_after`);
  /// - `quota_exhausted`: seconds from the classification's `now` until the
  ///   account's limit resets (`parse_quota_reset`), capped at
  ///   `max_quota_reset_s`.
  std::optional<double> retry_after_s;
  /// The worker node the attempt was lost with (class `infrastructure`);
  /// empty when it was not lost. Its words are the rule,
  /// `node_lost:<node>`, which is also how it travels and is journaled.
  std::string lost_node;
};

/// The default rules, refined by what the real CLIs print, in priority
/// order (docs/BEHAVIOUR.md, Classification): container_crash, quota
/// (quota_exhausted, last 100 lines), rate_limit_per_minute (100), billing
/// (agent_failure, 50), rate_limit (100), needs_input (20), fatal (50),
/// agent_failure (50), transient (retryable, 50). Anything else non-zero
/// falls through to `retryable` (rule id "default"). config/classifier.json
/// holds the same rules.
std::vector<classifier_rule> default_classifier_rules();

/// Finds a "come back later" hint in one line: `Retry-After: 30`,
/// `retry after 20s`, `try again in 1m30s`, `retry in 500ms`, ... Returns
/// seconds, or nullopt when the line has none.
///
/// A hint is one of the phrases "retry after", "retry in", "retry delay",
/// "try again in", "try again after" (case-insensitive; the words may be
/// joined by spaces, '-', '_' or nothing, so `Retry-After`, `retry_after`
/// and `retryDelay` count), then optional `:`, `=`, quotes or blanks, then a
/// duration: a bare number of seconds (milliseconds after `Retry-After-Ms` /
/// `retry_after_ms`), or number+unit components (`ms`, `s`/`sec`/`seconds`,
/// `m`/`min`/`minutes`, `h`/`hr`/`hours`) such as `1.5s`, `2 minutes`,
/// `1m30s`. The first valid hint in the line wins. Hints that are negative,
/// longer than one day (86400 s, rejected rather than capped: such a number is
/// almost always a timestamp, not a wait), HTTP dates, or a bare number that
/// continues like a date or time (`2024-01-01`, `12:30`) are ignored.
/// Runs in time linear in the line and never allocates.
std::optional<double> parse_retry_after(std::string_view line);

/// Longest quota reset reported, 7 days: a reset further out is reported as
/// this (capped, not ignored: the account stays closed at least that long,
/// and the policy looks again then).
inline constexpr double max_quota_reset_s = 7 * 86400.0;

/// Finds when a usage or plan limit resets in one line and returns the
/// seconds from `now` until then, or nullopt when the line names no reset.
/// Understood, after "reset"/"resets" (optionally "at", "in", "on") or "try
/// again" (optionally "at", "in"), case-insensitive:
/// - a time of day, `3pm`, `3:30pm`, `2:10 AM`, `15:00[:00]`: its next
///   occurrence after `now` (a time already past today means tomorrow);
/// - a date before it, `Nov 28th, 2026`, `28 Nov`, `2026-11-28[T]`: that
///   day (a date without a year that is past means next year);
/// - then an optional zone, in parentheses or not: `UTC`, `GMT`, `Z`,
///   `+02:00`, `UTC+2`, or an IANA name (`Europe/Berlin`) read from the
///   system tz database (/usr/share/zoneinfo); an unknown name gives
///   nullopt. Without a zone the time is read as UTC (tasksup cannot know
///   the agent's zone);
/// - a duration after "in": `2 days 3 hours`, `4h 12m`, `2h13m`, `90 min`;
/// - seconds fields `"resets_in_seconds": 7980` / `reset_after_seconds`;
///   epoch or ISO fields `"resets_at": 1795831837` / `resetsAt`; and Claude
///   Code's old `usage limit reached|1700000000`.
/// The first reset in the line that is not in the past wins; one later than
/// `max_quota_reset_s` is capped to it. Runs in time linear in the line (a
/// bounded window after each trigger word, at most 16 triggers per line,
/// each reading at most one zone file of at most 256 KiB); does not read a
/// clock or the TZ variable, so any thread may call it.
std::optional<double>
parse_quota_reset(std::string_view line,
                  std::chrono::system_clock::time_point now);

/// The rule of an attempt lost with its worker node: `node_lost:<node>`.
inline constexpr std::string_view node_lost_rule_prefix = "node_lost:";

/// Whether `c` says the attempt was lost with its worker node: the agent's
/// health is not in question and the retry goes elsewhere at once.
bool is_node_loss(const classification& c) noexcept;

/// Classifies attempt outcomes with a compiled rule set. Matching runs in time
/// linear in the output (RE2) and does not allocate per line per pattern.
/// Immutable after construction; safe to share between threads.
class classifier {
public:
  /// Compiles `rules`; an error names the rule index and the bad pattern.
  /// The error's `where` is "classifier rules" and its `path` a JSON pointer
  /// relative to the rule array (`/2/patterns/0`, `/1/id`), so a config
  /// loader can prefix its own file and path. Rejected: an empty or duplicate
  /// id, a rule with no criterion, an empty pattern, a pattern RE2 does not
  /// accept (its message is included) or one too large for the memory bound.
  /// Patterns are compiled case-insensitive with Latin-1 encoding, so any
  /// byte sequence in the output can be matched. The tail is scanned once
  /// for the literals every pattern of every rule needs (RE2's FilteredRE2
  /// atoms); a rule's patterns, as one alternation, run only on the lines
  /// where its literals occur (on every line of its window when a pattern
  /// has none).
  static expected<classifier> make(std::vector<classifier_rule> rules);

  /// Classifies a failed outcome at wall-clock time `now` (which reads a
  /// quota's absolute reset time: "resets 3pm" is the next 3pm after
  /// `now`). An outcome with `infrastructure_error`
  /// classifies as infrastructure (rule "infrastructure"); otherwise the first
  /// matching rule wins; otherwise retryable (rule "default"). Must not be
  /// called for a successful outcome. `agent_cli` fills `{agent_cli}`
  /// patterns (its basename, regex-quoted; when empty those patterns cannot
  /// match); a rule using it is compiled when first reached for an agent
  /// name and kept in a small bounded cache shared by copies (32 names; a
  /// name longer than 255 bytes is compiled for the call and not kept).
  /// Every compiled regex, with the DFA caches RE2 builds while matching,
  /// stays within 1 MiB, so a classifier holds at most (rules with patterns
  /// + 32 x rules with `{agent_cli}` patterns) MiB of regex memory whatever
  /// the output: 38 MiB for the default rules (6 + 32 x 1), plus ~0.3 MB of
  /// compiled prefilter per cached name.
  /// The `signals` criterion looks at `attempt_outcome::signal` only.
  classification classify(const attempt_outcome& outcome,
                          std::string_view agent_cli,
                          std::chrono::system_clock::time_point now) const;

  /// The rules this classifier was made from, in priority order.
  const std::vector<classifier_rule>& rules() const noexcept;

  /// Copies and moves share the compiled rules; a moved-from classifier
  /// stays valid.
  classifier(classifier&&) noexcept;
  classifier& operator=(classifier&&) noexcept;
  classifier(const classifier&);
  classifier& operator=(const classifier&);
  ~classifier();

private:
  struct impl;
  explicit classifier(std::shared_ptr<const impl> ptr);
  std::shared_ptr<const impl> impl_;
};

} // namespace tasksup

#pragma once

// Webhook triggers (`config/triggers/<name>.json`): which GitHub or generic
// webhook deliveries start a task, which stop one, and the task they start
// (docs/BEHAVIOUR.md, Triggers: matching). The pure core the node's webhook
// endpoint will use (issue 35): no networking, no clock. The signature of a
// delivery's raw body is checked before any of this, by `verify_signature`
// (tasksup::webhook, which may use OpenSSL; this library may not).

#include "tasksup/supervisor/expected.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tasksup {

// -- limits -------------------------------------------------------------------

/// The most of an issue's or pull request's title a task gets.
inline constexpr std::size_t max_trigger_title_bytes = 1024;

/// The most of an issue's, pull request's or comment's body a task gets.
inline constexpr std::size_t max_trigger_body_bytes = 64 * 1024;

/// The longest delivery id (GitHub's are 36-character GUIDs).
inline constexpr std::size_t max_delivery_id_bytes = 128;

/// The largest secret file read.
inline constexpr std::size_t max_secret_bytes = 4096;

// -- names --------------------------------------------------------------------

/// The GitHub events a trigger may be on: those whose subject is an issue or
/// a pull request, whose number names the task.
inline constexpr std::string_view github_trigger_events[] = {
  "issues", "issue_comment", "pull_request"};

/// GitHub's `author_association` values.
inline constexpr std::string_view github_author_associations[] = {
  "OWNER",
  "MEMBER",
  "COLLABORATOR",
  "CONTRIBUTOR",
  "FIRST_TIME_CONTRIBUTOR",
  "FIRST_TIMER",
  "MANNEQUIN",
  "NONE"};

/// The `{{name}}`s a trigger's task may use in its strings.
inline constexpr std::string_view trigger_placeholders[] = {
  "issue.title",          "issue.body",   "issue.number", "issue.url",
  "repository.full_name", "comment.body", "sender.login", "delivery"};

/// The `{{name}}`s a trigger's `report.command` may use in its arguments:
/// values no author of the payload's text chooses (no title, no body), each
/// checked to be a number, a URL, a name or an id, so none can become an
/// option or break out of its argument; plus the task's id and outcome
/// (`task.outcome` is filled in when the report goes out).
inline constexpr std::string_view report_placeholders[] = {
  "issue.number", "issue.url", "repository.full_name", "sender.login",
  "delivery",     "task.id",   "task.outcome"};

/// The most of `report.command` (arguments) and of `report.url` (bytes).
inline constexpr std::size_t max_report_arguments = 64;
inline constexpr std::size_t max_report_url_bytes = 2048;

/// Where deliveries come from: GitHub (its events, payloads and
/// `author_association`), or any sender of JSON that signs it the same way.
enum class trigger_source : std::uint8_t { github, generic };

/// "github" or "generic".
std::string_view to_string(trigger_source x) noexcept;

/// The names of `to_string`; nullopt for anything else.
std::optional<trigger_source>
parse_trigger_source(std::string_view str) noexcept;

// -- trigger files ------------------------------------------------------------

/// `on` of a GitHub trigger: the event and what must hold of it.
struct github_match {
  /// One of `github_trigger_events` (`X-GitHub-Event`).
  std::string event;
  /// The payload's `action` ("labeled", "created"); empty: any.
  std::string action;
  /// With action "labeled": the label added; otherwise one the issue or
  /// pull request carries. Empty: none needed.
  std::string label;
  /// "@name" that the comment of an `issue_comment` must contain as a word
  /// (any case); empty: none needed.
  std::string mention;
};

/// `on` of a generic trigger: JSON pointer -> the string the payload must
/// have there; all must hold.
struct generic_match {
  std::vector<std::pair<std::string, std::string>> fields;
};

/// Who may start a task through a GitHub trigger; either list admits.
struct trigger_allow {
  /// Values of `github_author_associations`, matched against the
  /// association of the subject's author: the comment's for
  /// `issue_comment`, the or pull request's otherwise (the person
  /// whose text the task gets).
  std::vector<std::string> author_associations;
  /// Logins, matched against `sender.login` (the person who acted).
  std::vector<std::string> users;
};

/// `report` of a trigger: where the result of each task it starts goes
/// (docs/BEHAVIOUR.md, "Results back"), with the notifier's retries and
/// bounds.
struct trigger_report {
  /// argv of a command given the report on stdin (empty: none); its
  /// arguments after the first may use `report_placeholders`.
  std::vector<std::string> command;
  /// `http://HOST[:PORT][/PATH]` the report is POSTed to (empty: none).
  std::string url;
  /// The outcomes reported ("succeeded", "failed", "stopped"); all when the
  /// file names none.
  std::vector<std::string> on;
};

/// A trigger as its file writes it, its secret read.
struct trigger_spec {
  /// The file's stem.
  std::string name;
  /// `github_match` for a GitHub trigger, `generic_match` for a generic one.
  std::variant<github_match, generic_match> on;
  /// The file named by `secret_file`, made absolute.
  std::string secret_file;
  /// Its contents less a trailing newline: the HMAC key. Never in a message.
  std::string secret;
  trigger_allow allow;
  /// Repository full name ("owner/name") -> the absolute path of its local
  /// clone: the task's `repo` when the task names none.
  std::map<std::string, std::string> repos;
  /// The task as written (no `id`: the event names it), for the caller to
  /// read with `parse_task` once `decide` has filled in its placeholders.
  boost::json::object task;
  /// Whether closing the issue or pull request stops its task (GitHub only).
  bool stop_on_close = true;
  /// Where the results of its tasks go; none without `report`.
  std::optional<trigger_report> report;

  /// Which `on` the trigger has.
  trigger_source source() const noexcept;
};

/// Triggers keyed by name.
using trigger_map = std::map<std::string, trigger_spec>;

/// Parses a trigger named `name`: `{"source", "secret_file", "on", "allow",
/// "repos", "task", "stop_on_close", "report"}`, unknown keys refused; reads
/// the secret file (relative to `config_dir`, or absolute). A GitHub trigger
/// must have `allow`; a generic one has no `allow`, `repos` or
/// `stop_on_close`. Each `{{...}}` in the task's strings must be one of
/// `trigger_placeholders` (`comment.body` only on `issue_comment`), and the
/// task names no `id`. Errors name `where` and the JSON pointer, never the
/// secret.
expected<trigger_spec> parse_trigger(const boost::json::value& doc,
                                     std::string_view where, std::string name,
                                     const std::string& config_dir);

/// Reads a trigger file and parses it (`parse_trigger`), named by its stem;
/// errors name the file.
expected<trigger_spec> load_trigger_file(const std::string& path,
                                         const std::string& config_dir);

/// Loads `dir/*.json` in name order, each a trigger named by its stem
/// (`config_dir` for their secret files); a missing directory has none.
expected<trigger_map> load_triggers_dir(const std::string& dir,
                                        const std::string& config_dir);

// -- deciding -----------------------------------------------------------------

/// What a delivery does.
enum class trigger_action : std::uint8_t {
  /// Start `task` (a task document) as `task_id`.
  start,
  /// Stop the task `task_id`: its issue or pull request was closed.
  stop,
  /// Nothing: not this trigger's event, or not one it can read.
  ignore,
  /// Nothing: this trigger's event, from someone `allow` does not admit.
  refuse,
};

/// "start", "stop", "ignore" or "refuse".
std::string_view to_string(trigger_action x) noexcept;

/// What `decide` made of a delivery.
struct trigger_decision {
  trigger_action action = trigger_action::ignore;
  /// For start and stop: the task's id, [A-Za-z0-9_.-]{1,64}.
  std::string task_id;
  /// For start: the trigger's task with its placeholders filled in, its
  /// `id` and (from `repos`) its `repo` set; for `parse_task`.
  boost::json::object task;
  /// For ignore and refuse: why, one sentence; payload text in it is
  /// quoted and shortened.
  std::string reason;
  /// For start, when the trigger has a `report`: it, its command's
  /// placeholders filled in but `{{task.outcome}}`.
  std::optional<trigger_report> report;
  /// For start: what a report says of the delivery: `trigger`, `delivery`,
  /// `event`, and `repository`, `issue_number`, `issue_url` and `sender`
  /// where the payload has them.
  boost::json::object context;
};

/// Whether `id` may be a delivery id: 1 to `max_delivery_id_bytes`
/// characters of [A-Za-z0-9_.-] (kept to drop a delivery seen twice).
bool valid_delivery_id(std::string_view id) noexcept;

/// `text` made a task id: each character outside [A-Za-z0-9_.-] becomes
/// `-`; one longer than 64 keeps its first 55 characters, `-` and 8 hex
/// digits of a hash of the whole, so long names still differ.
std::string trigger_task_id(std::string_view text);

/// What the delivery `delivery_id` of `event_name` (`X-GitHub-Event`;
/// ignored by a generic trigger) with `payload` does, its signature already
/// checked. Every field of the payload is untrusted: one missing or of the
/// wrong type makes the delivery ignored, saying which. Placeholders are
/// filled in on the task's string values, in one pass, so payload text can
/// neither add to the task's structure nor fill in another placeholder;
/// titles are cut to `max_trigger_title_bytes` and bodies to
/// `max_trigger_body_bytes`, the cut saying so.
///
/// GitHub, in order: a closed issue or pull request (`issues` or
/// `pull_request`, action "closed") stops `gh-<owner>-<repo>-<number>` when
/// `stop_on_close`; another event, action, label or mention is ignored; an
/// author or sender `allow` does not admit is refused; else the task
/// starts as `gh-<owner>-<repo>-<number>`. Generic: a pointer of `on`
/// missing or not the string is ignored; else the task starts as
/// `<trigger name>-<delivery id>`. A report placeholder whose value the
/// payload lacks, or has in a form that is not safe as an argument, makes
/// the delivery ignored too.
trigger_decision decide(const trigger_spec& trigger,
                        std::string_view event_name,
                        std::string_view delivery_id,
                        const boost::json::value& payload);

} // namespace tasksup

#pragma once

#include "tasksup/supervisor/backoff.hpp"
#include "tasksup/supervisor/error_class.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

namespace tasksup {

/// When a finished attempt is restarted (OTP's restart types).
enum class restart_type {
  /// Restart only after a failure; success ends the task. The default.
  transient,
  /// A long-running loop: restart even after exit 0, limited by `intensity`.
  permanent,
  /// Never restart: the first exit, success or failure, ends the task.
  temporary,
};

std::string_view to_string(restart_type x) noexcept;
std::optional<restart_type> parse_restart_type(std::string_view str) noexcept;

/// What a `fatal` failure (bad key, no access) ends.
enum class fatal_scope : uint8_t {
  /// Only the failed agent's provider: the chain skips every agent of the
  /// provider that failed fatally and continues with the next agent whose
  /// `provider` (from its profile) is known and different; with none left
  /// the task fails. An agent of unknown provider is never assumed to be
  /// independent, so without profiles this is exactly `task`. The default:
  /// a bad Anthropic key says nothing about an OpenAI key.
  provider,
  /// The whole task fails at once (the first design's rule).
  task,
};

std::string_view to_string(fatal_scope x) noexcept;
std::optional<fatal_scope> parse_fatal_scope(std::string_view str) noexcept;

/// What a task does when its agent's usage or plan quota is used up
/// (`quota_exhausted`). Retries are not spent either way.
enum class quota_action : uint8_t {
  /// Park the task until the quota resets, then go on with the same agent.
  wait,
  /// Move to the next agent of the chain at once.
  fallback,
};

std::string_view to_string(quota_action x) noexcept;
std::optional<quota_action> parse_quota_action(std::string_view str) noexcept;

/// Restart intensity for `permanent` tasks: at most `max_restarts` restarts
/// within `period_s` seconds, else give up and escalate. An attempt that ran
/// for at least `reset_after_s` seconds resets the per-agent retry count (and
/// so the backoff) before its exit is judged.
struct intensity_config {
  int max_restarts = 10;
  double period_s = 3600.0;
  double reset_after_s = 300.0;
};

/// The steps around each attempt, taken from the task's own keys
/// (`preflight`, `gates`, `repo`), never from a `supervisor` object: the
/// machine asks for each step as an effect and waits for its verdict.
struct attempt_steps {
  /// A preflight command runs before each attempt; non-zero skips it.
  bool preflight = false;
  /// Gates run after an attempt exits 0; all must pass for success.
  bool gates = false;
  /// A repository task: its change is delivered before it succeeds.
  bool deliver = false;
  /// The attempt's answer is checked (`answer_schema`, or the role's): an
  /// attempt that exits 0 without a valid one is `invalid_output`.
  bool answer = false;
};

/// The delay schedule of a `permanent` task restarted after a clean exit:
/// 1, 2, 4, ... seconds, at most 60, back to the first step after a run of
/// at least `intensity.reset_after_s`.
inline backoff_spec default_restart_backoff() {
  backoff_spec x;
  x.kind = backoff_spec::kind_t::exponential;
  x.initial_s = 1.0;
  x.multiplier = 2.0;
  x.max_s = 60.0;
  return x;
}

/// The supervision policy of one task (docs/BEHAVIOUR.md, Supervisor settings).
/// Defaults live here and only here; `config/supervisor.json` must agree with
/// them (a test checks it).
struct supervisor_config {
  /// Retries of one agent before falling back to the next.
  int max_retries_per_agent = 3;
  /// Whether exhausted or failed-over agents hand over to the next one.
  bool enable_fallback = true;
  /// Base of the standard schedule: base x {1, 3, 9}.
  double backoff_base_seconds = 5.0;
  /// Base of the rate-limit schedule: base x {1, 2, 5}.
  double rate_limit_backoff_base = 60.0;
  /// Hard stop against runaway loops, counting every attempt of the task.
  int max_total_attempts = 30;
  /// Container crashes restarted per task; after that a crash falls back like
  /// an exhausted agent.
  int max_crash_restarts = 1;
  /// Action per class; every class has an entry (defaults: `default_action`).
  std::map<error_class, action> actions = default_actions();
  restart_type restart = restart_type::transient;
  intensity_config intensity;
  /// Per-class backoff overrides (exponential/jitter/table); classes without
  /// one use the standard or rate-limit schedule scaled by the bases above.
  std::map<error_class, backoff_spec> backoff;
  /// Optional per-task deadline in seconds; off unless set (there is no
  /// hang detection by default).
  std::optional<double> deadline_s;
  /// How long a cancelled attempt may take to stop before it is killed.
  double stop_grace_s = 10.0;
  /// What a `fatal` failure ends: its provider's agents or the whole task.
  fatal_scope fatal = fatal_scope::provider;
  /// Optional limit on one attempt's run time in seconds: the attempt is
  /// stopped (grace, then kill) and classified `timeout`. Off unless set;
  /// independent of the task's `deadline_s`.
  std::optional<double> attempt_timeout_s;
  /// An exit code by which an agent says "done, do not restart me": the
  /// task ends succeeded, even a `permanent` one. Off unless set; an agent
  /// can always say the same by creating the file `TASKSUP_DONE_FILE`.
  std::optional<int> done_exit_code;
  /// The schedule of a `permanent` task's restarts after exit 0.
  backoff_spec restart_backoff = default_restart_backoff();
  /// The steps around each attempt (from the task's keys).
  attempt_steps steps;
  /// What a `quota_exhausted` failure (or an agent whose account is closed
  /// until its quota resets) does: unset means `fallback` while the chain
  /// has another agent to fall back to, else `wait`.
  std::optional<quota_action> on_quota;
  /// How long to wait for a quota whose reset time the agent did not say.
  double quota_wait_s = 3600.0;

  /// The backoff policy these settings describe.
  backoff_policy make_backoff() const {
    return backoff_policy{backoff_base_seconds, rate_limit_backoff_base,
                          backoff};
  }

  /// Every class mapped to `default_action`.
  static std::map<error_class, action> default_actions() {
    std::map<error_class, action> out;
    for (auto cls : all_error_classes)
      out.emplace(cls, default_action(cls));
    return out;
  }
};

/// A task's override of a setting that can be off: not named (the layer
/// below decides), cleared (`null` in JSON: off, whatever the layer below
/// said), or a value. `x = 30.0` sets a value, `x.emplace()` clears it,
/// `x.reset()` names nothing.
template<class T>
using clearable = std::optional<std::optional<T>>;

/// A task's restart intensity overrides, field by field.
struct intensity_overrides {
  std::optional<int> max_restarts;
  std::optional<double> period_s;
  std::optional<double> reset_after_s;
};

/// The supervisor settings a task names (its `supervisor` object), for
/// task files, JSON submit and a typed submit alike: every field
/// is "not set" unless the task sets it, so a task can set a value back to
/// the built-in default over its environment's, and clear an optional one
/// (`deadline_s`, `attempt_timeout_s`, `done_exit_code`). `resolve_task`
/// applies them last: built-in defaults < `supervisor.json` < the
/// environment's `supervisor` < these. A per-class `actions` entry counts
/// class by class; a per-class `backoff` entry and `restart_backoff` replace
/// the schedule below them as a whole.
struct supervisor_overrides {
  std::optional<int> max_retries_per_agent;
  std::optional<bool> enable_fallback;
  std::optional<double> backoff_base_seconds;
  std::optional<double> rate_limit_backoff_base;
  std::optional<int> max_total_attempts;
  std::optional<int> max_crash_restarts;
  /// Only the classes named.
  std::map<error_class, action> actions;
  std::optional<restart_type> restart;
  intensity_overrides intensity;
  /// Only the classes named; each replaces that class's schedule.
  std::map<error_class, backoff_spec> backoff;
  clearable<double> deadline_s;
  std::optional<double> stop_grace_s;
  std::optional<fatal_scope> fatal;
  clearable<double> attempt_timeout_s;
  clearable<int> done_exit_code;
  std::optional<backoff_spec> restart_backoff;
  clearable<quota_action> on_quota;
  std::optional<double> quota_wait_s;

  /// True when the task names no setting.
  bool empty() const noexcept;
};

/// Puts every setting `over` names onto `cfg`. Applying the same overrides
/// twice changes nothing more.
void apply_overrides(supervisor_config& cfg, const supervisor_overrides& over);

/// True when `a` and `b` name the same settings with the same values
/// (doubles bit for bit, as `same_settings`).
bool same_overrides(const supervisor_overrides& a,
                    const supervisor_overrides& b) noexcept;

/// True when `a` and `b` hold exactly the same settings, doubles compared bit
/// for bit (so 0 and -0 differ and a NaN matches itself): a policy applying
/// either behaves identically, so tasks may share one copy of them.
bool same_settings(const supervisor_config& a,
                   const supervisor_config& b) noexcept;

/// A hash of every setting, consistent with `same_settings`.
std::size_t settings_hash(const supervisor_config& cfg) noexcept;

} // namespace tasksup

#pragma once

// The task as data: its state is a plain value that changes only through
// `task_machine::handle(state, input, now)`, which returns what the carrier
// (an actor, a test, a replay) must do as effects. Every decision and every
// delay of a task is made here; no clock, no I/O, no actor.

#include "tasksup/supervisor/agent_output.hpp"
#include "tasksup/supervisor/backoff.hpp"
#include "tasksup/supervisor/classifier.hpp"
#include "tasksup/supervisor/outcome.hpp"
#include "tasksup/supervisor/supervision_policy.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"
#include "tasksup/supervisor/task_model.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tasksup {

/// Where a task is in its life, as the machine sees it.
enum class task_phase : std::uint8_t {
  /// Not started.
  created,
  /// Waiting for permission to start an attempt (slot, breaker, budget).
  waiting,
  /// An attempt runs.
  running,
  /// The attempt failed; waiting for its classification.
  classifying,
  /// A retry is decided; waiting for its delay.
  delaying,
  /// Waiting out the delay.
  backoff,
  /// Finished; the result is final.
  done,
  /// The task's preflight command runs before the attempt (the attempt is
  /// counted; the agent has not started).
  preflight,
  /// The attempt exited 0 (or ended voluntarily); its gates run.
  gating,
  /// The gates passed; the change is being delivered.
  delivering,
  /// Parked: paused by the user (until resumed), waiting for the agent's
  /// quota to reset or for a "not now" to pass (until `resume_at_s`),
  /// holding no slot.
  parked,
};

/// "created", "waiting", "running", ...
std::string_view to_string(task_phase x) noexcept;

/// A user's stop request.
enum class stop_request : std::uint8_t { none, cancel, kill };

/// The machine's timers.
enum class timer_kind : std::uint8_t {
  backoff,
  deadline,
  /// `attempt_timeout_s` of one attempt; its generation is the attempt.
  attempt,
  /// The end of a wait in the parked phase (`task_machine_state::
  /// resume_at_s`): a quota reset, or a "not now" waited out.
  quota,
};

/// The exit code by which a task's preflight says "not now" (EX_TEMPFAIL of
/// sysexits.h): the task parks and tries again later, spending nothing.
inline constexpr int not_now_exit_code = 75;

/// Requests whose reply can fail.
enum class request_kind : std::uint8_t { permission, classify, delay, rules };

/// How a task ended.
enum class end_kind : std::uint8_t { succeeded, failed, stopped };

/// Why a task ended, as data.
enum class end_cause : std::uint8_t {
  /// A decision of the policy (succeed or fail).
  decision,
  /// `max_total_attempts` reached before an attempt could start.
  attempts_exhausted,
  /// The user stopped the task.
  user_stop,
  /// `deadline_s` passed.
  deadline,
  /// A request the task depends on failed (`request` says which).
  request_failed,
  /// The attempt could not be started at all and will not start by
  /// retrying (e.g. a missing Docker image where none can be pulled).
  start_refused,
  /// The agent said "done, do not restart me" (`done_exit_code` or the
  /// done file): succeeded, even for a `permanent` task.
  voluntary,
  /// The gates passed but the change could not be delivered (a conflict):
  /// failed, `detail` says why; the patch is kept.
  delivery_failed,
};

/// A value held out of line: an optional `T` that takes one pointer while
/// absent (and copies its value when copied). The task's state holds its
/// rarely present parts this way, so a task waiting out a backoff does not
/// carry their room (~770 bytes of ~1 KB).
template<class T>
class boxed {
public:
  boxed() = default;
  boxed(const boxed& x) : p_(x.p_ ? std::make_unique<T>(*x.p_) : nullptr) {}
  boxed(boxed&&) noexcept = default;
  boxed& operator=(const boxed& x) {
    if (this != &x)
      p_ = x.p_ ? std::make_unique<T>(*x.p_) : nullptr;
    return *this;
  }
  boxed& operator=(boxed&&) noexcept = default;
  boxed& operator=(T x) {
    if (p_)
      *p_ = std::move(x);
    else
      p_ = std::make_unique<T>(std::move(x));
    return *this;
  }

  explicit operator bool() const noexcept { return p_ != nullptr; }
  bool has_value() const noexcept { return p_ != nullptr; }
  T& operator*() noexcept { return *p_; }
  const T& operator*() const noexcept { return *p_; }
  T* operator->() noexcept { return p_.get(); }
  const T* operator->() const noexcept { return p_.get(); }
  void reset() noexcept { p_.reset(); }

  /// The value as a std::optional (moved out; this one is left empty).
  std::optional<T> take() {
    std::optional<T> out;
    if (p_)
      out = std::move(*p_);
    p_.reset();
    return out;
  }

private:
  std::unique_ptr<T> p_;
};

/// The check of one attempt's answer (`input::answer_checked`).
struct answer_check {
  int attempt = 0;
  bool ok = false;
  /// The answer, compact JSON, when it passed.
  std::string answer;
  /// Why it did not pass, one error per line.
  std::string errors;
};

/// The state of one task: a plain value, copyable, journaled.
struct task_machine_state {
  task_phase phase = task_phase::created;
  /// Counters of the policy (attempts, retries, chain position).
  supervision_state counters;
  /// Bumped whenever a pending reply or timer is superseded; replies and
  /// timers carry the generation they were made under.
  std::uint64_t generation = 0;
  /// The current (or last) attempt number, 0 before the first.
  int attempt = 0;
  /// The task holds an attempt slot.
  bool holds_slot = false;
  /// The user asked to stop the running attempt.
  stop_request stop = stop_request::none;
  /// The user forced a fallback while an attempt ran.
  bool fallback_requested = false;
  /// The deadline passed while an attempt ran.
  bool deadline_passed = false;
  /// A retry decided and not yet carried out (it is applied when its
  /// attempt starts, so nothing is ever taken back).
  boxed<decision> plan;
  /// The last attempt's end, kept while it is classified.
  boxed<attempt_outcome> ended;
  /// The previous delay (decorrelated jitter).
  double previous_delay_s = 0;
  /// When the task started (the `now` scale of `handle`), for the deadline.
  double started_at_s = 0;
  /// When the backoff ends (the `now` scale of `handle`), 0 when none.
  double retry_at_s = 0;
  /// The last attempt's exit code (nullopt before the first ended) and
  /// artifacts.
  std::optional<int> last_exit_code;
  std::vector<std::string> last_artifacts;
  /// The last attempt never started (the runtime could not start it).
  bool last_not_started = false;
  /// Tokens and US dollars summed over the attempts whose structured output
  /// reported them; absent while none did.
  std::optional<token_usage> usage;
  std::optional<double> cost_usd;
  /// The running attempt outlived `attempt_timeout_s` and is being stopped.
  bool timed_out = false;
  /// The attempt that ended (or is being gated) ended voluntarily.
  bool voluntary = false;
  /// A `permanent` task's restarts after exit 0 since its last stable run:
  /// the step of `restart_backoff` the next one waits.
  int restart_streak = 0;
  /// The decision that ends the task once its change is delivered.
  boxed<decision> ending;
  /// While parked for a quota: when the agent's account reopens; for a "not
  /// now": when the task tries again (the `now` scale of `handle`); 0
  /// otherwise.
  double resume_at_s = 0;
  /// Parked for a "not now" (else for a quota, when `resume_at_s` is set).
  bool not_now = false;
  /// "Not now"s in a row: the step of the `not_now` schedule the next one
  /// waits (0 again once a preflight passes or an attempt is judged
  /// otherwise).
  int not_now_streak = 0;
  /// The user paused the task: no attempt starts until it is resumed (a
  /// running one is left to finish).
  bool paused = false;
  /// The last check of an attempt's answer; absent while none came (a
  /// task without an answer schema never has one).
  boxed<answer_check> answer;
};

namespace input {

/// The task begins.
struct start {};

/// The node's answer to `effect::ask_permission`.
struct permission {
  std::uint64_t generation = 0;
  /// The agent's circuit breaker lets the attempt through.
  bool agent_allowed = true;
  /// The retry budget granted a token (when one was asked for).
  bool token = true;
  /// The agent asked about (named in the reason when its breaker is open).
  std::string agent_id;
};

/// The node's answer to `effect::ask_permission` when the agent's account
/// is closed for a used-up quota until `resume_at_s` (the `now` scale): no
/// slot comes with it.
struct quota_closed {
  std::uint64_t generation = 0;
  /// The account (the agent id, or the credential it is billed to).
  std::string account;
  double resume_at_s = 0;
};

/// The attempt's worker reports the attempt's runtime id.
struct attempt_started {
  int attempt = 0;
  std::string runtime_id;
};

/// The attempt ended (or was lost: an outcome with an infrastructure
/// error). `not_started` says the runtime never started it.
struct attempt_ended {
  int attempt = 0;
  attempt_outcome outcome;
  bool not_started = false;
  /// The runtime says starting again cannot help (e.g. image missing and
  /// no registry to pull from): fail the agent at once.
  bool permanent = false;
  /// The agent created its done file (`TASKSUP_DONE_FILE`): an exit 0 is
  /// then a voluntary end.
  bool done_file = false;
};

/// The answer to `effect::run_preflight`.
struct preflight_done {
  int attempt = 0;
  bool passed = false;
  /// The command's exit code (-1 when it could not run or timed out).
  int exit_code = 0;
  bool timed_out = false;
  /// Its last output line, or why it could not run.
  std::string detail;
};

/// The answer to `effect::run_gates`: every gate passed, or the first that
/// failed.
struct gates_done {
  int attempt = 0;
  bool passed = false;
  /// The failing gate's name.
  std::string gate;
  /// Its exit code (-1 when it could not run or timed out).
  int exit_code = 0;
  bool timed_out = false;
  /// Its last output line, or why it could not run.
  std::string detail;
};

/// The answer to `effect::deliver`.
struct delivered {
  int attempt = 0;
  bool ok = false;
  /// Why it failed (e.g. the patch does not apply).
  std::string detail;
};

/// The classifier's answer.
struct classified {
  std::uint64_t generation = 0;
  classification result;
};

/// The backoff actor's answer.
struct delay_decided {
  std::uint64_t generation = 0;
  delay_decision delay;
};

/// A timer fired.
struct timer {
  timer_kind kind = timer_kind::backoff;
  std::uint64_t generation = 0;
};

/// The user stops the task (cancel or kill).
struct stop {
  stop_request mode = stop_request::cancel;
};

/// The user skips the remaining backoff.
struct retry_now {};

/// The user abandons the current agent.
struct force_fallback {};

/// The user pauses the task: no further attempt starts until `resume` (a
/// running attempt, its gates and its delivery finish).
struct pause {};

/// The user resumes a paused task.
struct resume {};

/// A request failed (no reply, an error reply).
struct reply_failed {
  std::uint64_t generation = 0;
  request_kind request = request_kind::permission;
  std::string error;
};

/// The attempt's answer was checked against the task's schema; comes
/// before the attempt's end (`attempt_ended`), which it judges.
struct answer_checked {
  int attempt = 0;
  bool ok = false;
  /// The answer, compact JSON, when it parsed.
  std::string answer;
  /// The schema errors, one per line, when it did not pass.
  std::string errors;
};

/// The node restarted and rebuilt the task from its journal: whatever the
/// task waited for (a reply, a timer, its place in the queue) is gone and is
/// asked for again; a running attempt is to be adopted. Journaled like any
/// input, so a second restart replays the same generations.
struct resumed {};

} // namespace input

/// Everything a task reacts to.
using machine_input = std::variant<
  input::start, input::permission, input::attempt_started, input::attempt_ended,
  input::classified, input::delay_decided, input::timer, input::stop,
  input::retry_now, input::force_fallback, input::reply_failed, input::resumed,
  input::preflight_done, input::gates_done, input::delivered, input::pause,
  input::resume, input::quota_closed, input::answer_checked>;

namespace effect {

/// Ask the node for permission to start an attempt of `agent_index`: a slot
/// (unless held), the agent's breaker, and a retry token when `need_token`.
struct ask_permission {
  std::uint64_t generation = 0;
  std::size_t agent_index = 0;
  bool need_slot = true;
  bool need_token = false;
};

/// Give the slot back (or leave the queue).
struct release_slot {};

/// After a restart: the node counts the task's attempt slot as held again.
struct reclaim_slot {};

/// After a restart: take over attempt `attempt` of agent `agent_index`,
/// which may still run (or may have ended) without the node; its end arrives
/// as `input::attempt_ended`.
struct adopt_attempt {
  int attempt = 0;
  std::size_t agent_index = 0;
};

/// Start attempt `attempt` of agent `agent_index`.
struct start_attempt {
  int attempt = 0;
  std::size_t agent_index = 0;
};

/// Stop the running attempt: cancel (grace, then kill) or kill.
struct stop_attempt {
  stop_request mode = stop_request::cancel;
  double grace_s = 0;
};

/// Classify the attempt that just ended (`task_machine_state::ended`).
struct classify {
  std::uint64_t generation = 0;
};

/// Compute the delay of a planned retry.
struct ask_delay {
  std::uint64_t generation = 0;
  /// The schedule of the retry's class.
  backoff_spec spec;
  /// 0 for the agent's first retry.
  int retry_index = 0;
  double previous_s = 0;
  /// A retry-after hint, trusted only from a rate-limit classification.
  std::optional<double> hint_s;
};

/// Fire `input::timer{kind, generation}` after `delay_s` seconds.
struct set_timer {
  timer_kind kind = timer_kind::backoff;
  std::uint64_t generation = 0;
  double delay_s = 0;
};

/// Feed the agent's circuit breaker.
struct report_agent {
  std::size_t agent_index = 0;
  bool success = false;
};

/// The agent's quota is used up: close its account, for every task of the
/// node, until `resume_at_s` (the `now` scale).
struct close_account {
  std::size_t agent_index = 0;
  double resume_at_s = 0;
};

/// Events, as data; the carrier renders them.
struct attempt_exited {
  attempt_outcome outcome;
};
struct classified {
  classification result;
};
struct retry_scheduled {
  decision plan;
  delay_decision delay;
};
struct agent_switched {
  std::size_t from = 0;
  decision switched;
};
/// A user stop, with what it did.
struct user_stopped {
  stop_request mode = stop_request::cancel;
  /// The stop skipped a pending retry (else it stopped or prevented an
  /// attempt).
  bool skipped_retry = false;
};
/// The user asked for the planned retry now: `skipped_s` of its backoff
/// were left.
struct retry_requested {
  double skipped_s = 0;
};
/// The deadline passed (`stopping`: an attempt is being stopped).
struct deadline_passed {
  double deadline_s = 0;
  bool stopping = false;
};

/// Run the task's preflight command for attempt `attempt` of
/// `agent_index`; answered by `input::preflight_done`.
struct run_preflight {
  int attempt = 0;
  std::size_t agent_index = 0;
};

/// Run the task's gates in attempt `attempt`'s worktree; answered by
/// `input::gates_done`.
struct run_gates {
  int attempt = 0;
  /// The attempt ended voluntarily (for the event).
  bool voluntary = false;
};

/// Deliver attempt `attempt`'s change; answered by `input::delivered`.
struct deliver {
  int attempt = 0;
};

/// The running attempt outlived `attempt_timeout_s` and is being stopped.
struct attempt_timed_out {
  double timeout_s = 0;
};

/// The task parks until the quota of agent `agent_index` resets at
/// `why.resume_at_s`: `why` is the decision.
struct quota_wait {
  std::size_t agent_index = 0;
  decision why;
};

/// The task parks for a "not now" until `why.resume_at_s` (`why.count`:
/// not-nows in a row), then tries agent `agent_index` again.
struct not_now_wait {
  std::size_t agent_index = 0;
  decision why;
};

/// The user paused the task (`parked`: nothing runs now; else it parks once
/// its running attempt is over).
struct task_paused {
  bool parked = false;
};

/// The user resumed the task.
struct task_resumed {};

/// The agent said it is done (exit `done_exit_code`, or its done file).
struct voluntary_end {
  int exit_code = 0;
  bool done_file = false;
};

/// The task is over.
struct finish {
  end_kind outcome = end_kind::failed;
  end_cause cause = end_cause::decision;
  /// For `decision`: the decision.
  std::optional<decision> why;
  /// For `user_stop`.
  stop_request mode = stop_request::none;
  /// For `request_failed`: which, and its error; for `start_refused`, the
  /// runtime's text.
  request_kind request = request_kind::permission;
  std::string detail;
};

} // namespace effect

/// Everything a carrier must do.
using machine_effect = std::variant<
  effect::ask_permission, effect::release_slot, effect::reclaim_slot,
  effect::adopt_attempt, effect::start_attempt, effect::stop_attempt,
  effect::classify, effect::ask_delay, effect::set_timer, effect::report_agent,
  effect::attempt_exited, effect::classified, effect::retry_scheduled,
  effect::agent_switched, effect::user_stopped, effect::retry_requested,
  effect::deadline_passed, effect::finish, effect::run_preflight,
  effect::run_gates, effect::deliver, effect::attempt_timed_out,
  effect::voluntary_end, effect::close_account, effect::quota_wait,
  effect::task_paused, effect::task_resumed, effect::not_now_wait>;

/// A batch of effects, in the order they must be carried out.
using machine_effects = std::vector<machine_effect>;

/// The task's error text for `f` (absent on success), e.g. "retryable
/// failure (...): retries exhausted (3/3); no agent left to fall back to".
std::optional<std::string> describe(const effect::finish& f,
                                    const supervisor_config& cfg);

/// Why the task ended for `f`, as data (`task_result::cause`): the same
/// cases `describe` puts into words.
task_cause cause_of(const effect::finish& f);

/// The task machine of one policy and chain: immutable, shareable between
/// tasks with the same settings.
class task_machine {
public:
  /// A machine for a chain of `chain_size` agents under `policy`'s settings.
  task_machine(std::shared_ptr<const supervisor_config> cfg,
               std::size_t chain_size);

  /// A machine for a chain whose agents are served by `providers` (one per
  /// agent, empty when unknown): `fatal_scope: provider` moves past a
  /// provider that refused the task.
  task_machine(std::shared_ptr<const supervisor_config> cfg,
               std::vector<std::string> providers);

  /// The policy it applies.
  const supervision_policy& policy() const noexcept { return policy_; }

  /// The settings it applies.
  const supervisor_config& config() const noexcept { return policy_.config(); }

  /// A task that has not started.
  task_machine_state initial() const;

  /// Feeds `in` at `now_s` (seconds, any monotonic scale) and appends what
  /// must be done to `out`. Returns whether the input took effect: false for
  /// a control request that changed nothing (a stop of a finished task, a
  /// retry_now outside a backoff, a fallback with no agent left) and for a
  /// stale reply or timer.
  bool handle(task_machine_state& st, const machine_input& in, double now_s,
              machine_effects& out) const;

  /// The retry count `status` shows: the planned retry's during a backoff.
  static int shown_retry_count(const task_machine_state& st) noexcept;

private:
  bool on(task_machine_state& st, const input::start&, double,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::permission& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::attempt_started& in, double,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::attempt_ended& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::classified& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::delay_decided& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::timer& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::stop& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::retry_now&, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::force_fallback&, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::reply_failed& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::resumed&, double now_s,
          machine_effects& out) const;

  /// Asks for the delay of the planned retry.
  void ask_delay(task_machine_state& st, machine_effects& out) const;
  bool on(task_machine_state& st, const input::preflight_done& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::gates_done& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::delivered& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::pause&, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::resume&, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::quota_closed& in, double now_s,
          machine_effects& out) const;
  bool on(task_machine_state& st, const input::answer_checked& in, double,
          machine_effects& out) const;

  /// Whether an attempt that exited 0 (or ended voluntarily) may go on to
  /// its gates: its answer passed, or none is asked for. Otherwise it is
  /// judged `invalid_output`.
  bool answer_passed(task_machine_state& st, double now_s,
                     machine_effects& out) const;

  /// Parks the task until `d.resume_at_s`, when the agent's quota resets.
  void park_for_quota(task_machine_state& st, decision d, double now_s,
                      machine_effects& out) const;

  /// Parks the task for a "not now": the `not_now` schedule's next step.
  void park_not_now(task_machine_state& st, decision d, double now_s,
                    machine_effects& out) const;

  /// Whether a parked task waits for a timer (a quota or a "not now").
  static bool waits_in_park(const task_machine_state& st) noexcept;

  /// The attempt goes ahead: a planned retry is spent, the attempt counted.
  void count_started(task_machine_state& st) const;

  /// Parks a paused task in place of starting an attempt.
  void park(task_machine_state& st, machine_effects& out) const;

  /// Starts the agent of the attempt just granted (and its timeout).
  void launch(task_machine_state& st, machine_effects& out) const;

  /// The attempt (and its gates) succeeded: deliver, then end, or restart.
  void succeeded(task_machine_state& st, double now_s,
                 machine_effects& out) const;

  /// Judges a failure the machine classified itself (gate, timeout,
  /// preflight).
  void judge_as(task_machine_state& st, classification c, bool report,
                double now_s, machine_effects& out) const;

  /// Asks for permission to start the next attempt.
  void begin_attempt(task_machine_state& st, machine_effects& out) const;

  /// Carries out a decision.
  void act(task_machine_state& st, decision d, double now_s,
           machine_effects& out) const;

  /// Judges a classified (or unclassifiable) failure.
  void judge(task_machine_state& st, std::optional<classification> c,
             double now_s, machine_effects& out) const;

  /// Ends the task.
  void finish(task_machine_state& st, effect::finish f,
              machine_effects& out) const;

  supervision_policy policy_;
  backoff_policy backoff_;
  std::size_t chain_size_;
  /// Per agent of the chain; empty when no provider is known.
  std::vector<std::string> providers_;
};

} // namespace tasksup

#pragma once

#include "tasksup/supervisor/restart_window.hpp"
#include "tasksup/supervisor/supervisor_config.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup {

/// Which members a group restarts when one of them is to be restarted
/// (OTP's restart strategies).
enum class group_strategy : std::uint8_t {
  /// Only that member.
  one_for_one,
  /// Every member: the others are stopped (in reverse order), then all are
  /// started again (in order).
  one_for_all,
  /// That member and the members after it.
  rest_for_one,
  /// A workflow's steps (not one of OTP's, and not written in a group
  /// file): none is restarted; each starts once the members it depends on
  /// have succeeded, and one that fails skips the members that depend on
  /// it.
  steps,
  /// A best-of-N workflow step (not one of OTP's, and not written in a
  /// group file): every member starts at once and none is restarted; the
  /// first to succeed wins, and the others are stopped.
  race,
};

/// "one_for_one", "one_for_all", "rest_for_one", "steps" or "race".
std::string_view to_string(group_strategy x) noexcept;

/// One of OTP's three strategies by name ("steps" and "race" are not).
std::optional<group_strategy> parse_group_strategy(std::string_view) noexcept;

/// When the end of significant members ends the group (OTP's
/// `auto_shutdown`).
enum class auto_shutdown : std::uint8_t {
  /// Never: a group with this setting has no significant member.
  never,
  /// As soon as any significant member ends by itself for good.
  any_significant,
  /// Once every significant member has ended by itself for good.
  all_significant,
};

/// "never", "any_significant" or "all_significant".
std::string_view to_string(auto_shutdown x) noexcept;
std::optional<auto_shutdown> parse_auto_shutdown(std::string_view) noexcept;

/// How one run of a member ended, as the group sees it.
enum class member_end : std::uint8_t {
  /// Succeeded (a task) or ended without failure (a group): OTP's `normal`.
  normal,
  /// Failed (a task) or escalated (a group): an abnormal exit.
  failed,
  /// Stopped: by the group itself (for a restart or its own end), or by
  /// the user (`stop` or `kill` of the member), which OTP's
  /// `terminate_child` resembles: never restarted, and never a reason for
  /// `auto_shutdown`.
  stopped,
};

/// "normal", "failed" or "stopped".
std::string_view to_string(member_end x) noexcept;

/// Where a member stands.
enum class member_phase : std::uint8_t {
  /// Not running: not started yet, or ended and waiting to be started by a
  /// restart the group has decided.
  idle,
  /// Its start was asked for and is not confirmed yet.
  starting,
  /// Running.
  running,
  /// Its stop was asked for and its end has not come yet.
  stopping,
  /// Ended, and not to be started again unless a restart of other members
  /// takes it along (a `transient` member that ended normally, under
  /// `one_for_all` or `rest_for_one`).
  ended,
  /// Gone for good: a `temporary` member that ended or was stopped.
  removed,
  /// A step never started: a step it depends on failed (`steps`).
  skipped,
};

/// "idle", "starting", "running", "stopping", "ended", "removed" or
/// "skipped".
std::string_view to_string(member_phase x) noexcept;

/// Why a group ended.
enum class group_end : std::uint8_t {
  /// Every member ended and none is to be restarted.
  completed,
  /// A significant member ended, as `auto_shutdown` says.
  auto_shutdown,
  /// More restarts than `intensity` allows: the group escalates to its
  /// parent (as a failure).
  intensity,
  /// The user stopped it (or its parent did).
  stopped,
  /// A member could not be started when the group started.
  start_failed,
  /// `race`: a member succeeded first (`end_member`); the others were
  /// stopped.
  won,
};

/// "completed", "auto_shutdown", "intensity", "stopped", "start_failed" or
/// "won".
std::string_view to_string(group_end x) noexcept;

/// OTP's `intensity` and `period`: at most `max_restarts` restarts within
/// `period_s` seconds.
struct group_intensity {
  int max_restarts = 3;
  double period_s = 60;
};

/// What the machine needs to know of one member.
struct group_member_shape {
  std::string id;
  restart_type restart = restart_type::permanent;
  bool significant = false;
  /// `steps`: the members (indexes) that must succeed before it starts.
  std::vector<std::size_t> depends_on = {};
  /// `steps`: its failure neither skips its dependents nor fails the
  /// workflow.
  bool continue_on_failure = false;
};

/// What the machine needs to know of a group.
struct group_shape {
  group_strategy strategy = group_strategy::one_for_one;
  group_intensity intensity;
  tasksup::auto_shutdown shutdown = tasksup::auto_shutdown::never;
  std::vector<group_member_shape> members;
};

/// What the carrier does next for the group: start or stop one member.
struct group_op {
  enum kind_t : std::uint8_t { start, stop } kind = start;
  std::size_t member = 0;

  friend bool operator==(const group_op& x, const group_op& y) noexcept {
    return x.kind == y.kind && x.member == y.member;
  }

  friend bool operator!=(const group_op& x, const group_op& y) noexcept {
    return !(x == y);
  }
};

/// One restart decision, as the journal and `describe` keep it.
struct group_restart {
  double at_s = 0;
  /// The member whose end caused it, and how that run ended.
  std::size_t member = 0;
  member_end cause = member_end::failed;
  /// The members it stops and starts again, in start order.
  std::vector<std::size_t> restarted;
};

/// A group's decisions (OTP's supervisor behaviour) as a pure machine: fed
/// the members' starts and ends with the time, it says which member to
/// start or stop next, one at a time, and when the group ends and why. It
/// reads no clock and does no I/O; its state is plain data
/// (`snapshot`/`restore`) for the journal.
///
/// - `start` starts the members in order, each after the one before it is
///   confirmed (`started`).
/// - A member that ends by itself is restarted as its restart type says
///   (`permanent` always, `transient` after a failure, `temporary` never),
///   with the members `strategy` takes along; members being restarted are
///   stopped in reverse order, then started in order. Each restart decision
///   counts once against `intensity`; one beyond it ends the group
///   (`intensity`), which stops every member in reverse order.
/// - A significant member that ends by itself and is not restarted ends
///   the group as `auto_shutdown` says.
/// - A group whose members have all ended with none to restart ends
///   `completed`.
/// - With strategy `steps` (a workflow), no member is restarted: members
///   start in order once the members they depend on have succeeded (or
///   failed with `continue_on_failure`); a member that fails, is stopped or
///   cannot start skips every member that depends on it, directly or not.
///   The group completes once none is left to run; it failed when a member
///   did (or was stopped) without `continue_on_failure`.
/// - With strategy `race` (a best-of-N step), every member starts and none
///   is restarted. The first member to end normally wins: the group ends
///   `won` (`end_member` is the winner, `normal` to its parent) and stops
///   the others. A member that fails, is stopped or cannot start only drops
///   out; once every member has dropped out the group completed failed.
class group_machine {
public:
  explicit group_machine(group_shape shape);

  // -- inputs -----------------------------------------------------------------

  /// Starts the group: every member, in order.
  void start(double now_s);

  /// Member `i`'s start (the op handed out) is confirmed.
  void started(std::size_t i, double now_s);

  /// Member `i` could not be started. At the group's first start this ends
  /// the group (`start_failed`, as OTP's `init` fails); later it counts as
  /// a failed run of the member.
  void start_failed(std::size_t i, double now_s);

  /// A run of member `i` ended: by itself, or as the stop the group asked
  /// for (then `how` is ignored: the group stopped it).
  void ended(std::size_t i, member_end how, double now_s);

  /// Stops the group: every member in reverse order, then the group ends
  /// `stopped`. Nothing once the group is ending already.
  void stop(double now_s);

  // -- outputs ----------------------------------------------------------------

  /// The start or stop to carry out now, or nullopt while one is under way
  /// or nothing is to be done. Handing it out marks it under way.
  std::optional<group_op> next();

  /// Whether the group has ended, and why.
  bool done() const noexcept { return st_.end.has_value(); }
  std::optional<group_end> end_reason() const noexcept { return st_.end; }

  /// How the group's end looks to its parent: `normal` when it completed
  /// with every member's last run normal, shut down as `auto_shutdown`
  /// says, or `won`; `failed` for `intensity`, `start_failed` or a member whose
  /// last run failed and was not restarted; `stopped` when stopped.
  member_end end_as_member() const noexcept;

  /// The member whose end ended the group (`auto_shutdown`, `intensity`,
  /// `start_failed`, the winner of `won`, or a failed member's last run),
  /// if any.
  std::optional<std::size_t> end_member() const noexcept { return st_.end_by; }

  std::size_t size() const noexcept { return st_.members.size(); }

  /// Whether every member has been started once (OTP's supervisor returns
  /// from its start at this point).
  bool first_start_done() const noexcept { return st_.first_start_done; }

  member_phase phase(std::size_t i) const { return st_.members[i].phase; }

  /// How member `i`'s last run ended (nullopt before its first end).
  std::optional<member_end> last_end(std::size_t i) const {
    return st_.members[i].last;
  }

  /// Restarts of member `i` so far (each run after its first).
  int restarts_of(std::size_t i) const { return st_.members[i].restarts; }

  const group_shape& shape() const noexcept { return shape_; }

  /// Restart decisions so far, oldest first (the last
  /// `max_restart_history` of them).
  const std::vector<group_restart>& history() const noexcept {
    return st_.history;
  }

  /// Restart decisions in all (`history` keeps the last of them).
  std::uint64_t restart_count() const noexcept { return st_.restart_count; }

  /// Restart decisions counted in the intensity window ending at `now_s`.
  std::size_t restarts_in_window(double now_s) const {
    return st_.window.count(now_s);
  }

  /// Restart decisions kept in `history`.
  static constexpr std::size_t max_restart_history = 100;

  // -- journal ----------------------------------------------------------------

  /// Where one member stands, as the machine keeps it.
  struct member_state {
    member_phase phase = member_phase::idle;
    /// Part of a restart under way: to be stopped, to be started.
    bool to_stop = false;
    bool to_start = false;
    std::optional<member_end> last;
    int restarts = 0;
    /// `steps`: the members it depends on that have not succeeded yet.
    std::size_t deps_left = 0;
    /// `skipped`: the member whose end skipped it.
    std::optional<std::size_t> skipped_by;
  };

  /// The machine's whole state, plain data (what the journal keeps).
  struct state {
    std::vector<member_state> members;
    bool started = false;
    /// Whether every member has been started once (a failed start after
    /// this is a failed run, not a failed group start).
    bool first_start_done = false;
    /// Set when the group is ending: every member is stopped, then `end`.
    std::optional<group_end> shutting_down;
    std::optional<group_end> end;
    std::optional<std::size_t> end_by;
    std::optional<group_op> in_flight;
    /// The restart decisions within the intensity period
    /// (`restart_window::recorded`).
    restart_window window;
    std::vector<group_restart> history;
    std::uint64_t restart_count = 0;
    /// The members the last input skipped (`steps`), in order.
    std::vector<std::size_t> skipped;
  };

  const state& snapshot() const noexcept { return st_; }

  /// Restores `snapshot()`'s state (its member count must match the
  /// shape's). An op under way at the snapshot is under way again: the
  /// carrier reports its result as it learns it.
  void restore(state st);

private:
  void decide(std::size_t i, member_end how, double now_s);
  void begin_end(group_end why, std::optional<std::size_t> by);
  void check_settled();
  bool significant_end_ends_group(std::size_t i) const;
  /// `steps`: member i's run ended `how` (not restarted).
  void step_ended(std::size_t i, member_end how);
  /// `steps`: skips every member that depends on `i`, directly or not.
  void skip_dependents(std::size_t i);
  /// After a change that may add starts or stops anywhere: `next` looks at
  /// every member again.
  void rescan() noexcept;

  group_shape shape_;
  /// `steps`: the members that depend on each member (from the shape).
  std::vector<std::vector<std::size_t>> dependents_;
  state st_;
  /// Where `next` looks (derived from `st_`, not part of it): no stop is
  /// due at or above `stop_below_`, no start below `start_from_`. A restart
  /// of n members is then O(n), not O(n^2).
  std::size_t stop_below_ = 0;
  std::size_t start_from_ = 0;
};

/// One line of a group's tree as `status` shows it: the group itself
/// (depth 0), then each member, a nested group's own members below it.
struct group_row {
  /// 0 for the group asked about, 1 for its members, and so on.
  int depth = 0;
  std::string id;
  /// A group (else a task).
  bool group = false;
  restart_type restart = restart_type::permanent;
  bool significant = false;
  /// Where it stands in its group (the group asked about: `running`, or
  /// `ended` once it has).
  member_phase phase = member_phase::idle;
  /// How its last run ended, before it ran again.
  std::optional<member_end> last;
  /// Its runs after the first (the group asked about: its restart
  /// decisions).
  int restarts = 0;
  /// A group's strategy.
  group_strategy strategy = group_strategy::one_for_one;
  /// A workflow's step: the ids of the steps it depends on.
  std::vector<std::string> depends_on;
};

} // namespace tasksup

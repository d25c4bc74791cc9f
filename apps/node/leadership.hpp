#pragma once

// A coordinator's leadership over a shared PostgreSQL journal (its
// leader_lease): it stands by until the lease is free or expired, takes it
// (its journal is then fenced with the new epoch), and renews it on a
// thread of its own while it leads. A leader that loses the lease, or
// cannot renew it before it runs out, is deposed: another coordinator may
// lead already, so it stops at once, without a word to its journal or its
// workers (exit_status::deposed), and a service manager restarts it as a
// standby.

#include "tasksup/journal/leader_lease.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tasksup::app {

/// The default lease: a standby takes over within about this long after
/// the leader's last renewal (a quarter of it apart).
inline constexpr double default_lease_s = 4;

class leadership {
public:
  explicit leadership(std::unique_ptr<journal::leader_lease> lease);
  ~leadership();

  leadership(const leadership&) = delete;
  leadership& operator=(const leadership&) = delete;

  /// Tries to take the lease once: true when this coordinator leads now
  /// (`epoch()`). Otherwise `standby_text()` says who leads.
  bool try_take();

  /// What a standby answers its clients: who leads, where, since which
  /// epoch, how long their lease runs.
  std::string standby_text() const;

  /// Whether who leads (holder or epoch) changed since the last call, as
  /// the failed `try_take`s saw it: what a standby logs once.
  bool leader_changed();

  /// How often a standby tries to take the lease.
  double poll_s() const noexcept;

  std::int64_t epoch() const noexcept { return epoch_; }

  /// Renews the lease every quarter of it on a thread of its own;
  /// `deposed(why)` runs there when the lease is lost or runs out before a
  /// renewal succeeds.
  void keep(std::function<void(const std::string&)> deposed);

  /// Stops renewing and lets the lease expire now, so a standby takes over
  /// at once (a leader that stops gracefully).
  void release();

private:
  void renew_loop();
  /// Stops the renewing thread, if it runs.
  void stop_keeping();

  std::unique_ptr<journal::leader_lease> lease_;
  std::int64_t epoch_ = 0;
  mutable std::mutex mtx_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string standby_text_;
  /// Who leads as last seen ("holder@epoch"), and whether that changed
  /// since `leader_changed` was last asked.
  std::string seen_leader_;
  bool leader_news_ = false;
  std::function<void(const std::string&)> deposed_;
  std::thread keeper_;
};

} // namespace tasksup::app

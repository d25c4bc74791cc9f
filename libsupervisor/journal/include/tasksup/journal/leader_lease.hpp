#pragma once

// Leadership over a shared PostgreSQL journal: one row holds who leads
// (holder, the address clients reach it at), the epoch of that leadership
// and when it expires, on the database's clock. A coordinator takes the
// lease when it is free or expired (the epoch goes up by one), renews it
// while it leads, and fences its journal with the epoch, so a deposed
// leader can never commit (journal_store::fence). The others stand by and
// read who leads.

#include "tasksup/supervisor/expected.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace tasksup::journal {

namespace detail {
class pg_connection;
} // namespace detail

/// Who leads, as the database says.
struct lease_state {
  std::string holder;
  std::string address;
  std::int64_t epoch = 0;
  /// Seconds until the lease expires (negative: expired that long ago).
  double expires_in_s = 0;
};

/// One coordinator's side of the lease. Single-threaded; its own database
/// connection (renewals never wait behind the journal's commits).
class leader_lease {
public:
  /// Connects to the journal at `url`. `holder` names this coordinator
  /// (unique among those sharing the journal), `address` is where its
  /// clients reach it, `lease_s` how long a take or renewal holds.
  static expected<std::unique_ptr<leader_lease>> open(const std::string& url,
                                                      std::string holder,
                                                      std::string address,
                                                      double lease_s);

  ~leader_lease();
  leader_lease(const leader_lease&) = delete;
  leader_lease& operator=(const leader_lease&) = delete;

  /// Takes the lease if it is free or expired: the new epoch, or nullopt
  /// when another coordinator holds it.
  expected<std::optional<std::int64_t>> acquire();

  /// Extends the lease held at `epoch`; false when it is no longer ours.
  expected<bool> renew(std::int64_t epoch);

  /// Lets the lease held at `epoch` expire now (a leader that stops hands
  /// over at once).
  expected<bool> release(std::int64_t epoch);

  /// Who leads.
  expected<lease_state> leader();

  const std::string& holder() const noexcept { return holder_; }
  double lease_s() const noexcept { return lease_s_; }

private:
  leader_lease(std::unique_ptr<detail::pg_connection> db, std::string holder,
               std::string address, double lease_s);

  std::unique_ptr<detail::pg_connection> db_;
  std::string holder_;
  std::string address_;
  double lease_s_;
};

} // namespace tasksup::journal

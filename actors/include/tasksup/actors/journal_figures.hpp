#pragma once

// What the journal actor reports about itself, for /metrics: the size of
// the journal, what it wrote, its (group) commits and how long they took,
// whether commits fail now (a full disk among other reasons) and how many
// finished tasks retention pruned. Answered by the journal actor to
// `(jstats)`; local to the node (it never crosses the network).

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tasksup {

/// Asks the journal actor for its `journal_figures`.
using jstats_atom = caf::atom_constant<caf::atom("jstats")>;

/// Upper bounds of the commit-duration histogram's buckets, in seconds.
inline constexpr std::array<double, 12> journal_commit_buckets = {
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

/// The kinds of journal writes, as counted in `journal_figures::written`.
inline constexpr std::array<std::string_view, 6> journal_write_kinds = {
  "task", "input", "event", "end", "state", "forget"};

/// The journal's figures since the node started (counters) and now (gauges).
struct journal_figures {
  /// Bytes of the database file and its write-ahead log.
  std::int64_t bytes = 0;
  /// Tasks stored, and of those not finished.
  std::int64_t tasks = 0;
  std::int64_t unfinished = 0;
  /// Writes committed, by kind (indices of `journal_write_kinds`).
  std::vector<std::uint64_t> written =
    std::vector<std::uint64_t>(journal_write_kinds.size());
  /// Group commits that succeeded, and commit attempts that failed.
  std::uint64_t commits = 0;
  std::uint64_t commit_failures = 0;
  /// Commits per bucket of `journal_commit_buckets` (not cumulative; the
  /// last entry counts those above the last bound), and their total time.
  std::vector<std::uint64_t> commit_buckets =
    std::vector<std::uint64_t>(journal_commit_buckets.size() + 1);
  double commit_seconds = 0;
  /// Syncs to disk: one before a client is told of what was committed
  /// (sync mode full; none with normal).
  std::uint64_t syncs = 0;
  /// Writes waiting for the next commit.
  std::uint64_t pending = 0;
  /// Commits fail now (writes are kept and retried; submissions refused).
  bool failing = false;
  /// ... because the disk (or the journal's size limit) is full.
  bool disk_full = false;
  /// Finished tasks removed by retention.
  std::uint64_t pruned = 0;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, journal_figures& x) {
  return f(caf::meta::type_name("journal_figures"), x.bytes, x.tasks,
           x.unfinished, x.written, x.commits, x.commit_failures,
           x.commit_buckets, x.commit_seconds, x.syncs, x.pending, x.failing,
           x.disk_full, x.pruned);
}

} // namespace tasksup

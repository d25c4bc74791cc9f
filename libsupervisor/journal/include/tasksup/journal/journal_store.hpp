#pragma once

// The node's journal on disk: one SQLite database in WAL mode in the node's
// state directory. It stores bytes and numbers only; what the bytes mean
// (task specs, task machine inputs, events, results) is the actors' codec.
// Writes go into an open transaction that `commit` hands to the operating
// system (safe against a crash of the node) and `sync` puts on disk (safe
// against a crash of the machine), so a carrier commits many records at once
// and syncs only when someone is about to be told (group commit).

#include "tasksup/supervisor/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::journal {

/// What `journal_store::sync` does.
enum class sync_mode : std::uint8_t {
  /// `sync` puts every commit so far on disk (they survive power loss).
  full,
  /// `sync` does nothing: commits survive a crash of the node, not of the
  /// machine; the disk is synced at checkpoints only.
  normal,
};

/// "full" or "normal".
std::string_view to_string(sync_mode x) noexcept;

/// Parses "full" or "normal".
std::optional<sync_mode> parse_sync_mode(std::string_view text) noexcept;

/// The journal's schema version this build writes. It also stands for the
/// encoding of the records (the blobs the node writes): a version that
/// changes it is not migrated.
inline constexpr int schema_version = 5;

/// The oldest schema version whose records this build reads. Version 3
/// changed the records' encoding (an agent carries its profile's
/// `idle_noise` patterns), and version 4 again (a task carries the
/// supervisor settings it names, `supervisor_overrides`, beside the ones it
/// was resolved to), and version 5 again (the settings carry `on_quota` and
/// `quota_wait_s`; a machine's inputs include pause, resume and a closed
/// account); an older journal that holds tasks is refused at open with what
/// to do, an empty one is migrated.
inline constexpr int oldest_readable_version = 5;

/// How to open a journal.
struct store_options {
  /// The state directory; created with mode 0700 when missing.
  std::string dir;
  sync_mode sync = sync_mode::full;
  /// Caps the database at this many pages (4 KiB each); a write beyond it
  /// fails as on a full disk. For tests; 0 means no cap.
  std::int64_t max_pages = 0;
};

/// A task as stored.
struct stored_task {
  /// Submission order (never reused).
  std::int64_t seq = 0;
  std::string id;
  /// The task as the node accepted it (codec bytes).
  std::string spec;
  /// Wall-clock seconds.
  double submitted_at = 0;
  /// Present once the task ended: when, and its result (codec bytes).
  std::optional<double> finished_at;
  std::string result;
};

/// One record of a task (an input of its task machine, codec bytes).
struct stored_record {
  std::int64_t n = 0;
  std::string body;
};

/// One event of a task's history (kind and rendered JSON).
struct stored_event {
  std::int64_t n = 0;
  int kind = 0;
  std::string json;
};

/// The figures `stats` reports.
struct store_stats {
  std::int64_t tasks = 0;
  std::int64_t unfinished = 0;
  std::int64_t records = 0;
  std::int64_t events = 0;
  /// Size of the database file and its write-ahead log, in bytes.
  std::int64_t bytes = 0;
  /// Commits since open.
  std::int64_t commits = 0;
  /// Syncs to disk since open (`sync` calls that had commits to sync).
  std::int64_t syncs = 0;
};

/// The journal's database. Single-threaded: one owner (the journal actor)
/// uses it. Every failure is a value naming the database file.
class journal_store {
public:
  /// Opens (or creates) the journal in `opts.dir`, takes the directory's
  /// lock (one node per state directory), checks the file's integrity and
  /// migrates an older schema. A corrupt, unreadable or newer file is an
  /// error, never an empty start.
  static expected<std::unique_ptr<journal_store>>
  open(const store_options& opts);

  ~journal_store();

  journal_store(const journal_store&) = delete;
  journal_store& operator=(const journal_store&) = delete;

  /// The database file's path.
  const std::string& path() const noexcept;

  /// What `sync` does.
  sync_mode mode() const noexcept;

  // -- writes (into the open transaction; `commit` makes them durable) -----

  /// Adds a task; refuses an id that exists. Returns its sequence number.
  expected<std::int64_t> add_task(const std::string& id,
                                  const std::string& spec, double at);

  /// Removes a task and everything recorded of it (`submit --replace`).
  expected<bool> drop_task(const std::string& id);

  /// Appends record `n` of task `seq`.
  expected<bool> add_record(std::int64_t seq, std::int64_t n,
                            const std::string& body);

  /// Appends event `n` of task `seq`.
  expected<bool> add_event(std::int64_t seq, std::int64_t n, int kind,
                           const std::string& json);

  /// Marks task `seq` finished with its result.
  expected<bool> end_task(std::int64_t seq, double at,
                          const std::string& result);

  /// Sets a piece of node state (breakers, budget, rotation).
  expected<bool> put_state(const std::string& key, const std::string& body);

  /// Removes finished tasks older than `max_age_s` (0: no limit) and beyond
  /// the newest `max_count` finished ones (0: no limit). Returns how many.
  expected<std::int64_t> prune(double now, double max_age_s,
                               std::int64_t max_count);

  /// Makes every write since the last commit one transaction, handed to the
  /// operating system: it survives a crash of the node at once, and one of
  /// the machine once synced. On failure the writes are rolled back and the
  /// error says why (a full disk names itself).
  expected<bool> commit();

  /// With sync mode full, puts every commit so far on disk (one sync of the
  /// write-ahead log, none when nothing was committed since the last); with
  /// normal, does nothing. Returns whether it synced. On failure the
  /// commits stay as they are (in the operating system's hands) and the
  /// error says why; syncing again later may succeed.
  expected<bool> sync();

  /// Drops every write since the last commit.
  void rollback();

  /// Whether the last failure may pass by retrying the same writes later
  /// (a full disk, an I/O error, a lock), as opposed to a write that can
  /// never succeed (e.g. a record that exists already).
  bool last_failure_transient() const noexcept;

  // -- reads ---------------------------------------------------------------

  /// Every task, in submission order.
  expected<std::vector<stored_task>> tasks();

  /// One task by id.
  expected<std::optional<stored_task>> task(const std::string& id);

  /// The records of task `seq`, in order.
  expected<std::vector<stored_record>> records(std::int64_t seq);

  /// The number of the last event of task `seq` (0 when none).
  expected<std::int64_t> last_event(std::int64_t seq);

  /// The events of task `seq`, in order.
  expected<std::vector<stored_event>> events(std::int64_t seq);

  /// A piece of node state.
  expected<std::optional<std::string>> state(const std::string& key);

  /// Sizes and counts.
  expected<store_stats> stats();

private:
  struct impl;
  explicit journal_store(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Syncs a journal's write-ahead log from a thread other than its store's,
/// so commits go on while the disk catches up: one `sync` puts every commit
/// the store made before the call on disk. It opens the log file itself
/// (SQLite's objects belong to the store's thread); the log keeps its file
/// while the store is open. One thread uses it at a time.
class wal_syncer {
public:
  /// For the journal whose database file is `db_path` (`store.path()`).
  explicit wal_syncer(std::string db_path);
  ~wal_syncer();

  wal_syncer(const wal_syncer&) = delete;
  wal_syncer& operator=(const wal_syncer&) = delete;

  /// Puts the log on disk (and, the first time, the directory entry that
  /// names it). The error names the file.
  expected<bool> sync();

private:
  std::string wal_;
  std::string dir_;
  int fd_ = -1;
};

} // namespace tasksup::journal

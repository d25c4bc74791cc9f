#pragma once

// The node's journal: one interface, two backends. The embedded default is
// one SQLite database in WAL mode in the node's state directory; the other is
// a PostgreSQL database (`postgresql://...`), which several coordinators may
// share, one leading at a time (leader_lease.hpp). A journal stores bytes and
// numbers only; what the bytes mean (task specs, task machine inputs,
// events, results) is the actors' codec. Writes go into an open transaction
// that `commit` makes durable against a crash of the node (SQLite hands it
// to the operating system, PostgreSQL commits it on the server), and SQLite's
// `sync` puts on disk (safe against a crash of the machine), so a carrier
// commits many records at once and syncs only when someone is about to be
// told (group commit).

#include "tasksup/supervisor/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
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
  /// The state directory; created with mode 0700 when missing. One node uses
  /// it at a time (its lock), whichever the backend.
  std::string dir;
  /// Empty: the SQLite journal in `dir`. A `postgresql://` (or `postgres://`)
  /// URL: the PostgreSQL journal there (libpq's URL form; a password is
  /// better kept in ~/.pgpass or PGPASSWORD than in the URL).
  std::string url = {};
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

/// What an unfinished task left to replay: its records, in order, and the
/// number of its last event.
struct unfinished_task {
  std::vector<stored_record> records;
  std::int64_t last_event = 0;
};

/// The figures `stats` reports.
struct store_stats {
  std::int64_t tasks = 0;
  std::int64_t unfinished = 0;
  std::int64_t records = 0;
  std::int64_t events = 0;
  /// Size of the database (SQLite: its file and write-ahead log), in bytes.
  std::int64_t bytes = 0;
  /// Commits since open.
  std::int64_t commits = 0;
  /// Syncs to disk since open (`sync` calls that had commits to sync).
  std::int64_t syncs = 0;
};

/// Whether `text` names a PostgreSQL journal (`postgresql://`,
/// `postgres://`).
bool is_postgresql_url(std::string_view text) noexcept;

/// `url` without its password, for logs and errors.
std::string redact_url(std::string_view url);

class wal_syncer;

/// The journal's database. Single-threaded: one owner (the journal actor)
/// uses it. Every failure is a value naming the database (its file, or its
/// URL without the password).
class journal_store {
public:
  /// Opens (or creates) the journal `opts` names, takes the state
  /// directory's lock (one node per state directory), checks the database
  /// and migrates an older schema. A corrupt, unreadable or newer journal is
  /// an error, never an empty start.
  static expected<std::unique_ptr<journal_store>>
  open(const store_options& opts);

  virtual ~journal_store();

  journal_store(const journal_store&) = delete;
  journal_store& operator=(const journal_store&) = delete;

  /// The database file's path, or the URL without its password.
  virtual const std::string& path() const noexcept = 0;

  /// What `sync` does.
  virtual sync_mode mode() const noexcept = 0;

  /// A syncer that puts commits on disk from another thread (`wal_syncer`),
  /// or null when a commit needs no sync (PostgreSQL, SQLite in mode
  /// normal).
  virtual std::unique_ptr<wal_syncer> background_syncer() const = 0;

  // -- fencing (a journal shared by coordinators) --------------------------

  /// From now on every commit checks, in its transaction, that the
  /// leadership is still at `epoch` (leader_lease.hpp); a commit after
  /// another coordinator took over fails and `deposed` turns true. The
  /// SQLite journal has no leadership (its directory lock is its fence): it
  /// ignores this.
  virtual void fence(std::int64_t epoch) = 0;

  /// Whether a commit failed because another coordinator leads now. Such a
  /// journal never commits again: its owner must stop.
  virtual bool deposed() const noexcept = 0;

  // -- writes (into the open transaction; `commit` makes them durable) -----

  /// Adds a task; refuses an id that exists. Returns its sequence number.
  virtual expected<std::int64_t>
  add_task(const std::string& id, const std::string& spec, double at) = 0;

  /// Removes a task and everything recorded of it (`submit --replace`).
  virtual expected<bool> drop_task(const std::string& id) = 0;

  /// Appends record `n` of task `seq`.
  virtual expected<bool> add_record(std::int64_t seq, std::int64_t n,
                                    const std::string& body) = 0;

  /// Appends event `n` of task `seq`.
  virtual expected<bool> add_event(std::int64_t seq, std::int64_t n, int kind,
                                   const std::string& json) = 0;

  /// Marks task `seq` finished with its result.
  virtual expected<bool> end_task(std::int64_t seq, double at,
                                  const std::string& result) = 0;

  /// Sets a piece of node state (breakers, budget, rotation).
  virtual expected<bool> put_state(const std::string& key,
                                   const std::string& body) = 0;

  /// Removes finished tasks older than `max_age_s` (0: no limit) and beyond
  /// the newest `max_count` finished ones (0: no limit). Returns how many.
  virtual expected<std::int64_t> prune(double now, double max_age_s,
                                       std::int64_t max_count) = 0;

  /// Makes every write since the last commit one transaction, handed to the
  /// operating system: it survives a crash of the node at once, and one of
  /// the machine once synced. On failure the writes are rolled back and the
  /// error says why (a full disk names itself).
  virtual expected<bool> commit() = 0;

  /// With sync mode full, puts every commit so far on disk (one sync of the
  /// write-ahead log, none when nothing was committed since the last); with
  /// normal, does nothing. Returns whether it synced. On failure the
  /// commits stay as they are (in the operating system's hands) and the
  /// error says why; syncing again later may succeed.
  virtual expected<bool> sync() = 0;

  /// Drops every write since the last commit.
  virtual void rollback() = 0;

  /// Whether the last failure may pass by retrying the same writes later
  /// (a full disk, an I/O error, a lock), as opposed to a write that can
  /// never succeed (e.g. a record that exists already).
  virtual bool last_failure_transient() const noexcept = 0;

  // -- reads ---------------------------------------------------------------

  /// Every task, in submission order.
  virtual expected<std::vector<stored_task>> tasks() = 0;

  /// One task by id.
  virtual expected<std::optional<stored_task>> task(const std::string& id) = 0;

  /// The records of task `seq`, in order.
  virtual expected<std::vector<stored_record>> records(std::int64_t seq) = 0;

  /// The number of the last event of task `seq` (0 when none).
  virtual expected<std::int64_t> last_event(std::int64_t seq) = 0;

  /// The records and last event of every unfinished task, by sequence
  /// number (a task with neither is absent): what a restarted node replays,
  /// in two reads whatever the number of tasks (a round trip per task would
  /// cost seconds at 10,000 over a network).
  virtual expected<std::map<std::int64_t, unfinished_task>> unfinished() = 0;

  /// The events of task `seq`, in order.
  virtual expected<std::vector<stored_event>> events(std::int64_t seq) = 0;

  /// A piece of node state.
  virtual expected<std::optional<std::string>>
  state(const std::string& key) = 0;

  /// Sizes and counts.
  virtual expected<store_stats> stats() = 0;

protected:
  journal_store() = default;
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

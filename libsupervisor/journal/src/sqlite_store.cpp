#include "tasksup/journal/journal_store.hpp"

#include "backends.hpp"
#include "state_dir.hpp"

#include <sqlite3.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

namespace tasksup::journal {

namespace {

/// The schema, one step per version: step i takes version i to i + 1.
/// Existing steps never change; a new version appends a step.
constexpr const char* migrations[] = {
  // 0 -> 1: tasks, their machine inputs and their events.
  "CREATE TABLE tasks ("
  "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
  "  id TEXT NOT NULL UNIQUE,"
  "  spec BLOB NOT NULL,"
  "  submitted_at REAL NOT NULL,"
  "  finished_at REAL,"
  "  result BLOB);"
  "CREATE INDEX tasks_finished ON tasks(finished_at);"
  "CREATE TABLE records ("
  "  task INTEGER NOT NULL,"
  "  n INTEGER NOT NULL,"
  "  body BLOB NOT NULL,"
  "  PRIMARY KEY (task, n)) WITHOUT ROWID;"
  "CREATE TABLE events ("
  "  task INTEGER NOT NULL,"
  "  n INTEGER NOT NULL,"
  "  kind INTEGER NOT NULL,"
  "  json TEXT NOT NULL,"
  "  PRIMARY KEY (task, n)) WITHOUT ROWID;",
  // 1 -> 2: the node's own state (breakers, retry budget, rotation).
  "CREATE TABLE node_state ("
  "  key TEXT PRIMARY KEY,"
  "  body BLOB NOT NULL) WITHOUT ROWID;",
  // 2 -> 3: the records' encoding changed, not the tables (only an empty
  // journal gets here; see oldest_readable_version).
  "-- no change to the tables",
  // 3 -> 4: the records' encoding changed again (a task's supervisor
  // overrides), not the tables.
  "-- no change to the tables",
  // 4 -> 5: the records' encoding changed again (quota settings, pause and
  // resume), not the tables.
  "-- no change to the tables",
};

static_assert(sizeof(migrations) / sizeof(migrations[0]) == schema_version);

/// A prepared statement, reset after every use.
class statement {
public:
  statement() = default;
  explicit statement(sqlite3_stmt* s) : s_(s) {}
  statement(statement&& other) noexcept : s_(other.s_) { other.s_ = nullptr; }
  statement& operator=(statement&& other) noexcept {
    std::swap(s_, other.s_);
    return *this;
  }
  ~statement() {
    if (s_)
      sqlite3_finalize(s_);
  }
  sqlite3_stmt* get() const noexcept { return s_; }

private:
  sqlite3_stmt* s_ = nullptr;
};

/// Resets a statement when the scope ends, whatever happened.
struct reset_guard {
  sqlite3_stmt* s;
  ~reset_guard() {
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
  }
};

void bind(sqlite3_stmt* s, int i, std::int64_t x) {
  sqlite3_bind_int64(s, i, x);
}
void bind(sqlite3_stmt* s, int i, double x) {
  sqlite3_bind_double(s, i, x);
}
void bind(sqlite3_stmt* s, int i, int x) {
  sqlite3_bind_int(s, i, x);
}
void bind(sqlite3_stmt* s, int i, const std::string& x) {
  sqlite3_bind_blob64(s, i, x.data(), x.size(), SQLITE_STATIC);
}

/// A string for a TEXT column (ids, keys, JSON): compared as text.
struct text {
  const std::string& str;
};

void bind(sqlite3_stmt* s, int i, text x) {
  sqlite3_bind_text64(s, i, x.str.data(), x.str.size(), SQLITE_STATIC,
                      SQLITE_UTF8);
}

std::string column_bytes(sqlite3_stmt* s, int i) {
  auto* p = static_cast<const char*>(sqlite3_column_blob(s, i));
  auto n = sqlite3_column_bytes(s, i);
  return p ? std::string(p, static_cast<std::size_t>(n)) : std::string{};
}

struct sqlite_impl {
  std::string dir;
  std::string path;
  sqlite3* db = nullptr;
  detail::state_dir_lock lock;
  bool in_tx = false;
  bool transient = false;
  sync_mode mode = sync_mode::full;
  /// Committed since the last sync.
  bool unsynced = false;
  std::int64_t commits = 0;
  std::int64_t syncs = 0;
  std::map<std::string, statement> cache;

  ~sqlite_impl() {
    cache.clear();
    if (db)
      sqlite3_close(db);
  }

  tasksup::error fail(std::string what) const {
    return tasksup::error{path, "", std::move(what)};
  }

  tasksup::error sql_fail(std::string_view doing) {
    auto code = sqlite3_extended_errcode(db);
    switch (code & 0xff) {
      case SQLITE_FULL:
      case SQLITE_IOERR:
      case SQLITE_BUSY:
      case SQLITE_LOCKED:
      case SQLITE_CANTOPEN:
      case SQLITE_NOMEM:
        transient = true;
        break;
      default:
        transient = false;
    }
    std::string what{doing};
    what += ": ";
    if ((code & 0xff) == SQLITE_FULL)
      what += "the disk (or the journal's size limit) is full";
    else
      what += sqlite3_errmsg(db);
    return fail(std::move(what));
  }

  /// Runs SQL without results.
  expected<bool> exec(const char* sql, std::string_view doing) {
    char* msg = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
      std::string what{doing};
      what += ": ";
      what += msg ? msg : sqlite3_errmsg(db);
      sqlite3_free(msg);
      return fail(std::move(what));
    }
    return true;
  }

  expected<sqlite3_stmt*> prepare(const std::string& sql) {
    if (auto i = cache.find(sql); i != cache.end())
      return i->second.get();
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &s,
                           nullptr) != SQLITE_OK)
      return sql_fail("preparing a statement");
    cache.emplace(sql, statement{s});
    return s;
  }

  /// Opens the write transaction unless one is open.
  expected<bool> begin() {
    if (in_tx)
      return true;
    if (auto ok = exec("BEGIN IMMEDIATE", "starting a transaction"); !ok)
      return ok;
    in_tx = true;
    return true;
  }

  template<class... Ts>
  expected<bool> write(const std::string& sql, std::string_view doing,
                       const Ts&... xs) {
    if (auto ok = begin(); !ok)
      return ok;
    auto s = prepare(sql);
    if (!s)
      return s.error();
    reset_guard guard{*s};
    int i = 0;
    (bind(*s, ++i, xs), ...);
    if (sqlite3_step(*s) != SQLITE_DONE)
      return sql_fail(doing);
    return true;
  }

  /// The database file created 0600 before SQLite opens it: SQLite makes
  /// the -wal and -shm files with the database file's mode, and the log
  /// holds whole task specs (prompts and env secrets) until a checkpoint.
  /// Files an older node left with looser modes are tightened too.
  expected<bool> make_files_private() {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
      return tasksup::error{path, "",
                            std::string{"cannot open the journal: "} +
                              std::strerror(errno)};
    bool ok = ::fchmod(fd, 0600) == 0;
    auto err = errno;
    ::close(fd);
    if (!ok)
      return tasksup::error{path, "",
                            std::string{"cannot make the journal private: "} +
                              std::strerror(err)};
    for (auto* suffix : {"-wal", "-shm"}) {
      auto side = path + suffix;
      if (::chmod(side.c_str(), 0600) != 0 && errno != ENOENT)
        return tasksup::error{side, "",
                              std::string{"cannot make the journal's "
                                          "side file private: "} +
                                std::strerror(errno)};
    }
    return true;
  }

  expected<int> user_version() {
    auto s = prepare("PRAGMA user_version");
    if (!s)
      return s.error();
    reset_guard guard{*s};
    if (sqlite3_step(*s) != SQLITE_ROW)
      return sql_fail("reading the schema version");
    return sqlite3_column_int(*s, 0);
  }

  expected<bool> check_integrity() {
    auto s = prepare("PRAGMA quick_check(1)");
    if (!s)
      return fail(sqlite3_errmsg(db));
    reset_guard guard{*s};
    if (sqlite3_step(*s) != SQLITE_ROW)
      return sql_fail("checking the journal's integrity");
    auto text = column_bytes(*s, 0);
    if (text != "ok")
      return fail("the journal is damaged (" + text +
                  "); move it away to start an empty node");
    return true;
  }

  /// How many tasks the journal holds (its tables exist).
  expected<std::int64_t> count_tasks() {
    auto s = prepare("SELECT count(*) FROM tasks");
    if (!s)
      return s.error();
    reset_guard guard{*s};
    if (sqlite3_step(*s) != SQLITE_ROW)
      return sql_fail("counting the journal's tasks");
    return static_cast<std::int64_t>(sqlite3_column_int64(*s, 0));
  }

  expected<bool> migrate() {
    auto v = user_version();
    if (!v)
      return v.error();
    if (*v > schema_version)
      return fail("the journal's schema version " + std::to_string(*v) +
                  " is newer than this tasksup's (" +
                  std::to_string(schema_version) + "); use a newer tasksup");
    if (*v < 0)
      return fail("the journal's schema version " + std::to_string(*v) +
                  " is not valid");
    if (*v == schema_version)
      return true;
    if (*v > 0 && *v < oldest_readable_version) {
      auto tasks = count_tasks();
      if (!tasks)
        return tasks.error();
      if (*tasks > 0)
        return fail(
          "the journal (schema version " + std::to_string(*v) + ", " +
          std::to_string(*tasks) +
          " task(s)) was written by an older tasksup whose records this "
          "one cannot read (schema version " +
          std::to_string(schema_version) +
          "); let that version finish its tasks, or move the journal away to "
          "start an empty node");
    }
    if (auto ok = begin(); !ok)
      return ok;
    for (int from = *v; from < schema_version; ++from) {
      auto doing = "migrating the journal from schema version " +
                   std::to_string(from) + " to " + std::to_string(from + 1);
      if (auto ok = exec(migrations[from], doing); !ok) {
        rollback();
        return ok;
      }
    }
    auto set = "PRAGMA user_version = " + std::to_string(schema_version);
    if (auto ok = exec(set.c_str(), "setting the schema version"); !ok) {
      rollback();
      return ok;
    }
    return commit();
  }

  expected<bool> commit() {
    if (!in_tx)
      return true;
    if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      auto err = sql_fail("committing to the journal");
      rollback();
      return err;
    }
    in_tx = false;
    ++commits;
    unsynced = true;
    return true;
  }

  /// Syncs the write-ahead log, which holds every commit since the last
  /// checkpoint (a checkpoint syncs the log before it copies it, and the
  /// database after). SQLite's own file object is used, so its first sync of
  /// a new log also syncs the directory entry.
  expected<bool> sync() {
    if (mode != sync_mode::full || !unsynced)
      return false;
    sqlite3_file* wal = nullptr;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) !=
        SQLITE_OK) {
      transient = true;
      return fail("syncing the journal: cannot reach its write-ahead log");
    }
    // No log is open: everything committed is in the database file, synced
    // by the checkpoint that emptied the log.
    if (wal && wal->pMethods) {
      if (auto rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
          rc != SQLITE_OK) {
        transient = true;
        return fail(std::string{"syncing the journal to disk: "} +
                    sqlite3_errstr(rc));
      }
    }
    unsynced = false;
    ++syncs;
    return true;
  }

  void rollback() {
    if (in_tx)
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    in_tx = false;
  }
};

/// The SQLite journal: one database file in WAL mode in the state
/// directory.
class sqlite_store final : public journal_store {
public:
  explicit sqlite_store(std::unique_ptr<sqlite_impl> p) : impl_(std::move(p)) {}
  ~sqlite_store() override { impl_->rollback(); }

  const std::string& path() const noexcept override { return impl_->path; }
  sync_mode mode() const noexcept override { return impl_->mode; }
  std::unique_ptr<wal_syncer> background_syncer() const override {
    if (impl_->mode != sync_mode::full)
      return nullptr;
    return std::make_unique<wal_syncer>(impl_->path);
  }
  void fence(std::int64_t) override {}
  bool deposed() const noexcept override { return false; }

  expected<std::int64_t> add_task(const std::string& id,
                                  const std::string& spec, double at) override;
  expected<bool> drop_task(const std::string& id) override;
  expected<bool> add_record(std::int64_t seq, std::int64_t n,
                            const std::string& body) override;
  expected<bool> add_event(std::int64_t seq, std::int64_t n, int kind,
                           const std::string& json) override;
  expected<bool> end_task(std::int64_t seq, double at,
                          const std::string& result) override;
  expected<bool> put_state(const std::string& key,
                           const std::string& body) override;
  expected<std::int64_t> prune(double now, double max_age_s,
                               std::int64_t max_count) override;
  expected<bool> commit() override { return impl_->commit(); }
  expected<bool> sync() override { return impl_->sync(); }
  void rollback() override { impl_->rollback(); }
  bool last_failure_transient() const noexcept override {
    return impl_->transient;
  }
  expected<std::vector<stored_task>> tasks() override;
  expected<std::optional<stored_task>> task(const std::string& id) override;
  expected<std::vector<stored_record>> records(std::int64_t seq) override;
  expected<std::int64_t> last_event(std::int64_t seq) override;
  expected<std::map<std::int64_t, unfinished_task>> unfinished() override;
  expected<std::vector<stored_event>> events(std::int64_t seq) override;
  expected<std::optional<std::string>> state(const std::string& key) override;
  expected<store_stats> stats() override;

private:
  std::unique_ptr<sqlite_impl> impl_;
};

} // namespace

expected<std::unique_ptr<journal_store>>
open_sqlite_store(const store_options& opts) {
  auto p = std::make_unique<sqlite_impl>();
  p->dir = opts.dir;
  p->path = opts.dir + "/journal.db";
  if (auto ok = detail::claim_state_dir(opts.dir, p->lock); !ok)
    return ok.error();
  if (auto ok = p->make_files_private(); !ok)
    return ok.error();
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(p->path.c_str(), &p->db, flags, nullptr) != SQLITE_OK) {
    std::string what = "cannot open the journal: ";
    what += p->db ? sqlite3_errmsg(p->db) : "out of memory";
    return p->fail(std::move(what));
  }
  sqlite3_extended_result_codes(p->db, 1);
  // The file must be a database before anything else: an unreadable or
  // foreign file stops the node here, never as an empty start.
  if (auto ok = p->exec("PRAGMA journal_mode = WAL", "opening the journal");
      !ok)
    return ok.error();
  if (auto ok = p->check_integrity(); !ok)
    return ok.error();
  // A commit only writes the log; `sync` puts it on disk when asked.
  p->mode = opts.sync;
  if (auto ok = p->exec("PRAGMA synchronous = NORMAL", "setting the sync mode");
      !ok)
    return ok.error();
  if (opts.max_pages > 0) {
    auto cap = "PRAGMA max_page_count = " + std::to_string(opts.max_pages);
    if (auto ok = p->exec(cap.c_str(), "capping the journal"); !ok)
      return ok.error();
  }
  if (auto ok = p->migrate(); !ok)
    return ok.error();
  if (auto ok = p->sync(); !ok)
    return ok.error();
  return std::unique_ptr<journal_store>{
    std::make_unique<sqlite_store>(std::move(p))};
}

expected<std::int64_t> sqlite_store::add_task(const std::string& id,
                                              const std::string& spec,
                                              double at) {
  auto ok =
    impl_->write("INSERT INTO tasks (id, spec, submitted_at) VALUES (?, ?, ?)",
                 "adding task '" + id + "'", text{id}, spec, at);
  if (!ok)
    return ok.error();
  return static_cast<std::int64_t>(sqlite3_last_insert_rowid(impl_->db));
}

expected<bool> sqlite_store::drop_task(const std::string& id) {
  auto t = task(id);
  if (!t)
    return t.error();
  if (!*t)
    return false;
  auto seq = (*t)->seq;
  for (auto* sql :
       {"DELETE FROM records WHERE task = ?",
        "DELETE FROM events WHERE task = ?", "DELETE FROM tasks WHERE seq = ?"})
    if (auto ok = impl_->write(sql, "removing task '" + id + "'", seq); !ok)
      return ok;
  return true;
}

expected<bool> sqlite_store::add_record(std::int64_t seq, std::int64_t n,
                                        const std::string& body) {
  return impl_->write("INSERT INTO records (task, n, body) VALUES (?, ?, ?)",
                      "recording a task's input", seq, n, body);
}

expected<bool> sqlite_store::add_event(std::int64_t seq, std::int64_t n,
                                       int kind, const std::string& json) {
  return impl_->write(
    "INSERT INTO events (task, n, kind, json) VALUES (?, ?, ?, ?)",
    "recording an event", seq, n, kind, text{json});
}

expected<bool> sqlite_store::end_task(std::int64_t seq, double at,
                                      const std::string& result) {
  return impl_->write(
    "UPDATE tasks SET finished_at = ?, result = ? WHERE seq = ?",
    "recording a task's end", at, result, seq);
}

expected<bool> sqlite_store::put_state(const std::string& key,
                                       const std::string& body) {
  return impl_->write("INSERT OR REPLACE INTO node_state (key, body) "
                      "VALUES (?, ?)",
                      "recording node state", text{key}, body);
}

expected<std::int64_t> sqlite_store::prune(double now, double max_age_s,
                                           std::int64_t max_count) {
  auto& p = *impl_;
  std::vector<std::int64_t> doomed;
  auto collect = [&](const std::string& sql, auto... xs) -> expected<bool> {
    auto s = p.prepare(sql);
    if (!s)
      return s.error();
    reset_guard guard{*s};
    int i = 0;
    (bind(*s, ++i, xs), ...);
    int rc;
    while ((rc = sqlite3_step(*s)) == SQLITE_ROW)
      doomed.push_back(sqlite3_column_int64(*s, 0));
    if (rc != SQLITE_DONE)
      return p.sql_fail("pruning finished tasks");
    return true;
  };
  if (max_age_s > 0)
    if (auto ok = collect("SELECT seq FROM tasks WHERE finished_at IS NOT NULL "
                          "AND finished_at < ?",
                          now - max_age_s);
        !ok)
      return ok.error();
  if (max_count > 0)
    if (auto ok = collect("SELECT seq FROM tasks WHERE finished_at IS NOT NULL "
                          "ORDER BY finished_at DESC, seq DESC "
                          "LIMIT -1 OFFSET ?",
                          max_count);
        !ok)
      return ok.error();
  std::int64_t removed = 0;
  for (auto seq : doomed) {
    for (auto* sql : {"DELETE FROM records WHERE task = ?",
                      "DELETE FROM events WHERE task = ?",
                      "DELETE FROM tasks WHERE seq = ?"})
      if (auto ok = p.write(sql, "pruning finished tasks", seq); !ok)
        return ok.error();
    removed += sqlite3_changes(p.db) > 0 ? 1 : 0;
  }
  return removed;
}

expected<std::int64_t> sqlite_store::last_event(std::int64_t seq) {
  auto& p = *impl_;
  auto s = p.prepare("SELECT coalesce(max(n), 0) FROM events WHERE task = ?");
  if (!s)
    return s.error();
  reset_guard guard{*s};
  bind(*s, 1, seq);
  if (sqlite3_step(*s) != SQLITE_ROW)
    return p.sql_fail("reading a task's events");
  return static_cast<std::int64_t>(sqlite3_column_int64(*s, 0));
}

namespace {

stored_task read_task(sqlite3_stmt* s) {
  stored_task t;
  t.seq = sqlite3_column_int64(s, 0);
  t.id = column_bytes(s, 1);
  t.spec = column_bytes(s, 2);
  t.submitted_at = sqlite3_column_double(s, 3);
  if (sqlite3_column_type(s, 4) != SQLITE_NULL)
    t.finished_at = sqlite3_column_double(s, 4);
  t.result = column_bytes(s, 5);
  return t;
}

constexpr const char* task_columns =
  "SELECT seq, id, spec, submitted_at, finished_at, result FROM tasks ";

} // namespace

expected<std::vector<stored_task>> sqlite_store::tasks() {
  auto& p = *impl_;
  auto s = p.prepare(std::string{task_columns} + "ORDER BY seq");
  if (!s)
    return s.error();
  reset_guard guard{*s};
  std::vector<stored_task> out;
  int rc;
  while ((rc = sqlite3_step(*s)) == SQLITE_ROW)
    out.push_back(read_task(*s));
  if (rc != SQLITE_DONE)
    return p.sql_fail("reading the tasks");
  return out;
}

expected<std::optional<stored_task>> sqlite_store::task(const std::string& id) {
  auto& p = *impl_;
  auto s = p.prepare(std::string{task_columns} + "WHERE id = ?");
  if (!s)
    return s.error();
  reset_guard guard{*s};
  bind(*s, 1, text{id});
  auto rc = sqlite3_step(*s);
  if (rc == SQLITE_ROW)
    return std::optional<stored_task>{read_task(*s)};
  if (rc != SQLITE_DONE)
    return p.sql_fail("reading task '" + id + "'");
  return std::optional<stored_task>{};
}

expected<std::vector<stored_record>> sqlite_store::records(std::int64_t seq) {
  auto& p = *impl_;
  auto s = p.prepare("SELECT n, body FROM records WHERE task = ? ORDER BY n");
  if (!s)
    return s.error();
  reset_guard guard{*s};
  bind(*s, 1, seq);
  std::vector<stored_record> out;
  int rc;
  while ((rc = sqlite3_step(*s)) == SQLITE_ROW)
    out.push_back({sqlite3_column_int64(*s, 0), column_bytes(*s, 1)});
  if (rc != SQLITE_DONE)
    return p.sql_fail("reading a task's records");
  return out;
}

expected<std::map<std::int64_t, unfinished_task>> sqlite_store::unfinished() {
  auto& p = *impl_;
  std::map<std::int64_t, unfinished_task> out;
  auto s = p.prepare("SELECT task, n, body FROM records WHERE task IN "
                     "(SELECT seq FROM tasks WHERE finished_at IS NULL) "
                     "ORDER BY task, n");
  if (!s)
    return s.error();
  {
    reset_guard guard{*s};
    int rc;
    while ((rc = sqlite3_step(*s)) == SQLITE_ROW)
      out[sqlite3_column_int64(*s, 0)].records.push_back(
        {sqlite3_column_int64(*s, 1), column_bytes(*s, 2)});
    if (rc != SQLITE_DONE)
      return p.sql_fail("reading the unfinished tasks' records");
  }
  auto e = p.prepare("SELECT task, max(n) FROM events WHERE task IN "
                     "(SELECT seq FROM tasks WHERE finished_at IS NULL) "
                     "GROUP BY task");
  if (!e)
    return e.error();
  reset_guard guard{*e};
  int rc;
  while ((rc = sqlite3_step(*e)) == SQLITE_ROW)
    out[sqlite3_column_int64(*e, 0)].last_event = sqlite3_column_int64(*e, 1);
  if (rc != SQLITE_DONE)
    return p.sql_fail("reading the unfinished tasks' events");
  return out;
}

expected<std::vector<stored_event>> sqlite_store::events(std::int64_t seq) {
  auto& p = *impl_;
  auto s =
    p.prepare("SELECT n, kind, json FROM events WHERE task = ? ORDER BY n");
  if (!s)
    return s.error();
  reset_guard guard{*s};
  bind(*s, 1, seq);
  std::vector<stored_event> out;
  int rc;
  while ((rc = sqlite3_step(*s)) == SQLITE_ROW)
    out.push_back({sqlite3_column_int64(*s, 0), sqlite3_column_int(*s, 1),
                   column_bytes(*s, 2)});
  if (rc != SQLITE_DONE)
    return p.sql_fail("reading a task's events");
  return out;
}

expected<std::optional<std::string>>
sqlite_store::state(const std::string& key) {
  auto& p = *impl_;
  auto s = p.prepare("SELECT body FROM node_state WHERE key = ?");
  if (!s)
    return s.error();
  reset_guard guard{*s};
  bind(*s, 1, text{key});
  auto rc = sqlite3_step(*s);
  if (rc == SQLITE_ROW)
    return std::optional<std::string>{column_bytes(*s, 0)};
  if (rc != SQLITE_DONE)
    return p.sql_fail("reading node state");
  return std::optional<std::string>{};
}

expected<store_stats> sqlite_store::stats() {
  auto& p = *impl_;
  store_stats out;
  out.commits = p.commits;
  out.syncs = p.syncs;
  struct q {
    const char* sql;
    std::int64_t* into;
  };
  for (auto [sql, into] :
       {q{"SELECT count(*) FROM tasks", &out.tasks},
        q{"SELECT count(*) FROM tasks WHERE finished_at IS NULL",
          &out.unfinished},
        q{"SELECT count(*) FROM records", &out.records},
        q{"SELECT count(*) FROM events", &out.events}}) {
    auto s = p.prepare(sql);
    if (!s)
      return s.error();
    reset_guard guard{*s};
    if (sqlite3_step(*s) != SQLITE_ROW)
      return p.sql_fail("counting");
    *into = sqlite3_column_int64(*s, 0);
  }
  std::error_code ec;
  for (auto* suffix : {"", "-wal"}) {
    auto n = std::filesystem::file_size(p.path + suffix, ec);
    if (!ec)
      out.bytes += static_cast<std::int64_t>(n);
  }
  return out;
}

wal_syncer::wal_syncer(std::string db_path)
  : wal_(db_path + "-wal"),
    dir_(std::filesystem::path{db_path}.parent_path().string()) {}

wal_syncer::~wal_syncer() {
  if (fd_ >= 0)
    ::close(fd_);
}

expected<bool> wal_syncer::sync() {
  auto fail = [&](const std::string& path, const char* doing) {
    return tasksup::error{path, "",
                          std::string{doing} + ": " + std::strerror(errno)};
  };
  if (fd_ < 0) {
    int fd = ::open(wal_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return fail(wal_, "cannot open the journal's log to sync it");
    // The log's name must reach the disk too, once.
    int dir = ::open(dir_.empty() ? "." : dir_.c_str(),
                     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0 || ::fsync(dir) != 0) {
      auto err = fail(dir_, "cannot sync the state directory");
      if (dir >= 0)
        ::close(dir);
      ::close(fd);
      return err;
    }
    ::close(dir);
    fd_ = fd;
  }
  if (::fdatasync(fd_) != 0)
    return fail(wal_, "syncing the journal to disk");
  return true;
}

} // namespace tasksup::journal

#include "backends.hpp"
#include "pg_conn.hpp"
#include "state_dir.hpp"

#include <string>
#include <vector>

namespace tasksup::journal {

namespace detail {

const std::string& journal_schema_sql() {
  // Bytes (specs, records, results, events' JSON) are bytea: the journal
  // keeps what the node wrote, whatever its encoding. Timestamps are the
  // node's wall clock in seconds, as in the SQLite journal. The lease's
  // expiry is on the database's clock, the one clock all coordinators share.
  static const std::string sql = R"sql(
BEGIN;
SELECT pg_advisory_xact_lock(7354846829417);
CREATE TABLE IF NOT EXISTS tasksup_meta (
  key text PRIMARY KEY,
  value text NOT NULL);
INSERT INTO tasksup_meta (key, value) VALUES ('schema_version', '5')
  ON CONFLICT (key) DO NOTHING;
CREATE TABLE IF NOT EXISTS tasksup_tasks (
  seq bigserial PRIMARY KEY,
  id text NOT NULL UNIQUE,
  spec bytea NOT NULL,
  submitted_at double precision NOT NULL,
  finished_at double precision,
  result bytea);
CREATE INDEX IF NOT EXISTS tasksup_tasks_finished
  ON tasksup_tasks (finished_at);
CREATE TABLE IF NOT EXISTS tasksup_records (
  task bigint NOT NULL,
  n bigint NOT NULL,
  body bytea NOT NULL,
  PRIMARY KEY (task, n));
CREATE TABLE IF NOT EXISTS tasksup_events (
  task bigint NOT NULL,
  n bigint NOT NULL,
  kind integer NOT NULL,
  json bytea NOT NULL,
  PRIMARY KEY (task, n));
CREATE TABLE IF NOT EXISTS tasksup_state (
  key text PRIMARY KEY,
  body bytea NOT NULL);
CREATE TABLE IF NOT EXISTS tasksup_lease (
  id integer PRIMARY KEY CHECK (id = 1),
  holder text NOT NULL,
  address text NOT NULL,
  epoch bigint NOT NULL,
  expires_at timestamptz NOT NULL);
INSERT INTO tasksup_lease VALUES (1, '', '', 0, '-infinity')
  ON CONFLICT (id) DO NOTHING;
CREATE OR REPLACE FUNCTION tasksup_fence(e bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  cur bigint;
  who text;
BEGIN
  SELECT epoch, holder INTO cur, who FROM tasksup_lease WHERE id = 1
    FOR SHARE;
  IF cur IS DISTINCT FROM e THEN
    RAISE EXCEPTION 'this coordinator led at epoch %, and % leads now at epoch %',
      e, who, cur USING ERRCODE = 'TS001';
  END IF;
END
$fn$;
COMMIT;
)sql";
  return sql;
}

} // namespace detail

namespace {

using detail::pg_bytes;
using detail::pg_float8;
using detail::pg_int4;
using detail::pg_int8;
using detail::pg_rows;

/// Sends at most this many statements before reading their results (so
/// neither side's socket buffer fills while the other waits).
constexpr std::size_t max_in_flight = 1000;

std::vector<detail::pg_statement> statements() {
  using namespace detail;
  return {
    {"fence", "SELECT tasksup_fence($1)", {oid_int8}},
    {"add_task",
     "INSERT INTO tasksup_tasks (id, spec, submitted_at) VALUES ($1, $2, $3) "
     "ON CONFLICT (id) DO NOTHING RETURNING seq",
     {oid_text, oid_bytea, oid_float8}},
    {"drop_records",
     "DELETE FROM tasksup_records WHERE task = "
     "(SELECT seq FROM tasksup_tasks WHERE id = $1)",
     {oid_text}},
    {"drop_events",
     "DELETE FROM tasksup_events WHERE task = "
     "(SELECT seq FROM tasksup_tasks WHERE id = $1)",
     {oid_text}},
    {"drop_task", "DELETE FROM tasksup_tasks WHERE id = $1", {oid_text}},
    // A record or event that exists already is one the journal has: kept
    // as it is (the SQLite journal refuses it alone, to the same effect).
    {"add_record",
     "INSERT INTO tasksup_records (task, n, body) VALUES ($1, $2, $3) "
     "ON CONFLICT DO NOTHING",
     {oid_int8, oid_int8, oid_bytea}},
    {"add_event",
     "INSERT INTO tasksup_events (task, n, kind, json) "
     "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
     {oid_int8, oid_int8, oid_int4, oid_bytea}},
    {"end_task",
     "UPDATE tasksup_tasks SET finished_at = $1, result = $2 WHERE seq = $3",
     {oid_float8, oid_bytea, oid_int8}},
    {"put_state",
     "INSERT INTO tasksup_state (key, body) VALUES ($1, $2) "
     "ON CONFLICT (key) DO UPDATE SET body = excluded.body",
     {oid_text, oid_bytea}},
    {"prune",
     "WITH doomed AS ("
     "  SELECT seq FROM tasksup_tasks WHERE finished_at IS NOT NULL AND ("
     "    ($1 AND finished_at < $2) OR"
     "    ($3 AND seq IN (SELECT seq FROM tasksup_tasks"
     "                    WHERE finished_at IS NOT NULL"
     "                    ORDER BY finished_at DESC, seq DESC OFFSET $4)))),"
     " r AS (DELETE FROM tasksup_records"
     "       WHERE task IN (SELECT seq FROM doomed)),"
     " e AS (DELETE FROM tasksup_events"
     "       WHERE task IN (SELECT seq FROM doomed))"
     "DELETE FROM tasksup_tasks WHERE seq IN (SELECT seq FROM doomed)",
     {oid_bool, oid_float8, oid_bool, oid_int8}},
    {"tasks",
     "SELECT seq, id, spec, submitted_at, finished_at, result "
     "FROM tasksup_tasks ORDER BY seq",
     {}},
    {"task",
     "SELECT seq, id, spec, submitted_at, finished_at, result "
     "FROM tasksup_tasks WHERE id = $1",
     {oid_text}},
    {"records",
     "SELECT n, body FROM tasksup_records WHERE task = $1 ORDER BY n",
     {oid_int8}},
    {"last_event",
     "SELECT coalesce(max(n), 0)::bigint FROM tasksup_events WHERE task = $1",
     {oid_int8}},
    {"events",
     "SELECT n, kind, json FROM tasksup_events WHERE task = $1 ORDER BY n",
     {oid_int8}},
    {"state", "SELECT body FROM tasksup_state WHERE key = $1", {oid_text}},
    {"unfinished_records",
     "SELECT task, n, body FROM tasksup_records WHERE task IN "
     "(SELECT seq FROM tasksup_tasks WHERE finished_at IS NULL) "
     "ORDER BY task, n",
     {}},
    {"unfinished_events",
     "SELECT task, max(n) FROM tasksup_events WHERE task IN "
     "(SELECT seq FROM tasksup_tasks WHERE finished_at IS NULL) "
     "GROUP BY task",
     {}},
    {"version",
     "SELECT value FROM tasksup_meta WHERE key = 'schema_version'",
     {}},
    {"counts",
     "SELECT (SELECT count(*) FROM tasksup_tasks),"
     " (SELECT count(*) FROM tasksup_tasks WHERE finished_at IS NULL),"
     " (SELECT count(*) FROM tasksup_records),"
     " (SELECT count(*) FROM tasksup_events),"
     " (pg_total_relation_size('tasksup_tasks') +"
     "  pg_total_relation_size('tasksup_records') +"
     "  pg_total_relation_size('tasksup_events') +"
     "  pg_total_relation_size('tasksup_state'))::bigint",
     {}},
  };
}

stored_task read_task(const pg_rows& r, int i) {
  stored_task t;
  t.seq = r.int8(i, 0);
  t.id = r.bytes(i, 1);
  t.spec = r.bytes(i, 2);
  t.submitted_at = r.float8(i, 3);
  if (!r.null(i, 4))
    t.finished_at = r.float8(i, 4);
  if (!r.null(i, 5))
    t.result = r.bytes(i, 5);
  return t;
}

/// The PostgreSQL journal. Writes are pipelined: they travel to the server
/// as they come and their results are read in one round trip at commit.
class postgres_store final : public journal_store {
public:
  postgres_store(std::unique_ptr<detail::pg_connection> c,
                 std::unique_ptr<detail::state_dir_lock> lock)
    : db_(std::move(c)), lock_(std::move(lock)) {}

  ~postgres_store() override { rollback(); }

  const std::string& path() const noexcept override { return db_->shown(); }
  // A commit is durable once the server answers (its own WAL and
  // synchronous_commit): there is nothing to sync.
  sync_mode mode() const noexcept override { return sync_mode::normal; }
  std::unique_ptr<wal_syncer> background_syncer() const override {
    return nullptr;
  }
  void fence(std::int64_t epoch) override { epoch_ = epoch; }
  bool deposed() const noexcept override { return deposed_; }

  expected<std::int64_t> add_task(const std::string& id,
                                  const std::string& spec, double at) override {
    if (auto ok = begin(); !ok)
      return ok.error();
    auto doing = "adding task '" + id + "'";
    auto r = db_->run("add_task", {pg_bytes(id), pg_bytes(spec), pg_float8(at)},
                      doing);
    if (!r)
      return failed(r.error());
    if (r->size() != 1) {
      transient_ = false;
      return tasksup::error{path(), "", doing + ": a task with this id exists"};
    }
    return r->int8(0, 0);
  }

  expected<bool> drop_task(const std::string& id) override {
    if (auto ok = begin(); !ok)
      return ok;
    for (auto* name : {"drop_records", "drop_events", "drop_task"})
      db_->send(name, {pg_bytes(id)});
    return drain("removing task '" + id + "'");
  }

  expected<bool> add_record(std::int64_t seq, std::int64_t n,
                            const std::string& body) override {
    return write("add_record", {pg_int8(seq), pg_int8(n), pg_bytes(body)},
                 "recording a task's input");
  }

  expected<bool> add_event(std::int64_t seq, std::int64_t n, int kind,
                           const std::string& json) override {
    return write("add_event",
                 {pg_int8(seq), pg_int8(n), pg_int4(kind), pg_bytes(json)},
                 "recording an event");
  }

  expected<bool> end_task(std::int64_t seq, double at,
                          const std::string& result) override {
    return write("end_task", {pg_float8(at), pg_bytes(result), pg_int8(seq)},
                 "recording a task's end");
  }

  expected<bool> put_state(const std::string& key,
                           const std::string& body) override {
    return write("put_state", {pg_bytes(key), pg_bytes(body)},
                 "recording node state");
  }

  expected<std::int64_t> prune(double now, double max_age_s,
                               std::int64_t max_count) override {
    if (auto ok = begin(); !ok)
      return ok.error();
    auto r =
      db_->run("prune",
               {detail::pg_bool(max_age_s > 0), pg_float8(now - max_age_s),
                detail::pg_bool(max_count > 0), pg_int8(max_count)},
               "pruning finished tasks");
    if (!r)
      return failed(r.error());
    return r->affected();
  }

  expected<bool> commit() override {
    if (!in_tx_)
      return true;
    // A statement of this transaction failed: the server rolled all of it
    // back (a COMMIT now would say ROLLBACK), so nothing of it commits.
    if (tx_failed_) {
      auto why = *tx_failed_;
      rollback();
      return why;
    }
    db_->send_text("COMMIT");
    auto ok = db_->sync("committing to the journal");
    in_tx_ = false;
    if (!ok) {
      auto err = failed(ok.error());
      // An aborted transaction stays open until rolled back.
      end_transaction();
      return err;
    }
    if (ok->empty() || ok->back().command() != "COMMIT") {
      transient_ = true;
      return tasksup::error{path(), "",
                            "committing to the journal: the server rolled "
                            "the transaction back"};
    }
    ++commits_;
    return true;
  }

  expected<bool> sync() override { return false; }

  void rollback() override {
    tx_failed_.reset();
    if (!in_tx_)
      return;
    in_tx_ = false;
    end_transaction();
  }

  bool last_failure_transient() const noexcept override { return transient_; }

  expected<std::vector<stored_task>> tasks() override {
    auto r = read("tasks", {}, "reading the tasks");
    if (!r)
      return r.error();
    std::vector<stored_task> out;
    out.reserve(static_cast<std::size_t>(r->size()));
    for (int i = 0; i < r->size(); ++i)
      out.push_back(read_task(*r, i));
    return out;
  }

  expected<std::optional<stored_task>> task(const std::string& id) override {
    auto r = read("task", {pg_bytes(id)}, "reading task '" + id + "'");
    if (!r)
      return r.error();
    if (r->size() == 0)
      return std::optional<stored_task>{};
    return std::optional<stored_task>{read_task(*r, 0)};
  }

  expected<std::vector<stored_record>> records(std::int64_t seq) override {
    auto r = read("records", {pg_int8(seq)}, "reading a task's records");
    if (!r)
      return r.error();
    std::vector<stored_record> out;
    out.reserve(static_cast<std::size_t>(r->size()));
    for (int i = 0; i < r->size(); ++i)
      out.push_back({r->int8(i, 0), r->bytes(i, 1)});
    return out;
  }

  expected<std::int64_t> last_event(std::int64_t seq) override {
    auto r = read("last_event", {pg_int8(seq)}, "reading a task's events");
    if (!r)
      return r.error();
    return r->size() == 1 ? r->int8(0, 0) : 0;
  }

  expected<std::vector<stored_event>> events(std::int64_t seq) override {
    auto r = read("events", {pg_int8(seq)}, "reading a task's events");
    if (!r)
      return r.error();
    std::vector<stored_event> out;
    out.reserve(static_cast<std::size_t>(r->size()));
    for (int i = 0; i < r->size(); ++i)
      out.push_back({r->int8(i, 0), r->int4(i, 1), r->bytes(i, 2)});
    return out;
  }

  expected<std::map<std::int64_t, unfinished_task>> unfinished() override {
    std::map<std::int64_t, unfinished_task> out;
    // Both reads in one round trip.
    db_->send("unfinished_records", {});
    db_->send("unfinished_events", {});
    auto r = db_->sync("reading the unfinished tasks");
    if (!r)
      return failed(r.error());
    if (r->size() != 2)
      return tasksup::error{path(), "",
                            "reading the unfinished tasks: no "
                            "answer"};
    auto& records = (*r)[0];
    for (int i = 0; i < records.size(); ++i)
      out[records.int8(i, 0)].records.push_back(
        {records.int8(i, 1), records.bytes(i, 2)});
    auto& events = (*r)[1];
    for (int i = 0; i < events.size(); ++i)
      out[events.int8(i, 0)].last_event = events.int8(i, 1);
    return out;
  }

  expected<std::optional<std::string>> state(const std::string& key) override {
    auto r = read("state", {pg_bytes(key)}, "reading node state");
    if (!r)
      return r.error();
    if (r->size() == 0)
      return std::optional<std::string>{};
    return std::optional<std::string>{r->bytes(0, 0)};
  }

  expected<store_stats> stats() override {
    auto r = read("counts", {}, "counting");
    if (!r)
      return r.error();
    store_stats out;
    if (r->size() == 1) {
      out.tasks = r->int8(0, 0);
      out.unfinished = r->int8(0, 1);
      out.records = r->int8(0, 2);
      out.events = r->int8(0, 3);
      out.bytes = r->int8(0, 4);
    }
    out.commits = commits_;
    return out;
  }

  /// The schema version the database holds.
  expected<int> version() {
    auto r = read("version", {}, "reading the schema version");
    if (!r)
      return r.error();
    if (r->size() != 1)
      return tasksup::error{path(), "", "the journal has no schema version"};
    try {
      return std::stoi(r->bytes(0, 0));
    } catch (const std::exception&) {
      return tasksup::error{path(), "",
                            "the journal's schema version '" + r->bytes(0, 0) +
                              "' is not a number"};
    }
  }

private:
  /// Opens the write transaction unless one is open; a fenced journal's
  /// transaction first checks (and holds, until it ends) the leadership.
  expected<bool> begin() {
    if (deposed_)
      return tasksup::error{path(), "",
                            "this coordinator is no longer the leader: "
                            "another one took the journal over"};
    if (in_tx_)
      return true;
    db_->send_text("BEGIN");
    if (epoch_)
      db_->send("fence", {pg_int8(*epoch_)});
    in_tx_ = true;
    return true;
  }

  expected<bool> write(const char* name, std::vector<detail::pg_param> params,
                       std::string_view doing) {
    if (auto ok = begin(); !ok)
      return ok;
    db_->send(name, params);
    if (db_->queued() >= max_in_flight)
      return drain(doing);
    return true;
  }

  /// Reads the results of what was sent so far.
  expected<bool> drain(std::string_view doing) {
    if (auto ok = db_->sync(doing); !ok)
      return failed(ok.error());
    return true;
  }

  /// A read: inside the open transaction (it sees its writes) or alone.
  expected<pg_rows> read(const char* name, std::vector<detail::pg_param> params,
                         std::string_view doing) {
    auto r = db_->run(name, params, doing);
    if (!r)
      return failed(r.error());
    return r;
  }

  tasksup::error failed(tasksup::error err) {
    auto& why = db_->last_failure();
    transient_ = why.transient;
    if (why.deposed)
      deposed_ = true;
    if (in_tx_ && !tx_failed_)
      tx_failed_ = err;
    return err;
  }

  void end_transaction() {
    db_->send_text("ROLLBACK");
    (void)db_->sync("rolling back");
  }

  std::unique_ptr<detail::pg_connection> db_;
  std::unique_ptr<detail::state_dir_lock> lock_;
  std::optional<std::int64_t> epoch_;
  bool in_tx_ = false;
  /// Why a statement of the open transaction failed (it is rolled back).
  std::optional<tasksup::error> tx_failed_;
  bool transient_ = false;
  bool deposed_ = false;
  std::int64_t commits_ = 0;
};

} // namespace

expected<std::unique_ptr<journal_store>>
open_postgres_store(const store_options& opts) {
  auto lock = std::make_unique<detail::state_dir_lock>();
  if (auto ok = detail::claim_state_dir(opts.dir, *lock); !ok)
    return ok.error();
  auto shown = redact_url(opts.url);
  auto c = detail::pg_connection::connect(
    opts.url, shown, detail::journal_schema_sql(), statements());
  if (!c)
    return c.error();
  auto store = std::make_unique<postgres_store>(std::move(*c), std::move(lock));
  auto v = store->version();
  if (!v)
    return v.error();
  if (*v > schema_version)
    return tasksup::error{shown, "",
                          "the journal's schema version " + std::to_string(*v) +
                            " is newer than this tasksup's (" +
                            std::to_string(schema_version) +
                            "); use a newer tasksup"};
  if (*v < oldest_readable_version)
    return tasksup::error{shown, "",
                          "the journal's schema version " + std::to_string(*v) +
                            " is older than this tasksup reads (" +
                            std::to_string(oldest_readable_version) + ")"};
  return std::unique_ptr<journal_store>{std::move(store)};
}

} // namespace tasksup::journal

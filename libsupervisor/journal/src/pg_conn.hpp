#pragma once

// A libpq connection in pipeline mode, as both PostgreSQL pieces of the
// journal use it (the store, the leader lease): statements prepared once,
// parameters and results in binary, many statements sent before one round
// trip reads all their results. Every failure says whether retrying later
// may pass (a lost connection, a full disk, a conflict) and whether it was
// the leadership fence.

#include "tasksup/supervisor/expected.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::journal::detail {

/// A parameter, already in PostgreSQL's binary form.
struct pg_param {
  std::string bytes;
  bool null = false;
};

pg_param pg_int8(std::int64_t x);
pg_param pg_int4(std::int32_t x);
pg_param pg_float8(double x);
pg_param pg_bool(bool x);
/// bytea and text both travel as their bytes.
pg_param pg_bytes(std::string_view x);

/// The SQLSTATE the fence raises (the leadership moved on).
inline constexpr std::string_view deposed_sqlstate = "TS001";

/// One statement's result rows (binary).
class pg_rows {
public:
  pg_rows() = default;
  explicit pg_rows(void* result);
  pg_rows(pg_rows&&) noexcept;
  pg_rows& operator=(pg_rows&&) noexcept;
  ~pg_rows();

  int size() const noexcept;
  bool null(int row, int col) const noexcept;
  std::int64_t int8(int row, int col) const noexcept;
  std::int32_t int4(int row, int col) const noexcept;
  double float8(int row, int col) const noexcept;
  bool boolean(int row, int col) const noexcept;
  std::string bytes(int row, int col) const;
  /// Rows a command touched (DELETE, UPDATE, INSERT).
  std::int64_t affected() const noexcept;
  /// The command's tag ("COMMIT", "ROLLBACK", "INSERT 0 1", ...).
  std::string command() const;

private:
  void* r_ = nullptr;
};

/// Why the last round trip failed.
struct pg_failure {
  std::string sqlstate;
  std::string message;
  bool transient = false;
  bool deposed = false;
};

/// A statement to prepare: its name, SQL and parameter types (OIDs).
struct pg_statement {
  std::string name;
  std::string sql;
  std::vector<unsigned> types;
};

/// Type OIDs of the parameters we send.
inline constexpr unsigned oid_bool = 16;
inline constexpr unsigned oid_bytea = 17;
inline constexpr unsigned oid_int8 = 20;
inline constexpr unsigned oid_int4 = 23;
inline constexpr unsigned oid_text = 25;
inline constexpr unsigned oid_float8 = 701;

class pg_connection {
public:
  /// Connects to `url` (errors name `shown`, the URL without password),
  /// runs `setup` (SQL text, idempotent: the schema) and prepares
  /// `statements`; again after every reconnect.
  static expected<std::unique_ptr<pg_connection>>
  connect(const std::string& url, std::string shown, std::string setup,
          std::vector<pg_statement> statements);

  ~pg_connection();
  pg_connection(const pg_connection&) = delete;
  pg_connection& operator=(const pg_connection&) = delete;

  /// Queues prepared statement `name`; its result comes with `sync`. A
  /// failure to send shows in the next `sync`.
  void send(const std::string& name, const std::vector<pg_param>& params);

  /// Queues SQL text without parameters (BEGIN, COMMIT, ROLLBACK).
  void send_text(const char* sql);

  /// Statements queued since the last `sync`.
  std::size_t queued() const noexcept { return queued_; }

  /// One round trip: the result of every statement queued since the last
  /// sync, in order. On failure the error says what `doing` failed and
  /// `last_failure` says how.
  expected<std::vector<pg_rows>> sync(std::string_view doing);

  /// Queues one statement and syncs: its rows.
  expected<pg_rows> run(const std::string& name,
                        const std::vector<pg_param>& params,
                        std::string_view doing);

  const pg_failure& last_failure() const noexcept { return failure_; }

  /// Whether the connection is down (the next `sync` reconnects first).
  bool broken() const noexcept;

  /// The name errors use.
  const std::string& shown() const noexcept { return shown_; }

private:
  pg_connection(std::string url, std::string shown, std::string setup,
                std::vector<pg_statement> statements);
  bool can_send();
  expected<bool> open();
  tasksup::error fail(std::string_view doing, pg_failure why);

  std::string url_;
  std::string shown_;
  std::string setup_;
  std::vector<pg_statement> statements_;
  void* conn_ = nullptr;
  std::size_t queued_ = 0;
  bool send_failed_ = false;
  std::string send_error_;
  pg_failure failure_;
};

} // namespace tasksup::journal::detail

namespace tasksup::journal::detail {

/// The PostgreSQL journal's tables, the leader lease and its fence, created
/// when missing (idempotent; concurrent coordinators take turns on an
/// advisory lock). Defined in postgres_store.cpp.
const std::string& journal_schema_sql();

} // namespace tasksup::journal::detail

#include "pg_conn.hpp"

#include <libpq-fe.h>

#include <arpa/inet.h>
#include <endian.h>

#include <cstring>

namespace tasksup::journal::detail {

namespace {

PGconn* pg(void* c) {
  return static_cast<PGconn*>(c);
}

PGresult* res(void* r) {
  return static_cast<PGresult*>(r);
}

const char* cell(void* r, int row, int col) {
  return PQgetvalue(res(r), row, col);
}

/// Whether a failure with this SQLSTATE may pass when tried again: the
/// connection (08), a conflict between transactions (40), resources such as
/// a full disk (53), an operator's intervention or a restart (57), a lock
/// not available (55P03). No SQLSTATE means libpq lost the server.
bool transient_state(std::string_view state) {
  if (state.empty())
    return true;
  auto cls = state.substr(0, 2);
  return cls == "08" || cls == "40" || cls == "53" || cls == "57" ||
         state == "55P03";
}

pg_failure failure_of(PGresult* r, PGconn* c) {
  pg_failure f;
  if (r) {
    if (auto* s = PQresultErrorField(r, PG_DIAG_SQLSTATE))
      f.sqlstate = s;
    if (auto* m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY))
      f.message = m;
  }
  if (f.message.empty()) {
    f.message = PQerrorMessage(c);
    while (!f.message.empty() &&
           (f.message.back() == '\n' || f.message.back() == ' '))
      f.message.pop_back();
  }
  if (f.message.empty())
    f.message = "the server closed the connection";
  f.deposed = f.sqlstate == deposed_sqlstate;
  f.transient = !f.deposed && transient_state(f.sqlstate);
  if (f.sqlstate == "53100")
    f.message = "the database's disk is full (" + f.message + ")";
  return f;
}

} // namespace

pg_param pg_int8(std::int64_t x) {
  auto n = htobe64(static_cast<std::uint64_t>(x));
  return {std::string(reinterpret_cast<const char*>(&n), sizeof n)};
}

pg_param pg_int4(std::int32_t x) {
  auto n = htonl(static_cast<std::uint32_t>(x));
  return {std::string(reinterpret_cast<const char*>(&n), sizeof n)};
}

pg_param pg_float8(double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return pg_int8(static_cast<std::int64_t>(bits));
}

pg_param pg_bool(bool x) {
  return {std::string(1, x ? '\1' : '\0')};
}

pg_param pg_bytes(std::string_view x) {
  return {std::string{x}};
}

// -- pg_rows ------------------------------------------------------------------

pg_rows::pg_rows(void* result) : r_(result) {}

pg_rows::pg_rows(pg_rows&& other) noexcept : r_(other.r_) {
  other.r_ = nullptr;
}

pg_rows& pg_rows::operator=(pg_rows&& other) noexcept {
  std::swap(r_, other.r_);
  return *this;
}

pg_rows::~pg_rows() {
  if (r_)
    PQclear(res(r_));
}

int pg_rows::size() const noexcept {
  return r_ ? PQntuples(res(r_)) : 0;
}

bool pg_rows::null(int row, int col) const noexcept {
  return PQgetisnull(res(r_), row, col) != 0;
}

std::int64_t pg_rows::int8(int row, int col) const noexcept {
  if (PQgetlength(res(r_), row, col) != 8)
    return 0;
  std::uint64_t n;
  std::memcpy(&n, cell(r_, row, col), sizeof n);
  return static_cast<std::int64_t>(be64toh(n));
}

std::int32_t pg_rows::int4(int row, int col) const noexcept {
  if (PQgetlength(res(r_), row, col) != 4)
    return 0;
  std::uint32_t n;
  std::memcpy(&n, cell(r_, row, col), sizeof n);
  return static_cast<std::int32_t>(ntohl(n));
}

double pg_rows::float8(int row, int col) const noexcept {
  auto bits = static_cast<std::uint64_t>(int8(row, col));
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

bool pg_rows::boolean(int row, int col) const noexcept {
  return PQgetlength(res(r_), row, col) == 1 && *cell(r_, row, col) != 0;
}

std::string pg_rows::bytes(int row, int col) const {
  auto n = PQgetlength(res(r_), row, col);
  return std::string(cell(r_, row, col), static_cast<std::size_t>(n));
}

std::int64_t pg_rows::affected() const noexcept {
  if (!r_)
    return 0;
  auto* text = PQcmdTuples(res(r_));
  return text && *text ? std::strtoll(text, nullptr, 10) : 0;
}

std::string pg_rows::command() const {
  if (!r_)
    return {};
  auto* tag = PQcmdStatus(res(r_));
  return tag ? tag : "";
}

// -- pg_connection ------------------------------------------------------------

pg_connection::pg_connection(std::string url, std::string shown,
                             std::string setup,
                             std::vector<pg_statement> statements)
  : url_(std::move(url)), shown_(std::move(shown)), setup_(std::move(setup)),
    statements_(std::move(statements)) {}

pg_connection::~pg_connection() {
  if (conn_)
    PQfinish(pg(conn_));
}

expected<std::unique_ptr<pg_connection>>
pg_connection::connect(const std::string& url, std::string shown,
                       std::string setup,
                       std::vector<pg_statement> statements) {
  std::unique_ptr<pg_connection> c{new pg_connection(
    url, std::move(shown), std::move(setup), std::move(statements))};
  if (auto ok = c->open(); !ok)
    return ok.error();
  return c;
}

tasksup::error pg_connection::fail(std::string_view doing, pg_failure why) {
  failure_ = std::move(why);
  std::string what{doing};
  what += ": ";
  what += failure_.message;
  return tasksup::error{shown_, "", std::move(what)};
}

bool pg_connection::broken() const noexcept {
  return !conn_ || PQstatus(pg(conn_)) != CONNECTION_OK;
}

expected<bool> pg_connection::open() {
  if (conn_) {
    PQfinish(pg(conn_));
    conn_ = nullptr;
  }
  queued_ = 0;
  send_failed_ = false;
  // The URL's own settings win over these defaults (they come first).
  const char* keys[] = {"connect_timeout", "application_name", "dbname",
                        nullptr};
  const char* values[] = {"5", "tasksup", url_.c_str(), nullptr};
  conn_ = PQconnectdbParams(keys, values, 1);
  if (!conn_)
    return fail("connecting", {"", "out of memory", true, false});
  if (PQstatus(pg(conn_)) != CONNECTION_OK)
    return fail("connecting", failure_of(nullptr, pg(conn_)));
  // The server's notices ("relation ... already exists, skipping") are not
  // for the node's log.
  PQsetNoticeProcessor(
    pg(conn_), [](void*, const char*) {}, nullptr);
  if (!setup_.empty()) {
    auto* r = PQexec(pg(conn_), setup_.c_str());
    pg_rows guard{r};
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK)
      return fail("creating the journal's tables", failure_of(r, pg(conn_)));
  }
  for (auto& s : statements_) {
    auto* r = PQprepare(pg(conn_), s.name.c_str(), s.sql.c_str(),
                        static_cast<int>(s.types.size()),
                        reinterpret_cast<const Oid*>(s.types.data()));
    pg_rows guard{r};
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK)
      return fail("preparing statement " + s.name, failure_of(r, pg(conn_)));
  }
  if (PQenterPipelineMode(pg(conn_)) != 1)
    return fail("entering pipeline mode", failure_of(nullptr, pg(conn_)));
  return true;
}

bool pg_connection::can_send() {
  if (send_failed_)
    return false;
  if (broken() && queued_ == 0) {
    if (auto ok = open(); !ok) {
      send_failed_ = true;
      send_error_ = failure_.message;
      return false;
    }
  }
  return true;
}

void pg_connection::send_text(const char* sql) {
  if (!can_send())
    return;
  if (PQsendQueryParams(pg(conn_), sql, 0, nullptr, nullptr, nullptr, nullptr,
                        1) != 1) {
    send_failed_ = true;
    send_error_ = PQerrorMessage(pg(conn_));
    return;
  }
  ++queued_;
}

void pg_connection::send(const std::string& name,
                         const std::vector<pg_param>& params) {
  if (!can_send())
    return;
  std::vector<const char*> values(params.size());
  std::vector<int> lengths(params.size());
  std::vector<int> formats(params.size(), 1);
  for (std::size_t i = 0; i < params.size(); ++i) {
    values[i] = params[i].null ? nullptr : params[i].bytes.data();
    lengths[i] = static_cast<int>(params[i].bytes.size());
  }
  if (PQsendQueryPrepared(pg(conn_), name.c_str(),
                          static_cast<int>(params.size()), values.data(),
                          lengths.data(), formats.data(), 1) != 1) {
    send_failed_ = true;
    send_error_ = PQerrorMessage(pg(conn_));
    return;
  }
  ++queued_;
}

expected<std::vector<pg_rows>> pg_connection::sync(std::string_view doing) {
  std::vector<pg_rows> out;
  auto sent = queued_;
  queued_ = 0;
  if (send_failed_) {
    send_failed_ = false;
    // What was sent before may be half done: a fresh connection rolls it
    // back (the transaction dies with the old one).
    pg_failure why{"", send_error_, true, false};
    open();
    return fail(doing, std::move(why));
  }
  if (sent == 0)
    return out;
  auto* c = pg(conn_);
  if (PQpipelineSync(c) != 1) {
    auto why = failure_of(nullptr, c);
    open();
    return fail(doing, std::move(why));
  }
  std::optional<pg_failure> first;
  out.reserve(sent);
  for (std::size_t i = 0; i < sent; ++i) {
    auto* r = PQgetResult(c);
    if (!r) {
      auto why = failure_of(nullptr, c);
      open();
      return fail(doing, std::move(why));
    }
    auto status = PQresultStatus(r);
    if (!first && status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
      first = failure_of(status == PGRES_PIPELINE_ABORTED ? nullptr : r, c);
    out.emplace_back(r);
    // Each statement's results end with a null.
    while (auto* more = PQgetResult(c))
      PQclear(more);
  }
  auto* s = PQgetResult(c);
  if (!s || PQresultStatus(s) != PGRES_PIPELINE_SYNC) {
    if (s)
      PQclear(s);
    auto why = failure_of(nullptr, c);
    open();
    return fail(doing, std::move(why));
  }
  PQclear(s);
  if (first)
    return fail(doing, std::move(*first));
  return out;
}

expected<pg_rows> pg_connection::run(const std::string& name,
                                     const std::vector<pg_param>& params,
                                     std::string_view doing) {
  send(name, params);
  auto all = sync(doing);
  if (!all)
    return all.error();
  if (all->empty())
    return pg_rows{};
  return std::move(all->back());
}

} // namespace tasksup::journal::detail

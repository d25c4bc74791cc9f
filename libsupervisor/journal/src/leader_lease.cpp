#include "tasksup/journal/leader_lease.hpp"

#include "tasksup/journal/journal_store.hpp"

#include "pg_conn.hpp"

namespace tasksup::journal {

using detail::pg_bytes;
using detail::pg_float8;
using detail::pg_int8;

namespace {

std::vector<detail::pg_statement> lease_statements() {
  using namespace detail;
  return {
    // Free (never taken, released) or expired: ours, one epoch on.
    {"acquire",
     "UPDATE tasksup_lease SET holder = $1, address = $2, epoch = epoch + 1,"
     " expires_at = now() + make_interval(secs => $3)"
     " WHERE id = 1 AND expires_at < now() RETURNING epoch",
     {oid_text, oid_text, oid_float8}},
    {"renew",
     "UPDATE tasksup_lease SET expires_at = now() + make_interval(secs => $3)"
     " WHERE id = 1 AND epoch = $1 AND holder = $2",
     {oid_int8, oid_text, oid_float8}},
    {"release",
     "UPDATE tasksup_lease SET expires_at = '-infinity'"
     " WHERE id = 1 AND epoch = $1 AND holder = $2",
     {oid_int8, oid_text}},
    {"leader",
     "SELECT holder, address, epoch,"
     " CASE WHEN expires_at = '-infinity' THEN NULL"
     " ELSE extract(epoch FROM expires_at - now())::double precision END"
     " FROM tasksup_lease WHERE id = 1",
     {}},
  };
}

} // namespace

leader_lease::leader_lease(std::unique_ptr<detail::pg_connection> db,
                           std::string holder, std::string address,
                           double lease_s)
  : db_(std::move(db)), holder_(std::move(holder)),
    address_(std::move(address)), lease_s_(lease_s) {}

leader_lease::~leader_lease() = default;

expected<std::unique_ptr<leader_lease>>
leader_lease::open(const std::string& url, std::string holder,
                   std::string address, double lease_s) {
  auto db = detail::pg_connection::connect(
    url, redact_url(url), detail::journal_schema_sql(), lease_statements());
  if (!db)
    return db.error();
  return std::unique_ptr<leader_lease>{new leader_lease(
    std::move(*db), std::move(holder), std::move(address), lease_s)};
}

expected<std::optional<std::int64_t>> leader_lease::acquire() {
  auto r = db_->run(
    "acquire", {pg_bytes(holder_), pg_bytes(address_), pg_float8(lease_s_)},
    "taking the leader lease");
  if (!r)
    return r.error();
  if (r->size() != 1)
    return std::optional<std::int64_t>{};
  return std::optional<std::int64_t>{r->int8(0, 0)};
}

expected<bool> leader_lease::renew(std::int64_t epoch) {
  auto r =
    db_->run("renew", {pg_int8(epoch), pg_bytes(holder_), pg_float8(lease_s_)},
             "renewing the leader lease");
  if (!r)
    return r.error();
  return r->affected() == 1;
}

expected<bool> leader_lease::release(std::int64_t epoch) {
  auto r = db_->run("release", {pg_int8(epoch), pg_bytes(holder_)},
                    "releasing the leader lease");
  if (!r)
    return r.error();
  return r->affected() == 1;
}

expected<lease_state> leader_lease::leader() {
  auto r = db_->run("leader", {}, "reading who leads");
  if (!r)
    return r.error();
  lease_state out;
  if (r->size() == 1) {
    out.holder = r->bytes(0, 0);
    out.address = r->bytes(0, 1);
    out.epoch = r->int8(0, 2);
    out.expires_in_s = r->null(0, 3) ? -1e9 : r->float8(0, 3);
  }
  return out;
}

} // namespace tasksup::journal

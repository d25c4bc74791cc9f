// What only the PostgreSQL journal does: share a database between
// coordinators, fence commits with the leader lease's epoch, survive a lost
// connection, check the schema's version, keep the password out of errors.

#include "tasksup/journal/journal_store.hpp"
#include "tasksup/journal/leader_lease.hpp"

#include "../postgres_server.hpp"
#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

using namespace tasksup;
using namespace tasksup::journal;

namespace {

std::unique_ptr<journal_store> open_store(const std::string& url,
                                          const std::string& dir) {
  store_options opts;
  opts.dir = dir;
  opts.url = url;
  auto s = journal_store::open(opts);
  if (!s)
    FAIL(s.error().to_string());
  return std::move(*s);
}

std::unique_ptr<leader_lease> open_lease(const std::string& url,
                                         const std::string& holder,
                                         double lease_s = 30) {
  auto l = leader_lease::open(url, holder, holder + ":7400", lease_s);
  if (!l)
    FAIL(l.error().to_string());
  return std::move(*l);
}

} // namespace

TEST_CASE("the leader lease goes to one coordinator at a time, each time "
          "one epoch on",
          "[postgres]") {
  test::postgres_database db;
  auto a = open_lease(db.url, "a");
  auto b = open_lease(db.url, "b");
  auto took = a->acquire();
  REQUIRE(took);
  REQUIRE(*took);
  auto epoch = **took;
  CHECK(epoch == 1);
  // Held and not expired: b stands by, and reads who leads.
  auto refused = b->acquire();
  REQUIRE(refused);
  CHECK_FALSE(*refused);
  auto who = b->leader();
  REQUIRE(who);
  CHECK(who->holder == "a");
  CHECK(who->address == "a:7400");
  CHECK(who->epoch == epoch);
  CHECK(who->expires_in_s > 20);
  auto renewed = a->renew(epoch);
  REQUIRE(renewed);
  CHECK(*renewed);
  // A leader that stops hands over at once.
  REQUIRE(a->release(epoch));
  auto taken = b->acquire();
  REQUIRE(taken);
  REQUIRE(*taken);
  CHECK(**taken == epoch + 1);
  // The old epoch renews nothing.
  auto stale = a->renew(epoch);
  REQUIRE(stale);
  CHECK_FALSE(*stale);
}

TEST_CASE("an expired lease is taken over without its holder's consent",
          "[postgres]") {
  test::postgres_database db;
  auto a = open_lease(db.url, "a", 0.2);
  auto b = open_lease(db.url, "b", 30);
  auto took = a->acquire();
  REQUIRE(took);
  REQUIRE(*took);
  // a never renews: its lease runs out on the database's clock.
  std::optional<std::int64_t> epoch;
  for (int i = 0; i < 200 && !epoch; ++i) {
    auto t = b->acquire();
    REQUIRE(t);
    epoch = *t;
    if (!epoch) {
      auto who = b->leader();
      REQUIRE(who);
      REQUIRE(who->holder == "a");
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
  }
  REQUIRE(epoch);
  CHECK(*epoch == 2);
  auto renewed = a->renew(1);
  REQUIRE(renewed);
  CHECK_FALSE(*renewed);
}

TEST_CASE("a deposed leader's journal cannot commit, and says who leads",
          "[postgres]") {
  test::postgres_database db;
  test::temp_dir tmp{"pg"};
  auto lease_a = open_lease(db.url, "a");
  auto lease_b = open_lease(db.url, "b");
  auto ea = lease_a->acquire();
  REQUIRE(ea);
  REQUIRE(*ea);
  auto a = open_store(db.url, tmp.path + "/a");
  a->fence(**ea);
  auto seq = a->add_task("t", "spec", 1);
  REQUIRE(seq);
  REQUIRE(a->commit());
  // a's lease is handed over (as if it had expired while a was frozen).
  REQUIRE(lease_a->release(**ea));
  auto eb = lease_b->acquire();
  REQUIRE(eb);
  REQUIRE(*eb);
  auto b = open_store(db.url, tmp.path + "/b");
  b->fence(**eb);
  // a wakes up and writes: nothing of it commits.
  REQUIRE(a->add_record(*seq, 1, "from the old leader"));
  auto committed = a->commit();
  REQUIRE_FALSE(committed);
  CHECK(a->deposed());
  CHECK_FALSE(a->last_failure_transient());
  CHECK_THAT(committed.error().to_string(), Catch::Contains("b leads now"));
  // Nor ever again.
  auto later = a->add_task("u", "spec", 2);
  REQUIRE_FALSE(later);
  CHECK(a->deposed());
  // The new leader's writes commit; the old one's are not there.
  REQUIRE(b->add_record(*seq, 1, "from the new leader"));
  REQUIRE(b->commit());
  CHECK_FALSE(b->deposed());
  auto records = b->records(*seq);
  REQUIRE(records);
  REQUIRE(records->size() == 1);
  CHECK(records->at(0).body == "from the new leader");
}

TEST_CASE("a lost connection fails the commit as transient, and the journal "
          "reconnects",
          "[postgres]") {
  test::postgres_database db;
  test::temp_dir tmp{"pg"};
  auto j = open_store(db.url, tmp.path + "/state");
  auto seq = j->add_task("t", "spec", 1);
  REQUIRE(seq);
  REQUIRE(j->commit());
  REQUIRE(j->add_record(*seq, 1, "r1"));
  // The server drops the journal's connection (a restart, a failover).
  test::postgres_admin("SELECT pg_terminate_backend(pid) FROM "
                       "pg_stat_activity WHERE datname = '" +
                       db.name + "' AND application_name = 'tasksup'");
  auto lost = j->commit();
  REQUIRE_FALSE(lost);
  CHECK(j->last_failure_transient());
  CHECK_FALSE(j->deposed());
  j->rollback();
  // The same writes again, as the journal actor retries them.
  REQUIRE(j->add_record(*seq, 1, "r1"));
  REQUIRE(j->commit());
  auto records = j->records(*seq);
  REQUIRE(records);
  CHECK(records->size() == 1);
  // A statement that fails inside a transaction (here a submission, which
  // waits for its answer) fails the commit too: the server dropped the
  // whole transaction, so a commit must not say it kept the rest.
  REQUIRE(j->add_record(*seq, 2, "r2"));
  test::postgres_admin("SELECT pg_terminate_backend(pid) FROM "
                       "pg_stat_activity WHERE datname = '" +
                       db.name + "' AND application_name = 'tasksup'");
  REQUIRE_FALSE(j->add_task("u", "spec", 2));
  CHECK(j->last_failure_transient());
  REQUIRE_FALSE(j->commit());
  j->rollback();
  records = j->records(*seq);
  REQUIRE(records);
  CHECK(records->size() == 1);
}

TEST_CASE("coordinators that start together create the tables once",
          "[postgres]") {
  test::postgres_database db;
  test::temp_dir tmp{"pg"};
  auto open_in = [&](const std::string& dir) {
    store_options opts;
    opts.dir = dir;
    opts.url = db.url;
    return journal_store::open(opts);
  };
  auto f1 = std::async(std::launch::async, open_in, tmp.path + "/a");
  auto f2 = std::async(std::launch::async, open_in, tmp.path + "/b");
  auto j1 = f1.get();
  auto j2 = f2.get();
  REQUIRE(j1);
  REQUIRE(j2);
  REQUIRE((*j1)->add_task("t", "s", 1));
  REQUIRE((*j1)->commit());
  auto seen = (*j2)->task("t");
  REQUIRE(seen);
  CHECK(*seen);
}

TEST_CASE("a journal written by a newer tasksup is refused", "[postgres]") {
  test::postgres_database db;
  test::temp_dir tmp{"pg"};
  open_store(db.url, tmp.path + "/a").reset();
  {
    // Bump the version as a newer tasksup would.
    store_options opts;
    opts.dir = tmp.path + "/a";
    opts.url = db.url;
    auto c = PQconnectdb(db.url.c_str());
    REQUIRE(PQstatus(c) == CONNECTION_OK);
    PQclear(PQexec(c, "UPDATE tasksup_meta SET value = '99' "
                      "WHERE key = 'schema_version'"));
    PQfinish(c);
    auto refused = journal_store::open(opts);
    REQUIRE_FALSE(refused);
    CHECK_THAT(refused.error().to_string(),
               Catch::Contains("schema version 99 is newer"));
  }
}

TEST_CASE("a journal URL's password never shows in errors") {
  CHECK(redact_url("postgresql://u:secret@db:5432/x") ==
        "postgresql://u@db:5432/x");
  CHECK(redact_url("postgres://u@db/x") == "postgres://u@db/x");
  CHECK(redact_url("postgresql://db/x?user=u") == "postgresql://db/x?user=u");
  test::temp_dir tmp{"pg"};
  store_options opts;
  opts.dir = tmp.path + "/state";
  // Nothing listens on port 1.
  opts.url = "postgresql://u:secret@127.0.0.1:1/x";
  auto j = journal_store::open(opts);
  REQUIRE_FALSE(j);
  CHECK_THAT(j.error().to_string(), !Catch::Contains("secret"));
  CHECK_THAT(j.error().to_string(),
             Catch::Contains("postgresql://u@127.0.0.1:1/x"));
  opts.url = "mysql://db/x";
  auto wrong = journal_store::open(opts);
  REQUIRE_FALSE(wrong);
  CHECK_THAT(wrong.error().to_string(), Catch::Contains("postgresql://"));
}

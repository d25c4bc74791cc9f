// The journal's behaviour on both backends: what the node relies on of any
// journal (journal_store.hpp). Each case runs on SQLite and on PostgreSQL
// (the tests' server, a fresh database each time).

#include "tasksup/journal/journal_store.hpp"

#include "../postgres_server.hpp"
#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>

using namespace tasksup;
using namespace tasksup::journal;

namespace {

/// One backend's journal, reopened as a restarted node would.
struct backend {
  std::string kind;
  test::temp_dir tmp{"journal"};
  std::unique_ptr<test::postgres_database> db;

  explicit backend(std::string k) : kind(std::move(k)) {
    if (kind == "postgresql")
      db = std::make_unique<test::postgres_database>();
  }

  store_options options() const {
    store_options opts;
    opts.dir = tmp.path + "/state";
    if (db)
      opts.url = db->url;
    return opts;
  }

  std::unique_ptr<journal_store> open() const {
    auto s = journal_store::open(options());
    if (!s)
      FAIL(s.error().to_string());
    return std::move(*s);
  }
};

} // namespace

TEST_CASE("a journal keeps tasks, records and events across a reopen, and "
          "drops what was not committed",
          "[postgres]") {
  backend b{GENERATE(as<std::string>{}, "sqlite", "postgresql")};
  CAPTURE(b.kind);
  std::int64_t seq = 0;
  // Bytes of any kind: a NUL, bytes that are not UTF-8.
  const std::string binary("\0\1\2\xff\xfe", 5);
  const std::string odd_json = "{\"event\":\"x\xc3\x28\"}";
  {
    auto j = b.open();
    auto added = j->add_task("t1", "spec-bytes", 100.5);
    REQUIRE(added);
    seq = *added;
    REQUIRE(j->add_record(seq, 1, binary));
    REQUIRE(j->add_record(seq, 2, "second"));
    REQUIRE(j->add_event(seq, 1, 3, R"({"event":"x"})"));
    REQUIRE(j->add_event(seq, 2, 4, odd_json));
    REQUIRE(j->put_state("breakers", "a"));
    REQUIRE(j->put_state("breakers", "b"));
    REQUIRE(j->commit());
    // Written but not committed: gone after a crash.
    REQUIRE(j->add_record(seq, 3, "lost"));
    REQUIRE(j->add_task("t2", "lost too", 101));
  }
  auto j = b.open();
  auto tasks = j->tasks();
  REQUIRE(tasks);
  REQUIRE(tasks->size() == 1);
  CHECK(tasks->at(0).id == "t1");
  CHECK(tasks->at(0).seq == seq);
  CHECK(tasks->at(0).spec == "spec-bytes");
  CHECK(tasks->at(0).submitted_at == 100.5);
  CHECK_FALSE(tasks->at(0).finished_at);
  auto records = j->records(seq);
  REQUIRE(records);
  REQUIRE(records->size() == 2);
  CHECK(records->at(0).body == binary);
  CHECK(records->at(1).n == 2);
  auto events = j->events(seq);
  REQUIRE(events);
  REQUIRE(events->size() == 2);
  CHECK(events->at(0).kind == 3);
  CHECK(events->at(1).json == odd_json);
  auto last = j->last_event(seq);
  REQUIRE(last);
  CHECK(*last == 2);
  auto state = j->state("breakers");
  REQUIRE(state);
  CHECK(*state == std::optional<std::string>{"b"});
  auto none = j->state("nothing");
  REQUIRE(none);
  CHECK_FALSE(*none);
  // A task's end and result.
  REQUIRE(j->end_task(seq, 200.25, "result-bytes"));
  REQUIRE(j->commit());
  auto t1 = j->task("t1");
  REQUIRE(t1);
  REQUIRE(*t1);
  CHECK((*t1)->finished_at == std::optional<double>{200.25});
  CHECK((*t1)->result == "result-bytes");
}

TEST_CASE("a journal refuses a second task with the same id until dropped, "
          "and the refusal spoils nothing else",
          "[postgres]") {
  backend b{GENERATE(as<std::string>{}, "sqlite", "postgresql")};
  CAPTURE(b.kind);
  auto j = b.open();
  auto first = j->add_task("t", "a", 1);
  REQUIRE(first);
  REQUIRE(j->add_record(*first, 1, "r"));
  REQUIRE(j->commit());
  REQUIRE(j->add_record(*first, 2, "kept"));
  auto again = j->add_task("t", "b", 2);
  REQUIRE_FALSE(again);
  CHECK_FALSE(j->last_failure_transient());
  CHECK_THAT(again.error().to_string(), Catch::Contains("adding task 't'"));
  // The other writes of the transaction stand.
  REQUIRE(j->commit());
  auto kept = j->records(*first);
  REQUIRE(kept);
  CHECK(kept->size() == 2);
  REQUIRE(j->drop_task("t"));
  auto replaced = j->add_task("t", "b", 2);
  REQUIRE(replaced);
  CHECK(*replaced != *first);
  REQUIRE(j->commit());
  auto records = j->records(*first);
  REQUIRE(records);
  CHECK(records->empty());
  auto t = j->task("t");
  REQUIRE(t);
  REQUIRE(*t);
  CHECK((*t)->spec == "b");
}

TEST_CASE("a rolled back transaction leaves nothing", "[postgres]") {
  backend b{GENERATE(as<std::string>{}, "sqlite", "postgresql")};
  CAPTURE(b.kind);
  auto j = b.open();
  auto seq = j->add_task("t", "a", 1);
  REQUIRE(seq);
  REQUIRE(j->commit());
  REQUIRE(j->add_record(*seq, 1, "r"));
  REQUIRE(j->put_state("k", "v"));
  REQUIRE(j->add_task("u", "b", 2));
  j->rollback();
  auto records = j->records(*seq);
  REQUIRE(records);
  CHECK(records->empty());
  auto state = j->state("k");
  REQUIRE(state);
  CHECK_FALSE(*state);
  auto tasks = j->tasks();
  REQUIRE(tasks);
  CHECK(tasks->size() == 1);
  // And the journal goes on.
  REQUIRE(j->add_record(*seq, 1, "r"));
  REQUIRE(j->commit());
}

TEST_CASE("pruning removes finished tasks by age and by count", "[postgres]") {
  backend b{GENERATE(as<std::string>{}, "sqlite", "postgresql")};
  CAPTURE(b.kind);
  auto j = b.open();
  for (int i = 0; i < 6; ++i) {
    auto seq = j->add_task("t" + std::to_string(i), "s", i);
    REQUIRE(seq);
    REQUIRE(j->add_record(*seq, 1, "r"));
    REQUIRE(j->add_event(*seq, 1, 1, "{}"));
    if (i < 5) // t5 is still running
      REQUIRE(j->end_task(*seq, 10.0 * i, "result"));
  }
  REQUIRE(j->commit());
  SECTION("by age: finished before now - max_age") {
    auto n = j->prune(45, 20, 0); // finished before 25: t0, t1, t2
    REQUIRE(n);
    CHECK(*n == 3);
  }
  SECTION("by count: the newest finished ones stay") {
    auto n = j->prune(45, 0, 2); // keeps t4, t3
    REQUIRE(n);
    CHECK(*n == 3);
    auto t3 = j->task("t3");
    REQUIRE(t3);
    CHECK(*t3);
  }
  SECTION("no limits: nothing goes") {
    auto n = j->prune(45, 0, 0);
    REQUIRE(n);
    CHECK(*n == 0);
    REQUIRE(j->commit());
    auto tasks = j->tasks();
    REQUIRE(tasks);
    CHECK(tasks->size() == 6);
    return;
  }
  REQUIRE(j->commit());
  auto tasks = j->tasks();
  REQUIRE(tasks);
  CHECK(tasks->size() == 3);
  auto running = j->task("t5");
  REQUIRE(running);
  CHECK(*running);
  auto stats = j->stats();
  REQUIRE(stats);
  CHECK(stats->tasks == 3);
  CHECK(stats->unfinished == 1);
  CHECK(stats->records == 3);
  CHECK(stats->events == 3);
  CHECK(stats->bytes > 0);
}

TEST_CASE("one node per state directory, whichever the journal", "[postgres]") {
  backend b{GENERATE(as<std::string>{}, "sqlite", "postgresql")};
  CAPTURE(b.kind);
  auto first = b.open();
  auto second = journal_store::open(b.options());
  REQUIRE_FALSE(second);
  CHECK_THAT(second.error().to_string(),
             Catch::Contains("in use by another tasksup node"));
  first.reset();
  CHECK(journal_store::open(b.options()));
}

TEST_CASE("the unfinished tasks' records and last events come in one read, "
          "the finished tasks' not",
          "[postgres]") {
  backend b{GENERATE(as<std::string>{}, "sqlite", "postgresql")};
  CAPTURE(b.kind);
  auto j = b.open();
  auto t1 = j->add_task("t1", "s", 1);
  auto t2 = j->add_task("t2", "s", 2);
  auto t3 = j->add_task("t3", "s", 3);
  auto t4 = j->add_task("t4", "s", 4);
  REQUIRE(t1);
  REQUIRE(t2);
  REQUIRE(t3);
  REQUIRE(t4);
  // t1: records and events; t2: finished; t3: nothing yet; t4: events only.
  REQUIRE(j->add_record(*t1, 2, "b"));
  REQUIRE(j->add_record(*t1, 1, "a"));
  for (int n = 1; n <= 3; ++n)
    REQUIRE(j->add_event(*t1, n, 1, "{}"));
  REQUIRE(j->add_record(*t2, 1, "x"));
  REQUIRE(j->add_event(*t2, 1, 1, "{}"));
  REQUIRE(j->end_task(*t2, 5, "r"));
  REQUIRE(j->add_event(*t4, 7, 1, "{}"));
  REQUIRE(j->commit());
  auto u = j->unfinished();
  REQUIRE(u);
  CHECK(u->size() == 2);
  REQUIRE(u->count(*t1) == 1);
  auto& first = u->at(*t1);
  REQUIRE(first.records.size() == 2);
  CHECK(first.records[0].n == 1);
  CHECK(first.records[0].body == "a");
  CHECK(first.records[1].body == "b");
  CHECK(first.last_event == 3);
  CHECK(u->count(*t2) == 0);
  CHECK(u->count(*t3) == 0);
  REQUIRE(u->count(*t4) == 1);
  CHECK(u->at(*t4).records.empty());
  CHECK(u->at(*t4).last_event == 7);
}

#include "tasksup/journal/journal_store.hpp"

#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace tasksup;
using namespace tasksup::journal;

namespace {

namespace fs = std::filesystem;

/// A fresh directory under the system's temporary directory, removed after.
struct temp_dir {
  fs::path path;
  temp_dir() {
    auto tmpl = (fs::temp_directory_path() / "tasksup-journal-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string state() const { return (path / "state").string(); }
};

std::unique_ptr<journal_store> open_or_fail(const store_options& opts) {
  auto s = journal_store::open(opts);
  if (!s)
    FAIL(s.error().to_string());
  return std::move(*s);
}

/// Makes `dir` unwritable, also for root (whom permission bits do not stop):
/// the immutable attribute. Returns a command that undoes it.
std::string make_unwritable(const std::string& dir) {
  if (::geteuid() != 0) {
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    return "chmod 700 '" + dir + "'";
  }
  REQUIRE(std::system(("chattr +i '" + dir + "'").c_str()) == 0);
  return "chattr -i '" + dir + "'";
}

} // namespace

TEST_CASE("a commit survives a crash of its process before any sync, sync "
          "puts commits on disk once, and only in sync mode full") {
  temp_dir tmp;
  store_options opts{tmp.state()};
  // A child commits without syncing and dies without closing the journal
  // (no checkpoint, no cleanup): what it committed is in the log.
  auto pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto j = journal_store::open(opts);
    if (!j || !(*j)->add_task("t1", "spec", 1.0) || !(*j)->commit())
      ::_exit(2);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  auto j = open_or_fail(opts);
  auto t = j->task("t1");
  REQUIRE(t);
  CHECK(t->has_value());

  auto syncs = [&] {
    auto s = j->stats();
    REQUIRE(s);
    return s->syncs;
  };
  CHECK(syncs() == 0);
  REQUIRE(j->add_task("t2", "spec", 2.0));
  REQUIRE(j->commit());
  REQUIRE(j->add_task("t3", "spec", 3.0));
  REQUIRE(j->commit());
  // One sync for both commits; none when nothing was committed since.
  auto synced = j->sync();
  REQUIRE(synced);
  CHECK(*synced);
  CHECK(syncs() == 1);
  synced = j->sync();
  REQUIRE(synced);
  CHECK_FALSE(*synced);
  CHECK(syncs() == 1);
  j.reset();

  opts.sync = sync_mode::normal;
  j = open_or_fail(opts);
  REQUIRE(j->add_task("t4", "spec", 4.0));
  REQUIRE(j->commit());
  synced = j->sync();
  REQUIRE(synced);
  CHECK_FALSE(*synced);
  CHECK(syncs() == 0);
}

TEST_CASE("one node per state directory") {
  temp_dir tmp;
  auto first = open_or_fail({tmp.state()});
  auto second = journal_store::open({tmp.state()});
  REQUIRE_FALSE(second);
  CHECK_THAT(second.error().to_string(),
             Catch::Contains("in use by another tasksup node (pid " +
                             std::to_string(::getpid()) + ")"));
  first.reset();
  CHECK(journal_store::open({tmp.state()}));
}

TEST_CASE("a damaged journal stops the open with a clear error") {
  temp_dir tmp;
  fs::create_directories(tmp.state());
  SECTION("a file that is not a database") {
    std::ofstream{tmp.state() + "/journal.db"} << std::string(8192, 'x');
  }
  SECTION("a database with a page overwritten") {
    {
      auto j = open_or_fail({tmp.state()});
      for (int i = 0; i < 200; ++i)
        REQUIRE(j->add_task("t" + std::to_string(i), std::string(500, 's'), i));
      REQUIRE(j->commit());
    }
    std::fstream f{tmp.state() + "/journal.db",
                   std::ios::in | std::ios::out | std::ios::binary};
    f.seekp(4096 * 2);
    std::string junk(4096, '\xff');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto j = journal_store::open({tmp.state()});
  REQUIRE_FALSE(j);
  CHECK_THAT(j.error().to_string(), Catch::Contains("journal.db"));
}

TEST_CASE("an unwritable state directory stops the open") {
  temp_dir tmp;
  fs::create_directories(tmp.state());
  auto undo = make_unwritable(tmp.state());
  auto j = journal_store::open({tmp.state()});
  std::system(undo.c_str());
  REQUIRE_FALSE(j);
  CHECK_THAT(j.error().to_string(), Catch::Contains("lock"));
}

TEST_CASE("a full journal fails the write and keeps what was committed") {
  temp_dir tmp;
  store_options opts{tmp.state()};
  opts.max_pages = 40;
  int committed = 0;
  {
    auto j = open_or_fail(opts);
    std::string failure;
    for (int i = 0; i < 1000 && failure.empty(); ++i) {
      auto t = j->add_task("t" + std::to_string(i), std::string(2000, 's'), i);
      if (!t) {
        failure = t.error().to_string();
        j->rollback();
        break;
      }
      if (auto ok = j->commit(); !ok) {
        failure = ok.error().to_string();
        break;
      }
      ++committed;
    }
    CHECK_THAT(failure, Catch::Contains("full"));
    REQUIRE(committed > 0);
  }
  opts.max_pages = 0;
  auto j = open_or_fail(opts);
  auto tasks = j->tasks();
  REQUIRE(tasks);
  CHECK(tasks->size() == static_cast<std::size_t>(committed));
}

TEST_CASE("an older journal is migrated, a newer one refused") {
  temp_dir tmp;
  fs::create_directories(tmp.state());
  auto file = tmp.state() + "/journal.db";
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
  // The layout version 1 wrote.
  const char* version_1 = "CREATE TABLE tasks (seq INTEGER PRIMARY KEY "
                          "AUTOINCREMENT, id TEXT NOT NULL UNIQUE, spec BLOB "
                          "NOT NULL, submitted_at REAL NOT NULL, finished_at "
                          "REAL, result BLOB);"
                          "CREATE INDEX tasks_finished ON tasks(finished_at);"
                          "CREATE TABLE records (task INTEGER NOT NULL, n "
                          "INTEGER NOT NULL, body BLOB NOT NULL, PRIMARY KEY "
                          "(task, n)) WITHOUT ROWID;"
                          "CREATE TABLE events (task INTEGER NOT NULL, n "
                          "INTEGER NOT NULL, kind INTEGER NOT NULL, json TEXT "
                          "NOT NULL, PRIMARY KEY (task, n)) WITHOUT ROWID;"
                          "PRAGMA user_version = 1;";
  SECTION("an empty journal of schema version 1 is migrated") {
    REQUIRE(sqlite3_exec(db, version_1, nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(db);
    auto j = open_or_fail({tmp.state()});
    // The table version 2 added is there.
    REQUIRE(j->put_state("k", "v"));
    REQUIRE(j->commit());
    auto s = j->state("k");
    REQUIRE(s);
    CHECK(*s == std::optional<std::string>{"v"});
  }
  SECTION("one of schema version 3 with tasks is refused: its task records "
          "predate the supervisor overrides") {
    REQUIRE(sqlite3_exec(db, version_1, nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "CREATE TABLE node_state (key TEXT PRIMARY KEY, "
                         "body BLOB NOT NULL) WITHOUT ROWID;"
                         "INSERT INTO tasks (id, spec, submitted_at) VALUES "
                         "('old', 'old-spec', 7);"
                         "PRAGMA user_version = 3;",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    auto j = journal_store::open({tmp.state()});
    REQUIRE_FALSE(j);
    CHECK_THAT(j.error().to_string(),
               Catch::Contains("schema version 3, 1 task(s)") &&
                 Catch::Contains("move the journal away"));
  }
  SECTION("one with tasks in an encoding this build cannot read is refused, "
          "and left as it was") {
    REQUIRE(sqlite3_exec(db, version_1, nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "INSERT INTO tasks (id, spec, submitted_at) VALUES "
                         "('old', 'old-spec', 7);",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
    auto j = journal_store::open({tmp.state()});
    REQUIRE_FALSE(j);
    CHECK_THAT(j.error().to_string(),
               Catch::Contains("schema version 1, 1 task(s)") &&
                 Catch::Contains("older tasksup") &&
                 Catch::Contains("move the journal away"));
    REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr) ==
            SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    CHECK(sqlite3_column_int(st, 0) == 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  SECTION("a newer schema") {
    REQUIRE(sqlite3_exec(db, "PRAGMA user_version = 99;", nullptr, nullptr,
                         nullptr) == SQLITE_OK);
    sqlite3_close(db);
    auto j = journal_store::open({tmp.state()});
    REQUIRE_FALSE(j);
    CHECK_THAT(j.error().to_string(),
               Catch::Contains("schema version 99 is newer"));
  }
}

TEST_CASE("the journal and its -wal and -shm files are 0600 in a directory "
          "others can read, whatever the umask") {
  temp_dir tmp;
  auto dir = tmp.state();
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  // A journal an older node left readable: tightened on open.
  {
    auto j = open_or_fail({dir});
    REQUIRE(j->commit());
  }
  REQUIRE(::chmod((dir + "/journal.db").c_str(), 0644) == 0);
  // No umask to lean on: the modes are asked for, not left to it.
  struct umask_guard {
    mode_t old = ::umask(0);
    ~umask_guard() { ::umask(old); }
  } no_umask;
  auto j = open_or_fail({dir});
  REQUIRE(j->add_task("t1", "env SECRET=hunter2", 1.0));
  REQUIRE(j->commit());
  // Written and not yet checkpointed: the spec is in the write-ahead log.
  for (auto* name :
       {"journal.db", "journal.db-wal", "journal.db-shm", "lock"}) {
    struct stat st {};
    INFO(name);
    REQUIRE(::stat((dir + "/" + name).c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
  }
}

// The journal actor on a real store (its own thread, as in the node): a
// request is answered once its write is committed (a submission or a
// durable input once also synced to disk); its figures for /metrics
// count the committed writes by kind, the commits and their durations; a
// full disk shows as failing and refuses submissions, and a submission that
// fits again is accepted. On a shared PostgreSQL journal, a deposed one
// answers what waits with an error, tells its owner and stops.

#include "tasksup/actors/journal_actor.hpp"

#include "tasksup/actors/journal_codec.hpp"
#include "tasksup/actors/journal_figures.hpp"
#include "tasksup/actors/protocol.hpp"

#include "tasksup/journal/leader_lease.hpp"

#include "../postgres_server.hpp"
#include "../temp_dir.hpp"

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

using namespace tasksup;
using namespace std::chrono_literals;

namespace {

using tasksup::test::temp_dir;

struct journal_fixture {
  temp_dir dir;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  journal_actor journal;

  explicit journal_fixture(std::int64_t max_pages,
                           std::int64_t keep_finished = 10000,
                           journal::sync_mode sync = journal::sync_mode::full) {
    journal::store_options opts{dir.path + "/state"};
    opts.max_pages = max_pages;
    opts.sync = sync;
    start(opts, keep_finished, {}, {});
  }

  /// On the PostgreSQL journal at `url`, fenced at `epoch`.
  journal_fixture(const std::string& url, std::int64_t epoch,
                  journal_deposed_hook on_deposed) {
    journal::store_options opts{dir.path + "/state"};
    opts.url = url;
    start(opts, 10000, epoch, std::move(on_deposed));
  }

  void start(const journal::store_options& opts, std::int64_t keep_finished,
             std::optional<std::int64_t> epoch,
             journal_deposed_hook on_deposed) {
    register_protocol(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    auto store = journal::journal_store::open(opts);
    if (!store)
      FAIL(store.error().to_string());
    if (epoch)
      (*store)->fence(*epoch);
    journal_retention keep;
    keep.interval_s = 0; // no pruning timer: pruned when asked
    keep.max_count = keep_finished;
    journal =
      spawn_journal(*sys, std::move(*store), keep, std::move(on_deposed));
  }

  ~journal_fixture() {
    caf::anon_send_exit(journal, caf::exit_reason::user_shutdown);
  }

  journal_figures figures() {
    caf::scoped_actor self{*sys};
    journal_figures out;
    self->request(journal, 10s, jstats_atom::value)
      .receive([&](journal_figures& f) { out = std::move(f); },
               [&](caf::error& err) { FAIL(sys->render(err)); });
    return out;
  }

  /// The sequence number of the last task accepted.
  std::int64_t last_seq = 0;

  /// Submits a task; empty on success, else the refusal's text.
  std::string add_task(const std::string& id, std::size_t bytes,
                       bool replace = false) {
    caf::scoped_actor self{*sys};
    std::string refusal;
    self
      ->request(journal, 10s, jtask_atom::value, id, std::string(bytes, 's'),
                1.0, replace)
      .receive([&](std::int64_t seq) { last_seq = seq; },
               [&](caf::error& err) { refusal = sys->render(err); });
    return refusal;
  }

  /// Ends task `seq` and waits until that is committed (asking for a
  /// history commits whatever is queued first).
  void end_task(std::int64_t seq) {
    caf::anon_send(journal, jend_atom::value, seq, 2.0, std::string{"r"});
    caf::scoped_actor self{*sys};
    self->request(journal, 10s, jhistory_atom::value, seq, std::string{"x"})
      .receive([](std::vector<event>&) {},
               [&](caf::error& err) { FAIL(sys->render(err)); });
  }

  bool add_input(std::int64_t seq, std::int64_t n, bool durable = false) {
    caf::scoped_actor self{*sys};
    bool ok = false;
    self
      ->request(journal, 10s, jinput_atom::value, seq, n, std::string{"in"},
                durable)
      .receive([&](bool) { ok = true; }, [](caf::error&) {});
    return ok;
  }
};

std::uint64_t sum(const std::vector<std::uint64_t>& xs) {
  return std::accumulate(xs.begin(), xs.end(), std::uint64_t{0});
}

} // namespace

TEST_CASE("journal actor: its figures count committed writes by kind and "
          "every commit with its duration") {
  journal_fixture j{0};
  auto f0 = j.figures();
  CHECK(f0.commits == 0);
  CHECK(sum(f0.written) == 0);
  CHECK_FALSE(f0.failing);
  REQUIRE(j.add_task("a", 100).empty());
  auto a = j.last_seq;
  REQUIRE(j.add_task("b", 100).empty());
  auto b = j.last_seq;
  REQUIRE(j.add_input(a, 1));
  REQUIRE(j.add_input(a, 2));
  REQUIRE(j.add_input(b, 1));
  auto f = j.figures();
  // Each request waited for its commit before the next was sent.
  CHECK(f.commits == 5);
  CHECK(f.written[0] == 2); // task
  CHECK(f.written[1] == 3); // input
  CHECK(sum(f.written) == 5);
  CHECK(f.commit_failures == 0);
  CHECK(sum(f.commit_buckets) == f.commits);
  CHECK(f.commit_seconds > 0);
  CHECK(f.tasks == 2);
  CHECK(f.unfinished == 2);
  CHECK(f.bytes > 0);
  CHECK(f.pending == 0);
  CHECK_FALSE(f.failing);
  CHECK_FALSE(f.disk_full);
  CHECK(f.pruned == 0);
}

TEST_CASE("journal actor: a submission and a durable input are answered "
          "after a sync to disk, an attempt's progress after its commit") {
  for (auto mode : {journal::sync_mode::full, journal::sync_mode::normal}) {
    CAPTURE(journal::to_string(mode));
    journal_fixture j{0, 10000, mode};
    auto full = mode == journal::sync_mode::full;
    REQUIRE(j.add_task("a", 100).empty());
    auto a = j.last_seq;
    CHECK(j.figures().syncs == (full ? 1u : 0u));
    // Progress: committed, answered, not synced.
    REQUIRE(j.add_input(a, 1));
    REQUIRE(j.add_input(a, 2));
    auto f = j.figures();
    CHECK(f.commits == 3);
    CHECK(f.syncs == (full ? 1u : 0u));
    // What someone outside is told of: synced first.
    REQUIRE(j.add_input(a, 3, true));
    f = j.figures();
    CHECK(f.commits == 4);
    CHECK(f.syncs == (full ? 2u : 0u));
    CHECK(f.written[1] == 3);
  }
}

TEST_CASE("journal actor: a full disk shows in its figures, refuses "
          "submissions, and a submission that fits again is accepted") {
  journal_fixture j{40}; // 160 KiB at most
  int accepted = 0;
  std::vector<std::int64_t> seqs;
  std::string refusal;
  for (int i = 0; i < 1000 && refusal.empty(); ++i) {
    refusal = j.add_task("t" + std::to_string(i), 2000);
    if (refusal.empty()) {
      ++accepted;
      seqs.push_back(j.last_seq);
    }
  }
  REQUIRE_FALSE(refusal.empty());
  CHECK(refusal.find("full") != std::string::npos);
  CHECK(accepted > 10);
  auto f = j.figures();
  CHECK(f.failing);
  CHECK(f.disk_full);
  CHECK(f.commit_failures == 1);
  CHECK(f.written[0] == static_cast<std::uint64_t>(accepted));
  CHECK(f.tasks == accepted);
  // Still full: tried again (not refused unseen), refused with the reason.
  CHECK(j.add_task("more", 2000).find("full") != std::string::npos);
  CHECK(j.figures().commit_failures == 2);
  // The tasks end (small updates in place still fit; they ended in 1970,
  // so retention by age prunes them all): room again.
  for (auto seq : seqs)
    j.end_task(seq);
  caf::anon_send(j.journal, jprune_atom::value);
  auto g = j.figures();
  CHECK(g.pruned == seqs.size());
  CHECK(g.tasks == 0);
  // A submission is accepted again and nothing fails any more. (Before, a
  // node refused every submission from its first failed commit on until
  // some running task happened to write.)
  CHECK(j.add_task("after", 2000).empty());
  auto h = j.figures();
  CHECK_FALSE(h.failing);
  CHECK_FALSE(h.disk_full);
  CHECK(h.written[3] == seqs.size()); // end
}

TEST_CASE("journal actor: on a shared PostgreSQL journal it commits and reads "
          "back, and once deposed it refuses what waits, tells its owner "
          "why and stops",
          "[postgres]") {
  test::postgres_database db;
  auto lease = [&](const std::string& who) {
    auto l = journal::leader_lease::open(db.url, who, who + ":1", 30);
    if (!l)
      FAIL(l.error().to_string());
    return std::move(*l);
  };
  auto a = lease("a");
  auto b = lease("b");
  auto epoch = a->acquire();
  REQUIRE(epoch);
  REQUIRE(*epoch);
  auto told = std::make_shared<std::promise<std::string>>();
  journal_fixture j{db.url, **epoch,
                    [told](const std::string& why) { told->set_value(why); }};
  REQUIRE(j.add_task("a", 100).empty());
  auto seq = j.last_seq;
  REQUIRE(j.add_input(seq, 1));
  REQUIRE(j.add_input(seq, 2, true));
  j.end_task(seq);
  auto f = j.figures();
  CHECK(f.written[0] == 1);
  CHECK(f.written[1] == 2);
  CHECK(f.tasks == 1);
  CHECK(f.unfinished == 0);
  CHECK(f.syncs == 0); // nothing to sync: the server's commit is durable
  // Another coordinator takes over.
  REQUIRE(a->release(**epoch));
  auto taken = b->acquire();
  REQUIRE(taken);
  REQUIRE(*taken);
  caf::scoped_actor self{*j.sys};
  self->monitor(j.journal);
  auto refusal = j.add_task("b", 100);
  CHECK_THAT(refusal, Catch::Contains("b leads now"));
  auto why = told->get_future();
  REQUIRE(why.wait_for(10s) == std::future_status::ready);
  CHECK_THAT(why.get(), Catch::Contains("b leads now"));
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(10s) >> [] {});
  CHECK(down);
  // Nothing of the deposed journal's last write is there.
  journal::store_options opts{j.dir.path + "/reader"};
  opts.url = db.url;
  auto reader = journal::journal_store::open(opts);
  REQUIRE(reader);
  auto tasks = (*reader)->tasks();
  REQUIRE(tasks);
  REQUIRE(tasks->size() == 1);
  CHECK(tasks->at(0).id == "a");
}

TEST_CASE("journal: a restarted node reads the groups' rows apart from the "
          "tasks', each with its inputs in order, or its end") {
  temp_dir dir;
  journal::store_options opts{dir.path + "/state"};
  {
    auto store = journal::journal_store::open(opts);
    REQUIRE(store);
    auto& s = **store;
    journaled_task task;
    task.spec.id = "a";
    task.member_run = 5;
    REQUIRE(s.add_task("a", encode(task), 1.0));
    auto crew = s.add_task(
      "crew", encode(journaled_group{"crew", "{}", "trace", 11}), 1.0);
    REQUIRE(crew);
    auto inner = s.add_task(
      "inner", encode(journaled_group{"crew", "", "trace", 11}), 1.0);
    REQUIRE(inner);
    journaled_group_input start;
    start.at_s = 10;
    journaled_group_input started;
    started.kind = journaled_group_input::started;
    started.at_s = 11;
    REQUIRE(s.add_record(*crew, 1, encode(start)));
    REQUIRE(s.add_record(*crew, 2, encode(started)));
    auto old =
      s.add_task("old", encode(journaled_group{"old", "{}", "trace", 3}), 1.0);
    REQUIRE(old);
    task_result r;
    r.task_id = "old";
    r.outcome = task_outcome::stopped;
    REQUIRE(s.end_task(*old, 2.0, encode(journaled_group_end{r, 4})));
    REQUIRE(s.commit());
  }
  auto store = journal::journal_store::open(opts);
  REQUIRE(store);
  auto snap = load_journal(**store);
  REQUIRE(snap);
  REQUIRE(snap->tasks.size() == 1);
  CHECK(snap->tasks[0].task.spec.id == "a");
  CHECK(snap->tasks[0].task.member_run == 5);
  REQUIRE(snap->groups.size() == 3);
  auto& crew = snap->groups[0];
  CHECK(crew.id == "crew");
  CHECK(crew.group.document == "{}");
  CHECK(crew.group.seed == 11);
  REQUIRE(crew.inputs.size() == 2);
  CHECK(crew.inputs[0].kind == journaled_group_input::start);
  CHECK(crew.inputs[1].kind == journaled_group_input::started);
  CHECK(crew.inputs[1].at_s == 11);
  CHECK_FALSE(crew.finished);
  CHECK(snap->groups[1].id == "inner");
  CHECK(snap->groups[1].group.top == "crew");
  CHECK(snap->groups[1].inputs.empty());
  auto& old = snap->groups[2];
  REQUIRE(old.finished);
  CHECK(old.finished_at == 2.0);
  CHECK(old.finished->restarts == 4);
  REQUIRE(old.finished->result);
  CHECK(old.finished->result->outcome == task_outcome::stopped);
}

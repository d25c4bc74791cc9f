// Group supervisors (issue 33): a `one_for_all` restart of a large group and
// the start, memory and stop of a three-level tree, against OTP's
// `supervisor` doing the same (bench/erlang_groups.escript).
//
// The members' tasks run on an in-process host that answers every
// `member_start` at once with true and ends a member as soon as it is asked
// to stop (`stopped`): no registry, no runtime, no process. What is measured
// is the group supervisors (group_supervisor_actor.cpp and the group
// machine) and CAF's messages between them and the host.
//
//   bench_groups --case=one_for_all [--members=1000] [--restarts=20]
//   bench_groups --case=tree [--members=10000] [--fanout=10]
//   (both: [--policy=stealing|sharing|handoff] [--threads=0])
//
// one_for_all: one group of `--members` permanent task members, strategy
// one_for_all, intensity `--restarts` + 10 per 1 s (never reached). Once all
// have started, `--restarts` times: the host reports member `r % members`
// failed, and the benchmark waits until the host has been asked to start
// every member again (the group stops the other members in reverse order
// first, as OTP does). Reports milliseconds per whole restart (from the
// failure to the last member's start), restarts per second, and the growth
// of RSS over the restarts (what they leave behind).
//
// tree: a top group of `--fanout` groups, each of `--fanout` groups, each of
// `--members / fanout^2` task members (10 x 10 x 100 by default: 111 groups,
// 10,000 task members), all one_for_one. Reports the time from the spawn of
// the top group to its `group_started` (every member started once, in
// order), the growth of RSS and of the malloc heap over building the spec
// and starting the tree divided by the task members, and the time from
// `(stop, cancel)` to the top group's `group_ended`.

#include "bench_util.hpp"
#include "supervision_harness.hpp"

#include "tasksup/actors/group_supervisor_actor.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <malloc.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using namespace tasksup;
using namespace tasksup::bench;

/// Bench -> host: report member `id` failed to the group that started it.
using fail_atom = caf::atom_constant<caf::atom("bfail")>;
/// Bench -> host: answer (with the count) once `n` starts have been asked.
using await_starts_atom = caf::atom_constant<caf::atom("bawait")>;
/// Bench -> host: how many stops it has been asked for.
using stops_atom = caf::atom_constant<caf::atom("bstops")>;

/// What the fake host keeps: the group that last started each member, and
/// counts.
struct host_state {
  std::unordered_map<std::string, caf::actor> group_of;
  std::uint64_t starts = 0;
  std::uint64_t stops = 0;
  /// An `await_starts` waiting for `awaited` starts, if one is.
  std::uint64_t awaited = 0;
  caf::response_promise waiter;
  bool waiting = false;
  static inline const char* name = "bench.group_host";
};

/// A host whose members run at once and stop at once.
caf::behavior
fake_host(caf::stateful_actor<host_state, caf::event_based_actor>* self) {
  return {
    [=](member_start_atom, const std::string&, const task_spec& task,
        std::int64_t) {
      auto& st = self->state;
      st.group_of[task.id] =
        caf::actor_cast<caf::actor>(self->current_sender());
      if (++st.starts == st.awaited && st.waiting) {
        st.waiting = false;
        st.waiter.deliver(st.starts);
      }
      return true;
    },
    [=](member_stop_atom, const std::string& id, double) {
      ++self->state.stops;
      self->send(self->state.group_of.at(id), member_ended_atom::value, id,
                 member_end::stopped);
    },
    [=](fail_atom, const std::string& id) {
      self->send(self->state.group_of.at(id), member_ended_atom::value, id,
                 member_end::failed);
    },
    [=](await_starts_atom, std::uint64_t n) -> caf::result<std::uint64_t> {
      auto& st = self->state;
      if (st.starts >= n)
        return st.starts;
      st.awaited = n;
      st.waiting = true;
      st.waiter = self->make_response_promise();
      return st.waiter;
    },
    [=](stops_atom) { return self->state.stops; },
  };
}

/// A permanent task member (a benchmark task: one agent, no backoff).
group_member_spec task_member(std::size_t index) {
  group_member_spec m;
  m.id = task_name(index);
  m.restart = restart_type::permanent;
  m.task = bench_task(index, "bench-agent", 3, 0);
  return m;
}

std::uint64_t heap_bytes() {
  auto info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

double mib(std::uint64_t bytes) {
  return static_cast<double>(bytes) / 1048576.0;
}

double per(std::uint64_t before, std::uint64_t after, std::uint64_t n) {
  return after > before
           ? static_cast<double>(after - before) / static_cast<double>(n)
           : 0.0;
}

/// Waits for the group's `group_started`; false if it ended instead.
bool await_started(caf::scoped_actor& self) {
  bool started = false;
  self->receive(
    [&](group_started_atom, const std::string&) { started = true; },
    [&](group_ended_atom, const group_report& r) {
      std::fprintf(
        stderr, "bench_groups: group %s ended before it started: %s\n",
        r.group_id.c_str(), std::string{to_string(r.reason)}.c_str());
    });
  return started;
}

/// Stops the group (`cancel`) and waits for its report.
group_report stop_group(caf::scoped_actor& self,
                        const group_supervisor_actor& group) {
  group_report out;
  self->send(group, stop_atom::value, stop_mode::cancel);
  bool done = false;
  while (!done)
    self->receive([&](group_started_atom, const std::string&) {},
                  [&](group_ended_atom, const group_report& r) {
                    out = r;
                    done = true;
                  });
  return out;
}

int one_for_all(caf::actor_system& sys, const bench_config& cfg,
                std::uint64_t members, std::uint64_t restarts) {
  auto host = sys.spawn(fake_host);
  caf::scoped_actor self{sys};
  auto spec = std::make_shared<group_spec>();
  spec->id = "all";
  spec->strategy = group_strategy::one_for_all;
  spec->intensity.max_restarts = static_cast<int>(restarts + 10);
  spec->intensity.period_s = 1;
  for (std::size_t i = 0; i < members; ++i)
    spec->members.push_back(task_member(i));
  group_options opts;
  opts.spec = std::move(spec);
  opts.host = caf::actor_cast<group_host_actor>(host);
  opts.parent = caf::actor_cast<group_parent_actor>(self);
  auto start = bench_clock::now();
  auto group = spawn_group(sys, std::move(opts));
  if (!await_started(self))
    return 1;
  auto start_s = seconds_since(start);
  std::vector<double> ms;
  ms.reserve(restarts);
  auto rss_before = rss_bytes();
  auto all = bench_clock::now();
  for (std::uint64_t r = 0; r < restarts; ++r) {
    auto t0 = bench_clock::now();
    self->send(host, fail_atom::value, task_name(r % members));
    self
      ->request(host, caf::infinite, await_starts_atom::value,
                members * (r + 2))
      .receive([](std::uint64_t) {},
               [&](caf::error& err) {
                 std::fprintf(stderr, "bench_groups: %s\n",
                              sys.render(err).c_str());
                 std::_Exit(1);
               });
    ms.push_back(seconds_since(t0) * 1e3);
  }
  auto total_s = seconds_since(all);
  auto rss_after = rss_bytes();
  std::uint64_t stops = 0;
  self->request(host, caf::infinite, stops_atom::value)
    .receive([&](std::uint64_t n) { stops = n; }, [](caf::error&) {});
  auto report = stop_group(self, group);
  auto mean_ms =
    restarts > 0 ? total_s * 1e3 / static_cast<double>(restarts) : 0.0;
  auto p50 = percentile(ms, 0.5);
  auto max = ms.empty() ? 0.0 : ms.back();
  std::printf("one_for_all, %llu members: started in %.2f ms; %llu restarts "
              "in %.3f s, %.3f ms each (p50 %.3f, max %.3f), %.1f restarts/s; "
              "%llu stops; RSS %.1f -> %.1f MiB over the restarts; the group "
              "counted %llu restarts and ended %s\n",
              static_cast<unsigned long long>(members), start_s * 1e3,
              static_cast<unsigned long long>(restarts), total_s, mean_ms, p50,
              max, restarts / total_s, static_cast<unsigned long long>(stops),
              mib(rss_before), mib(rss_after),
              static_cast<unsigned long long>(report.restarts),
              std::string{to_string(report.reason)}.c_str());
  if (report.restarts != restarts || stops != restarts * (members - 1)) {
    std::fprintf(stderr,
                 "bench_groups: expected %llu restarts and %llu stops\n",
                 static_cast<unsigned long long>(restarts),
                 static_cast<unsigned long long>(restarts * (members - 1)));
    return 1;
  }
  result_line{"groups_one_for_all"}
    .add("members", members)
    .add("restarts", restarts)
    .fixed("start_ms", start_s * 1e3, 2)
    .fixed("seconds", total_s, 4)
    .fixed("ms_per_restart", mean_ms, 3)
    .fixed("p50_ms", p50, 3)
    .fixed("max_ms", max, 3)
    .fixed("us_per_member", mean_ms * 1e3 / static_cast<double>(members), 2)
    .fixed("restarts_per_s", restarts / total_s, 1)
    .fixed("rss_growth_mib",
           mib(rss_after > rss_before ? rss_after - rss_before : 0), 1)
    .add("policy", cfg.policy())
    .print();
  return 0;
}

/// The tree's spec: `fanout` groups of `fanout` groups of `leaf` tasks.
group_spec tree_spec(std::size_t fanout, std::size_t leaf) {
  group_spec top;
  top.id = "g";
  std::size_t next_task = 0;
  for (std::size_t i = 0; i < fanout; ++i) {
    auto mid = std::make_shared<group_spec>();
    mid->id = "g" + std::to_string(i);
    for (std::size_t j = 0; j < fanout; ++j) {
      auto low = std::make_shared<group_spec>();
      low->id = mid->id + "." + std::to_string(j);
      for (std::size_t k = 0; k < leaf; ++k)
        low->members.push_back(task_member(next_task++));
      group_member_spec m;
      m.id = low->id;
      m.group = std::move(low);
      mid->members.push_back(std::move(m));
    }
    group_member_spec m;
    m.id = mid->id;
    m.group = std::move(mid);
    top.members.push_back(std::move(m));
  }
  return top;
}

int tree(caf::actor_system& sys, const bench_config& cfg, std::uint64_t members,
         std::uint64_t fanout) {
  if (fanout == 0 || members % (fanout * fanout) != 0) {
    std::fprintf(stderr, "bench_groups: --members must be a multiple of "
                         "--fanout squared\n");
    return 2;
  }
  auto leaf = members / (fanout * fanout);
  auto groups = 1 + fanout + fanout * fanout;
  auto host = sys.spawn(fake_host);
  caf::scoped_actor self{sys};
  // Let the scheduler threads and allocator arenas settle before the
  // baseline (as bench_memory does).
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  auto rss_before = rss_bytes();
  auto heap_before = heap_bytes();
  group_options opts;
  opts.spec = std::make_shared<const group_spec>(tree_spec(fanout, leaf));
  opts.host = caf::actor_cast<group_host_actor>(host);
  opts.parent = caf::actor_cast<group_parent_actor>(self);
  auto rss_spec = rss_bytes();
  auto heap_spec = heap_bytes();
  auto start = bench_clock::now();
  auto group = spawn_group(sys, std::move(opts));
  if (!await_started(self))
    return 1;
  auto start_s = seconds_since(start);
  // Messages still in flight (the last answers) settle.
  std::this_thread::sleep_for(std::chrono::milliseconds{100});
  auto rss_after = rss_bytes();
  auto heap_after = heap_bytes();
  std::uint64_t starts = 0;
  self->request(host, caf::infinite, await_starts_atom::value, members)
    .receive([&](std::uint64_t n) { starts = n; }, [](caf::error&) {});
  auto stop = bench_clock::now();
  auto report = stop_group(self, group);
  auto stop_s = seconds_since(stop);
  std::uint64_t stops = 0;
  self->request(host, caf::infinite, stops_atom::value)
    .receive([&](std::uint64_t n) { stops = n; }, [](caf::error&) {});
  std::printf(
    "tree %llux%llux%llu (%llu groups, %llu task members): started in %.2f "
    "ms, stopped in %.2f ms (ended %s, %llu stops); RSS %.1f -> %.1f -> %.1f "
    "MiB (%.0f B per member, %.0f B of it the spec), heap %.1f -> %.1f -> "
    "%.1f MiB (%.0f B per member)\n",
    static_cast<unsigned long long>(fanout),
    static_cast<unsigned long long>(fanout),
    static_cast<unsigned long long>(leaf),
    static_cast<unsigned long long>(groups),
    static_cast<unsigned long long>(members), start_s * 1e3, stop_s * 1e3,
    std::string{to_string(report.reason)}.c_str(),
    static_cast<unsigned long long>(stops), mib(rss_before), mib(rss_spec),
    mib(rss_after), per(rss_before, rss_after, members),
    per(rss_before, rss_spec, members), mib(heap_before), mib(heap_spec),
    mib(heap_after), per(heap_before, heap_after, members));
  if (starts != members || stops != members ||
      report.reason != group_end::stopped) {
    std::fprintf(stderr, "bench_groups: expected %llu starts and stops\n",
                 static_cast<unsigned long long>(members));
    return 1;
  }
  result_line{"groups_tree"}
    .add("members", members)
    .add("shape", std::to_string(fanout) + "x" + std::to_string(fanout) + "x" +
                    std::to_string(leaf))
    .add("groups", groups)
    .fixed("start_ms", start_s * 1e3, 2)
    .fixed("stop_ms", stop_s * 1e3, 2)
    .fixed("rss_per_member_bytes", per(rss_before, rss_after, members), 0)
    .fixed("alloc_per_member_bytes", per(heap_before, heap_after, members), 0)
    .fixed("spec_rss_per_member_bytes", per(rss_before, rss_spec, members), 0)
    .add("policy", cfg.policy())
    .print();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  auto which = arg_str(argc, argv, "case", "one_for_all");
  bench_config cfg{argc, argv};
  caf::actor_system sys{cfg};
  int rc = 2;
  if (which == "one_for_all" && (arg_u64(argc, argv, "members", 1000) == 0 ||
                                 arg_u64(argc, argv, "restarts", 20) == 0))
    std::fprintf(stderr, "bench_groups: --members and --restarts must be "
                         "positive\n");
  else if (which == "one_for_all")
    rc = one_for_all(sys, cfg, arg_u64(argc, argv, "members", 1000),
                     arg_u64(argc, argv, "restarts", 20));
  else if (which == "tree")
    rc = tree(sys, cfg, arg_u64(argc, argv, "members", 10000),
              arg_u64(argc, argv, "fanout", 10));
  else
    std::fprintf(stderr,
                 "bench_groups: --case must be one_for_all or tree, "
                 "not '%s'\n",
                 which.c_str());
  // The figures are out: leave without tearing the groups down (as
  // bench_memory does).
  std::fflush(stdout);
  std::_Exit(rc);
}

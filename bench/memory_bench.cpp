// Memory per supervised task (issue 6, item 2): `--tasks` task supervisors
// whose first attempt fails at once and which then wait out a long backoff
// (`--backoff-s`, default an hour). Once every task has scheduled its retry,
// reports the growth of the process's resident set size (and of the malloc
// heap) divided by the number of tasks. Everything a parked task holds is in
// it: its supervisor actor and state, its pending backoff timer, and the
// benchmark's own handle to it (8 bytes).
//
// --via=registry submits the tasks to a node's registry instead (default
// node config: 4 attempt slots), as `tasksup serve` does: the figure then
// also holds the registry's own per-task records, and the slots bound how
// many first attempts are in flight at once.
//
// --batch=N starts the tasks N at a time, each batch parked before the next
// (tasks arriving over time) instead of all at once; the default, all at
// once, is the worst burst of first attempts in flight.
//
//   bench_memory [--tasks=100000] [--backoff-s=3600] [--policy=stealing]
//                [--via=supervisors|registry] [--batch=0]

#include "bench_util.hpp"
#include "supervision_harness.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"
#include "tasksup/actors/registry_actor.hpp"

#include "tasksup/supervisor/config.hpp"

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <malloc.h>

#include <cstdio>
#include <future>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

namespace {

std::uint64_t heap_bytes() {
  auto info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

} // namespace

int main(int argc, char** argv) {
  using namespace tasksup;
  using namespace tasksup::bench;
  auto tasks = arg_u64(argc, argv, "tasks", 100000);
  auto backoff_s = static_cast<double>(arg_u64(argc, argv, "backoff-s", 3600));
  auto via = arg_str(argc, argv, "via", "supervisors");
  auto batch = arg_u64(argc, argv, "batch", 0);
  if (via != "supervisors" && via != "registry") {
    std::fprintf(stderr,
                 "bench_memory: --via must be supervisors or "
                 "registry, not '%s'\n",
                 via.c_str());
    return 2;
  }

  latency_recorder rec{tasks, 0};
  auto rt =
    std::make_shared<timing_runtime>(std::make_shared<instant_runtime>(1), rec);
  bench_config cfg{argc, argv};
  parent_counts counts;
  caf::actor_system sys{cfg};
  std::promise<void> parked;
  auto parent =
    sys.spawn(parent_actor, &counts, std::uint64_t{0}, tasks, &parked);
  auto shared_classifier =
    spawn_classifier(sys, *classifier::make(default_classifier_rules()));
  auto shared_backoff = spawn_backoff(sys, 1);
  std::vector<task_supervisor_actor> supervisors;
  supervisors.reserve(tasks);
  // Let the scheduler threads and allocator arenas settle before the
  // baseline.
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  auto rss_before = rss_bytes();
  auto heap_before = heap_bytes();
  auto start = bench_clock::now();
  registry_actor registry;
  if (via == "registry") {
    registry_options ro;
    ro.config = builtin_config();
    ro.runtimes["*"] = rt;
    ro.seed = 1;
    ro.attempt_root = "/tmp/tasksup-bench";
    // Every task's first attempt fails on purpose: the node's shared circuit
    // breaker for the one agent would open after a few and end the rest.
    ro.config.node.breaker.max_failures = std::numeric_limits<int>::max();
    registry = spawn_registry(sys, std::move(ro));
    // Sent before the submits, from the same sender: seen first.
    caf::anon_send(registry, subscribe_atom::value,
                   caf::actor_cast<subscriber_actor>(parent));
    // The first submit waits for its answer: a task the registry refuses
    // would otherwise never park, and the benchmark would wait forever.
    caf::scoped_actor self{sys};
    std::string refused;
    self
      ->request(registry, caf::infinite, submit_atom::value,
                bench_task(0, "bench-agent", 3, backoff_s))
      .receive([](const std::string&) {},
               [&](caf::error& err) { refused = sys.render(err); });
    if (!refused.empty()) {
      std::fprintf(stderr, "bench_memory: the registry refused the task: %s\n",
                   refused.c_str());
      std::_Exit(1);
    }
  }
  auto submit = [&](std::uint64_t i) {
    if (registry) {
      caf::anon_send(registry, submit_atom::value,
                     bench_task(i, "bench-agent", 3, backoff_s));
      return;
    }
    supervisors.push_back(spawn_task_supervisor(
      sys, caf::actor_cast<task_parent_actor>(parent),
      bench_supervisor(i, 3, backoff_s, rt, shared_classifier,
                       shared_backoff)));
  };
  // All at once (the worst burst), or `--batch` at a time, each batch parked
  // before the next starts (tasks arriving over time).
  for (auto i = std::uint64_t{registry ? 1u : 0u}; i < tasks; ++i) {
    if (batch > 0 && i > 0 && i % batch == 0)
      while (counts.retries_scheduled.load() < i)
        std::this_thread::sleep_for(std::chrono::milliseconds{1});
    submit(i);
  }
  // Progress every few seconds: a run of 100,000 tasks takes a while, and a
  // task that never parks shows here rather than as a silent hang.
  auto parked_future = parked.get_future();
  while (parked_future.wait_for(std::chrono::seconds{5}) !=
         std::future_status::ready)
    std::fprintf(
      stderr, "bench_memory: %llu of %llu tasks parked (%llu events)\n",
      static_cast<unsigned long long>(counts.retries_scheduled.load()),
      static_cast<unsigned long long>(tasks),
      static_cast<unsigned long long>(counts.events.load()));
  auto park_s = seconds_since(start);
  // The last workers are still quitting when the last retry is scheduled.
  std::this_thread::sleep_for(std::chrono::milliseconds{500});
  auto rss_after = rss_bytes();
  auto heap_after = heap_bytes();
  auto per_task = [&](std::uint64_t before, std::uint64_t after) {
    return after > before
             ? static_cast<double>(after - before) / static_cast<double>(tasks)
             : 0.0;
  };
  std::printf("%llu tasks parked in backoff after %.2f s; RSS %.1f -> %.1f "
              "MiB, heap %.1f -> %.1f MiB\n",
              static_cast<unsigned long long>(tasks), park_s,
              static_cast<double>(rss_before) / 1048576.0,
              static_cast<double>(rss_after) / 1048576.0,
              static_cast<double>(heap_before) / 1048576.0,
              static_cast<double>(heap_after) / 1048576.0);
  result_line{"memory"}
    .add("tasks", tasks)
    .fixed("backoff_s", backoff_s, 0)
    .add("policy", cfg.policy())
    .add("via", via)
    .add("batch", batch)
    .fixed("park_seconds", park_s, 2)
    .fixed("rss_before_mib", static_cast<double>(rss_before) / 1048576.0, 1)
    .fixed("rss_after_mib", static_cast<double>(rss_after) / 1048576.0, 1)
    .fixed("rss_per_task_bytes", per_task(rss_before, rss_after), 0)
    .fixed("heap_per_task_bytes", per_task(heap_before, heap_after), 0)
    .print();
  // The pending backoff timers would keep the actor system alive for the
  // whole backoff; the figures are out, so leave without tearing down.
  std::_Exit(0);
}

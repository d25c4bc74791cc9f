// Memory per supervised task (issue 6, item 2): `--tasks` task supervisors
// whose first attempt fails at once and which then wait out a long backoff
// (`--backoff-s`, default an hour). Once every task has scheduled its retry,
// reports the growth of the process's resident set size (and of the malloc
// heap) divided by the number of tasks. Everything a parked task holds is in
// it: its supervisor actor and state, its pending backoff timer, and the
// benchmark's own handle to it (8 bytes).
//
//   bench_memory [--tasks=100000] [--backoff-s=3600] [--policy=stealing]

#include "bench_util.hpp"
#include "supervision_harness.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <malloc.h>

#include <cstdio>
#include <future>
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

  latency_recorder rec{tasks, 0};
  auto rt =
    std::make_shared<timing_runtime>(std::make_shared<instant_runtime>(1), rec);
  bench_config cfg{argc, argv};
  parent_counts counts;
  caf::actor_system sys{cfg};
  std::promise<void> parked;
  auto parent =
    sys.spawn(parent_actor, &counts, std::uint64_t{0}, tasks, &parked);
  auto classifier_actor =
    spawn_classifier(sys, *classifier::make(default_classifier_rules()));
  auto backoff_actor = spawn_backoff(sys, 1);
  std::vector<caf::actor> supervisors;
  supervisors.reserve(tasks);
  // Let the scheduler threads and allocator arenas settle before the
  // baseline.
  std::this_thread::sleep_for(std::chrono::milliseconds{200});
  auto rss_before = rss_bytes();
  auto heap_before = heap_bytes();
  auto start = bench_clock::now();
  for (std::uint64_t i = 0; i < tasks; ++i) {
    supervisor_options opts;
    opts.task = bench_task(i, "bench-agent", 3, backoff_s);
    opts.runtime = rt;
    opts.classifier = classifier_actor;
    opts.backoff = backoff_actor;
    opts.seed = i + 1;
    opts.attempt_root = "/tmp/tasksup-bench";
    supervisors.push_back(spawn_task_supervisor(sys, parent, std::move(opts)));
  }
  parked.get_future().wait();
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

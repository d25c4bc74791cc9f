// Supervision throughput and latency (issue 6, item 1): `--tasks` task
// supervisors run at once on an in-memory runtime whose attempts end at once;
// each task fails `--failures` times (exit 1, classified retryable, zero
// backoff) and then succeeds. Reports attempts per second over the whole run
// (spawning the supervisors included) and the supervision latency p50/p99/max
// from an attempt's exit to the same task's next attempt start.
//
//   bench_supervision [--tasks=1000] [--failures=3]
//                     [--runtime=instant|scripted] [--helpers=shared|own]
//                     [--policy=stealing|sharing|handoff] [--threads=0]
//                     [--services=none|parent]
//
// --runtime=scripted uses the library's scripted_runtime (which records every
// call) instead of the benchmark's record-free instant runtime.
// --helpers=shared gives every supervisor the same classifier and backoff
// actors (as a node's registry does); own lets each spawn its own.
// --services=parent makes the parent the supervisors' node services, as a
// node's registry is: each attempt asks it for a permit (slot, breaker,
// retry budget; granted at once) and reports its agent's result, the
// message pattern `bench_caf_floor` has; none (the default) runs them
// standalone, without those messages.

#include "bench_util.hpp"
#include "supervision_harness.hpp"

#include "tasksup/actors/backoff_actor.hpp"
#include "tasksup/actors/classifier_actor.hpp"

#include "tasksup/runtime/scripted_runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace tasksup;
  using namespace tasksup::bench;
  auto tasks = arg_u64(argc, argv, "tasks", 1000);
  auto failures = static_cast<int>(arg_u64(argc, argv, "failures", 3));
  auto runtime_name = arg_str(argc, argv, "runtime", "instant");
  auto helpers = arg_str(argc, argv, "helpers", "shared");
  auto services = arg_str(argc, argv, "services", "none");
  auto expected_attempts = tasks * static_cast<std::uint64_t>(failures + 1);

  latency_recorder rec{tasks, tasks * static_cast<std::uint64_t>(failures)};
  std::shared_ptr<runtime::container_runtime> rt;
  if (runtime_name == "scripted") {
    auto scripted = std::make_shared<runtime::scripted_runtime>();
    std::vector<runtime::scripted_step> steps(
      static_cast<std::size_t>(failures));
    for (auto& s : steps)
      s.exit_code = 1;
    steps.emplace_back();
    scripted->script("bench", std::move(steps));
    rt = std::make_shared<timing_runtime>(scripted, rec);
  } else {
    rt = std::make_shared<instant_runtime>(failures, &rec);
  }

  bench_config cfg{argc, argv};
  double elapsed = 0;
  parent_counts counts;
  {
    caf::actor_system sys{cfg};
    std::promise<void> done;
    auto parent =
      sys.spawn(parent_actor, &counts, tasks, std::uint64_t{0}, &done);
    classifier_actor shared_classifier;
    backoff_actor shared_backoff;
    if (helpers == "shared") {
      shared_classifier =
        spawn_classifier(sys, *classifier::make(default_classifier_rules()));
      shared_backoff = spawn_backoff(sys, 1);
    }
    auto start = bench_clock::now();
    for (std::uint64_t i = 0; i < tasks; ++i) {
      spawn_task_supervisor(
        sys, caf::actor_cast<task_parent_actor>(parent),
        bench_supervisor(i, failures, 0.0, rt, shared_classifier,
                         shared_backoff,
                         services == "parent" ? parent : caf::actor{}));
    }
    done.get_future().wait();
    elapsed = seconds_since(start);
    caf::anon_send_exit(parent, caf::exit_reason::user_shutdown);
    if (shared_classifier) {
      caf::anon_send_exit(shared_classifier, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(shared_backoff, caf::exit_reason::user_shutdown);
    }
  }
  auto attempts = rec.attempts();
  auto samples = rec.samples();
  if (attempts != expected_attempts || counts.failed.load() != 0) {
    std::fprintf(stderr,
                 "bench_supervision: expected %llu attempts and no failed "
                 "task, saw %llu attempts, %llu failed\n",
                 static_cast<unsigned long long>(expected_attempts),
                 static_cast<unsigned long long>(attempts),
                 static_cast<unsigned long long>(counts.failed.load()));
    return 1;
  }
  auto p50 = percentile(samples, 0.50) / 1e3;
  auto p99 = percentile(samples, 0.99) / 1e3;
  auto max = samples.empty() ? 0.0 : samples.back() / 1e3;
  std::printf("%llu tasks x %d failures: %llu attempts in %.3f s, "
              "%llu events\n",
              static_cast<unsigned long long>(tasks), failures,
              static_cast<unsigned long long>(attempts), elapsed,
              static_cast<unsigned long long>(counts.events.load()));
  result_line{"supervision"}
    .add("tasks", tasks)
    .add("failures", failures)
    .add("runtime", runtime_name)
    .add("helpers", helpers)
    .add("services", services)
    .add("policy", cfg.policy())
    .add("threads", cfg.threads())
    .add("attempts", attempts)
    .fixed("seconds", elapsed, 3)
    .fixed("attempts_per_s", static_cast<double>(attempts) / elapsed, 0)
    .fixed("latency_p50_us", p50, 1)
    .fixed("latency_p99_us", p99, 1)
    .fixed("latency_max_us", max, 1)
    .print();
  return 0;
}

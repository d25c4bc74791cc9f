// Process runtime overhead (issue 6, item 3): one task whose agent is
// `--binary` (/bin/false) restarted `--restarts` times with zero backoff under
// the process runtime, against a plain posix_spawn + waitpid loop of the same
// binary, the same number of times, in the same run. The variants take turns
// in `--rounds` rounds (one task per round). Also reported: the process runtime
// driven directly (start, wait for the exit, repeat; no actors), which
// separates the runtime's own cost from the supervision around it, and a
// fork + execve loop, for comparison with the clone(CLONE_VM|CLONE_VFORK)
// the process runtime (like posix_spawn) uses.
//
//   bench_process [--restarts=1000] [--rounds=5] [--binary=/bin/false]
//                 [--tmp=/tmp] [--policy=stealing]

#include "bench_util.hpp"
#include "spawn_loop.hpp"
#include "supervision_harness.hpp"

#include "supervisor/runtime/process_runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include <stdlib.h>

namespace {

using namespace tasksup;
using namespace tasksup::bench;

/// Runs `n` attempts of `binary` one after another straight on `rt`.
double direct_loop(runtime::container_runtime& rt, const std::string& binary,
                   const std::string& root, std::uint64_t n) {
  std::mutex mtx;
  std::condition_variable cv;
  auto start = bench_clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    bool done = false;
    runtime::attempt_spec spec;
    spec.task_id = "direct";
    spec.attempt = static_cast<int>(i + 1);
    spec.agent_id = "bench";
    spec.argv = {binary};
    spec.attempt_dir = root + "/direct/attempt-" + std::to_string(i + 1);
    runtime::attempt_callbacks cb;
    cb.on_line = [](std::string_view) {};
    cb.on_exit = [&](attempt_outcome) {
      std::lock_guard<std::mutex> guard{mtx};
      done = true;
      cv.notify_one();
    };
    auto handle = rt.start(std::move(spec), std::move(cb));
    std::unique_lock<std::mutex> lock{mtx};
    cv.wait(lock, [&] { return done; });
  }
  return seconds_since(start);
}

} // namespace

int main(int argc, char** argv) {
  auto restarts = arg_u64(argc, argv, "restarts", 1000);
  auto binary = arg_str(argc, argv, "binary", "/bin/false");
  auto rounds = std::max<std::uint64_t>(arg_u64(argc, argv, "rounds", 5), 1);
  // Each round runs every variant for its share of the attempts, so load
  // from elsewhere on the machine falls on all of them alike.
  auto per_round = std::max<std::uint64_t>((restarts + 1) / rounds, 2);
  auto attempts = per_round * rounds;
  // Where the attempt directories go (each attempt creates three
  // directories and a log file there).
  auto tmp = arg_str(argc, argv, "tmp", "/tmp");
  auto root_template = tmp + "/tasksup-bench-process-XXXXXX";
  if (mkdtemp(root_template.data()) == nullptr) {
    std::perror("bench_process: mkdtemp");
    return 1;
  }
  std::string root = root_template;

  latency_recorder rec{rounds, attempts};
  auto process_rt = runtime::make_process_runtime();
  auto rt = std::make_shared<timing_runtime>(process_rt, rec);
  bench_config cfg{argc, argv};
  double loop_s = 0;
  double fork_s = 0;
  double direct_s = 0;
  double task_s = 0;
  bool ok = true;
  {
    caf::actor_system sys{cfg};
    for (std::uint64_t r = 0; r < rounds; ++r) {
      auto loop = spawn_loop(binary, per_round);
      auto forked = fork_loop(binary, per_round);
      ok = ok && loop.ok && forked.ok;
      loop_s += loop.seconds;
      fork_s += forked.seconds;
      direct_s += direct_loop(*process_rt, binary,
                              root + "/r" + std::to_string(r), per_round);
      parent_counts counts;
      std::promise<void> done;
      auto parent = sys.spawn(parent_actor, &counts, std::uint64_t{1},
                              std::uint64_t{0}, &done);
      supervisor_options opts;
      opts.task = bench_task(r, binary, static_cast<int>(per_round - 1), 0.0);
      opts.runtime = rt;
      opts.seed = r + 1;
      opts.attempt_root = root;
      auto start = bench_clock::now();
      spawn_task_supervisor(sys, parent, std::move(opts));
      done.get_future().wait();
      task_s += seconds_since(start);
      caf::anon_send_exit(parent, caf::exit_reason::user_shutdown);
    }
  }
  process_rt.reset();
  std::filesystem::remove_all(root);

  if (!ok || rec.attempts() != attempts) {
    std::fprintf(stderr,
                 "bench_process: expected %llu supervised attempts, saw %llu "
                 "(loops ok: %d)\n",
                 static_cast<unsigned long long>(attempts),
                 static_cast<unsigned long long>(rec.attempts()), ok);
    return 1;
  }
  auto n = static_cast<double>(attempts);
  auto loop_us = loop_s / n * 1e6;
  auto task_us = task_s / n * 1e6;
  auto direct_us = direct_s / n * 1e6;
  auto fork_us = fork_s / n * 1e6;
  auto samples = rec.samples();
  auto p50 = percentile(samples, 0.50) / 1e3;
  auto p99 = percentile(samples, 0.99) / 1e3;
  std::printf("%llu attempts of %s in %llu rounds: posix_spawn loop %.1f us, "
              "fork+exec loop %.1f us, runtime direct %.1f us, supervised "
              "task %.1f us per attempt\n",
              static_cast<unsigned long long>(attempts), binary.c_str(),
              static_cast<unsigned long long>(rounds), loop_us, fork_us,
              direct_us, task_us);
  result_line{"process"}
    .add("binary", binary)
    .add("attempts", attempts)
    .add("tmp", tmp)
    .add("policy", cfg.policy())
    .fixed("plain_loop_us", loop_us, 1)
    .fixed("fork_exec_loop_us", fork_us, 1)
    .fixed("runtime_direct_us", direct_us, 1)
    .fixed("supervised_us", task_us, 1)
    .fixed("ratio", task_us / loop_us, 2)
    .fixed("runtime_direct_ratio", direct_us / loop_us, 2)
    .fixed("supervision_latency_p50_us", p50, 1)
    .fixed("supervision_latency_p99_us", p99, 1)
    .print();
  return 0;
}

// Process runtime overhead (issue 6, item 3): one task whose agent is
// `--binary` (/bin/false) restarted `--restarts` times with zero backoff under
// the process runtime, against a plain posix_spawn + waitpid loop of the same
// binary, the same number of times, in the same run. The variants take turns
// in `--rounds` rounds (one task per round). Also reported: the process runtime
// driven directly (start, wait for the exit, repeat; no actors), which
// separates the runtime's own cost from the supervision around it; a
// fork + execve loop, for comparison with the clone(CLONE_VM|CLONE_VFORK)
// the process runtime (like posix_spawn) uses; and an "attempt work" loop:
// posix_spawn doing, one attempt after another on one thread, what the
// runtime must do per attempt (fresh attempt directories and output.log, a
// new process group, stdin from /dev/null, output through a pipe into the
// log, default signals, no leaked descriptors, the artifact listing). The
// plain loop does none of that; the attempt work loop is the floor for code
// that keeps the runtime's promises, without its reactor thread.
//
//   bench_process [--restarts=1000] [--rounds=5] [--binary=/bin/false]
//                 [--tmp=/tmp] [--policy=stealing] [--shim=serve|attempt]
//                 [--variants=plain,fork,work,direct,supervised]
//
// `--shim=serve` (the runtime's default) runs a task's attempts under one
// long-lived tasksup-shim; `--shim=attempt` starts a shim per attempt (the
// runtime before the serving shim), for a before/after in one build.
//
// `--variants` runs a subset (e.g. `--variants=direct` under strace or perf);
// ratios are printed when both of their variants ran.

#include "bench_util.hpp"
#include "spawn_loop.hpp"
#include "supervision_harness.hpp"

#include "tasksup/runtime/process_runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using namespace tasksup;
using namespace tasksup::bench;

/// Closes the descriptor on destruction.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Runs `binary` `n` times with posix_spawn, one attempt after another on
/// this thread, doing per attempt what the process runtime promises: the
/// attempt directory with fresh `artifacts/` and `workspace/` and an
/// `output.log` under `root`, the runtime's environment (its inherited
/// variables and the three TASKSUP_* ones), a new process group, stdin from
/// /dev/null, stdout and stderr through a pipe copied into the log until EOF,
/// default signal dispositions and an empty mask, no descriptor but 0-2
/// inherited, the rest of the group killed once the agent exited, and the
/// artifacts directory listed.
spawn_loop_result attempt_work_loop(const std::string& binary,
                                    const std::string& root, std::uint64_t n) {
  spawn_loop_result result;
  fd_guard devnull{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (devnull.fd < 0 || ec)
    return result;
  std::vector<std::string> base_env;
  for (auto& name : runtime::process_runtime_options{}.inherited_env)
    if (auto* value = std::getenv(name.c_str()))
      base_env.push_back(name + "=" + value);
  char* argv[] = {const_cast<char*>(binary.c_str()), nullptr};
  std::vector<char> buf(64 * 1024);
  auto start = bench_clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    auto attempt = std::to_string(i + 1);
    auto dir = root + "/attempt-" + attempt;
    auto artifacts = dir + "/artifacts";
    auto workspace = dir + "/workspace";
    if (::mkdir(dir.c_str(), 0777) != 0 ||
        ::mkdir(artifacts.c_str(), 0777) != 0 ||
        ::mkdir(workspace.c_str(), 0777) != 0)
      return result;
    fd_guard log{::open((dir + "/output.log").c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    int out[2];
    if (log.fd < 0 || ::pipe2(out, O_CLOEXEC) != 0)
      return result;
    fd_guard out_r{out[0]};
    fd_guard out_w{out[1]};
    auto env_strings = base_env;
    env_strings.push_back("TASKSUP_TASK_ID=work");
    env_strings.push_back("TASKSUP_ATTEMPT=" + attempt);
    env_strings.push_back("TASKSUP_ARTIFACTS_DIR=" + artifacts);
    std::vector<char*> envp;
    for (auto& e : env_strings)
      envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                      POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSIGMASK);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t all;
    sigset_t none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, devnull.fd, 0);
    posix_spawn_file_actions_adddup2(&actions, out_w.fd, 1);
    posix_spawn_file_actions_adddup2(&actions, out_w.fd, 2);
    posix_spawn_file_actions_addchdir_np(&actions, workspace.c_str());
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    pid_t pid = 0;
    auto rc =
      posix_spawn(&pid, binary.c_str(), &actions, &attr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
      return result;
    ::close(std::exchange(out_w.fd, -1));
    for (;;) {
      auto got = ::read(out_r.fd, buf.data(), buf.size());
      if (got > 0 &&
          ::write(log.fd, buf.data(), static_cast<std::size_t>(got)) == got)
        continue;
      if (got < 0 && errno == EINTR)
        continue;
      break;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
    }
    ::kill(-pid, SIGKILL);
    if (auto* d = ::opendir(artifacts.c_str())) {
      std::vector<std::string> found;
      while (auto* e = ::readdir(d))
        if (e->d_type == DT_REG)
          found.push_back(artifacts + "/" + e->d_name);
      ::closedir(d);
    }
  }
  result.seconds = seconds_since(start);
  result.ok = true;
  return result;
}

/// Runs `n` attempts of `binary` one after another straight on `rt`.
double direct_loop(runtime::container_runtime& rt, const std::string& binary,
                   const std::string& root, std::uint64_t n) {
  auto start = bench_clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    runtime::attempt_spec spec;
    spec.task_id = "direct";
    spec.attempt = static_cast<int>(i + 1);
    spec.agent_id = "bench";
    spec.argv = {binary};
    spec.attempt_dir = root + "/direct/attempt-" + std::to_string(i + 1);
    // A promise, not a condition variable notified under its mutex: that
    // would wake this thread only to block it again on the mutex, a cost of
    // the harness rather than of the runtime.
    auto exited = std::make_shared<std::promise<void>>();
    auto done = exited->get_future();
    runtime::attempt_callbacks cb;
    cb.on_line = [](runtime::output_stream, std::string_view) { return true; };
    cb.on_exit = [exited](attempt_outcome) { exited->set_value(); };
    auto handle = rt.start(std::move(spec), std::move(cb));
    done.wait();
  }
  return seconds_since(start);
}

} // namespace

/// The variants, in the order each round runs them.
const std::vector<std::string> all_variants = {"plain", "fork", "work",
                                               "direct", "supervised"};

int main(int argc, char** argv) {
  auto restarts = arg_u64(argc, argv, "restarts", 1000);
  auto binary = arg_str(argc, argv, "binary", "/bin/false");
  auto rounds = std::max<std::uint64_t>(arg_u64(argc, argv, "rounds", 5), 1);
  std::set<std::string> variants;
  {
    auto list =
      arg_str(argc, argv, "variants", "plain,fork,work,direct,supervised");
    std::size_t begin = 0;
    while (begin <= list.size()) {
      auto end = std::min(list.find(',', begin), list.size());
      auto name = list.substr(begin, end - begin);
      if (std::find(all_variants.begin(), all_variants.end(), name) ==
          all_variants.end()) {
        std::fprintf(stderr,
                     "bench_process: --variants: unknown variant '%s' "
                     "(plain, fork, work, direct, supervised)\n",
                     name.c_str());
        return 2;
      }
      variants.insert(name);
      begin = end + 1;
    }
  }
  auto runs = [&](const char* name) { return variants.count(name) > 0; };
  // Each round runs every variant for its share of the attempts, so load
  // from elsewhere on the machine falls on all of them alike.
  auto per_round = std::max<std::uint64_t>((restarts + 1) / rounds, 2);
  auto attempts = per_round * rounds;
  // Where the attempt directories go (each attempt creates three
  // directories and a log file there).
  auto tmp = arg_str(argc, argv, "tmp", "/tmp");
  // In a directory marked as a top directory, as tasksup's own work dirs
  // are: on ext4 each run's directories then start in a fresh block group
  // instead of after every inode earlier runs deleted (§3).
  runtime::make_top_directory(tmp + "/tasksup-bench");
  auto root_template = tmp + "/tasksup-bench/process-XXXXXX";
  if (mkdtemp(root_template.data()) == nullptr) {
    std::perror("bench_process: mkdtemp");
    return 1;
  }
  std::string root = root_template;

  latency_recorder rec{rounds, attempts};
  runtime::process_runtime_options rt_opts;
  auto shim_mode = arg_str(argc, argv, "shim", "serve");
  if (shim_mode == "attempt") {
    rt_opts.shim_idle_timeout = std::chrono::milliseconds{0};
  } else if (shim_mode != "serve") {
    std::fprintf(stderr,
                 "bench_process: --shim: 'serve' or 'attempt', not "
                 "'%s'\n",
                 shim_mode.c_str());
    return 1;
  }
  auto process_rt = runtime::make_process_runtime(std::move(rt_opts));
  auto rt = std::make_shared<timing_runtime>(process_rt, rec);
  bench_config cfg{argc, argv};
  double loop_s = 0;
  double fork_s = 0;
  double work_s = 0;
  double direct_s = 0;
  double task_s = 0;
  bool ok = true;
  {
    // Only with the supervised variant: the actor system's idle workers
    // poll, which the other variants would otherwise pay for as well.
    std::optional<caf::actor_system> sys;
    if (runs("supervised"))
      sys.emplace(cfg);
    for (std::uint64_t r = 0; r < rounds; ++r) {
      auto round_dir = root + "/r" + std::to_string(r);
      if (runs("plain")) {
        auto loop = spawn_loop(binary, per_round);
        ok = ok && loop.ok;
        loop_s += loop.seconds;
      }
      if (runs("fork")) {
        auto forked = fork_loop(binary, per_round);
        ok = ok && forked.ok;
        fork_s += forked.seconds;
      }
      if (runs("work")) {
        auto work = attempt_work_loop(binary, round_dir + "/work", per_round);
        ok = ok && work.ok;
        work_s += work.seconds;
      }
      if (runs("direct"))
        direct_s += direct_loop(*process_rt, binary, round_dir, per_round);
      if (!runs("supervised"))
        continue;
      parent_counts counts;
      std::promise<void> done;
      auto parent = sys->spawn(parent_actor, &counts, std::uint64_t{1},
                               std::uint64_t{0}, &done);
      supervisor_options opts;
      opts.task = bench_task(r, binary, static_cast<int>(per_round - 1), 0.0);
      opts.runtime = rt;
      opts.seed = r + 1;
      opts.attempt_root = root;
      auto start = bench_clock::now();
      spawn_task_supervisor(*sys, caf::actor_cast<task_parent_actor>(parent),
                            std::move(opts));
      done.get_future().wait();
      task_s += seconds_since(start);
      caf::anon_send_exit(parent, caf::exit_reason::user_shutdown);
    }
  }
  process_rt.reset();
  std::filesystem::remove_all(root);

  auto expected_supervised = runs("supervised") ? attempts : 0;
  if (!ok || rec.attempts() != expected_supervised) {
    std::fprintf(stderr,
                 "bench_process: expected %llu supervised attempts, saw %llu "
                 "(loops ok: %d)\n",
                 static_cast<unsigned long long>(expected_supervised),
                 static_cast<unsigned long long>(rec.attempts()), ok);
    return 1;
  }
  auto n = static_cast<double>(attempts);
  auto per_attempt_us = [n](double s) { return s / n * 1e6; };
  auto loop_us = per_attempt_us(loop_s);
  auto fork_us = per_attempt_us(fork_s);
  auto work_us = per_attempt_us(work_s);
  auto direct_us = per_attempt_us(direct_s);
  auto task_us = per_attempt_us(task_s);
  std::printf("%llu attempts of %s in %llu rounds, per attempt (us):",
              static_cast<unsigned long long>(attempts), binary.c_str(),
              static_cast<unsigned long long>(rounds));
  result_line line{"process"};
  line.add("binary", binary)
    .add("attempts", attempts)
    .add("tmp", tmp)
    .add("policy", cfg.policy())
    .add("shim", shim_mode);
  auto report = [&](const char* variant, const char* label, const char* key,
                    double us) {
    if (!runs(variant))
      return;
    std::printf(" %s %.1f", label, us);
    line.fixed(key, us, 1);
  };
  report("plain", "posix_spawn loop", "plain_loop_us", loop_us);
  report("fork", "fork+exec loop", "fork_exec_loop_us", fork_us);
  report("work", "attempt work loop", "attempt_work_loop_us", work_us);
  report("direct", "runtime direct", "runtime_direct_us", direct_us);
  report("supervised", "supervised task", "supervised_us", task_us);
  std::printf("\n");
  if (runs("plain") && runs("supervised"))
    line.fixed("ratio", task_us / loop_us, 2);
  if (runs("plain") && runs("direct"))
    line.fixed("runtime_direct_ratio", direct_us / loop_us, 2);
  if (runs("work") && runs("direct"))
    line.fixed("runtime_direct_vs_work", direct_us / work_us, 2);
  if (runs("supervised")) {
    auto samples = rec.samples();
    line.fixed("supervision_latency_p50_us", percentile(samples, 0.50) / 1e3, 1)
      .fixed("supervision_latency_p99_us", percentile(samples, 0.99) / 1e3, 1);
  }
  line.print();
  return 0;
}

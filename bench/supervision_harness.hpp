#pragma once

// What the supervision benchmarks share: an actor system set up like a node,
// a parent actor that counts what the task supervisors report, a runtime
// decorator that timestamps attempt starts and exits, and an in-memory
// runtime whose attempts end at once.

#include "bench_util.hpp"

#include "tasksup/actors/handoff_scheduler.hpp"
#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/task_supervisor_actor.hpp"

#include "tasksup/runtime/runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tasksup::bench {

/// Nanoseconds on the benchmark clock.
inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           bench_clock::now().time_since_epoch())
    .count();
}

/// The index encoded in a benchmark task id ("t<index>").
inline std::size_t task_index(const std::string& task_id) {
  return static_cast<std::size_t>(
    std::strtoull(task_id.c_str() + 1, nullptr, 10));
}

/// The benchmark's task id for `index`.
inline std::string task_name(std::size_t index) {
  return "t" + std::to_string(index);
}

/// Per-attempt supervision latency: from the runtime reporting an attempt's
/// exit to the runtime being asked to start the same task's next attempt.
/// Everything the supervisor does in between (worker report, events,
/// classification, backoff, the next worker's spawn) is inside it.
class latency_recorder {
public:
  /// Room for `tasks` tasks and `max_samples` samples.
  latency_recorder(std::size_t tasks, std::size_t max_samples)
    : last_exit_(tasks, -1), samples_(max_samples) {}

  /// An attempt of task `index` is being started now. Calls for one task are
  /// ordered by the messages between its actors, so no lock is needed.
  void started(std::size_t index) {
    started_.fetch_add(1, std::memory_order_relaxed);
    if (index >= last_exit_.size() || last_exit_[index] < 0)
      return;
    auto slot = next_.fetch_add(1, std::memory_order_relaxed);
    if (slot < samples_.size())
      samples_[slot] = static_cast<double>(now_ns() - last_exit_[index]);
  }

  /// An attempt of task `index` exits now.
  void exited(std::size_t index) {
    if (index < last_exit_.size())
      last_exit_[index] = now_ns();
  }

  /// Attempts started so far.
  std::uint64_t attempts() const {
    return started_.load(std::memory_order_relaxed);
  }

  /// The samples taken (nanoseconds); call once the run is over.
  std::vector<double> samples() const {
    auto n = std::min<std::size_t>(next_.load(), samples_.size());
    return {samples_.begin(), samples_.begin() + static_cast<long>(n)};
  }

private:
  std::vector<std::int64_t> last_exit_;
  std::vector<double> samples_;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::uint64_t> started_{0};
};

/// Wraps a runtime and tells a latency recorder when attempts start and exit.
class timing_runtime : public runtime::container_runtime {
public:
  /// Decorates `inner`; `rec` must outlive every attempt.
  timing_runtime(std::shared_ptr<runtime::container_runtime> inner,
                 latency_recorder& rec)
    : inner_(std::move(inner)), rec_(rec) {}

  std::string_view name() const noexcept override { return inner_->name(); }

  std::shared_ptr<runtime::attempt_handle>
  start(runtime::attempt_spec spec, runtime::attempt_callbacks cb) override {
    auto index = task_index(spec.task_id);
    rec_.started(index);
    auto on_exit = std::move(cb.on_exit);
    cb.on_exit = [this, index, on_exit](attempt_outcome out) {
      rec_.exited(index);
      on_exit(std::move(out));
    };
    return inner_->start(std::move(spec), std::move(cb));
  }

private:
  std::shared_ptr<runtime::container_runtime> inner_;
  latency_recorder& rec_;
};

/// The handle of an attempt that has already ended.
class ended_attempt : public runtime::attempt_handle {
public:
  void stop(std::chrono::milliseconds) override {}
  void kill() override {}
  std::string id() const override { return "instant"; }
};

/// A runtime whose attempts end as soon as they start, without output: the
/// first `failures` attempts of every task exit 1, later ones exit 0. It
/// keeps no record (the library's scripted runtime records every call, which
/// a benchmark of a million attempts should not pay for), and tells `rec`
/// (when given) of each start and exit itself: wrapped in `timing_runtime`,
/// the wrapping of every attempt's callback cost ~2,800 instructions per
/// attempt that no real runtime pays (BENCHMARKS.md §9).
class instant_runtime : public runtime::container_runtime {
public:
  /// Attempts numbered up to `failures` fail.
  explicit instant_runtime(int failures, latency_recorder* rec = nullptr)
    : failures_(failures), rec_(rec) {}

  std::string_view name() const noexcept override { return "instant"; }

  std::shared_ptr<runtime::attempt_handle>
  start(runtime::attempt_spec spec, runtime::attempt_callbacks cb) override {
    auto index = rec_ ? task_index(spec.task_id) : 0;
    if (rec_)
      rec_->started(index);
    attempt_outcome out;
    out.exit_code = spec.attempt <= failures_ ? 1 : 0;
    if (rec_)
      rec_->exited(index);
    cb.on_exit(std::move(out));
    return std::make_shared<ended_attempt>();
  }

private:
  int failures_;
  latency_recorder* rec_;
};

/// What the parent of the benchmark's task supervisors has seen.
struct parent_counts {
  std::atomic<std::uint64_t> escalated{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> retries_scheduled{0};
  std::atomic<std::uint64_t> events{0};
};

/// The parent of every benchmark task supervisor (standing in for a
/// registry): it counts escalations and events, drops the events, grants
/// permits at once (when given to supervisors as their services), and fulfils
/// `done` once `escalations` results or `retries` retry_scheduled events (0:
/// not a condition) have arrived.
inline caf::behavior parent_actor(caf::event_based_actor*,
                                  parent_counts* counts,
                                  std::uint64_t escalations,
                                  std::uint64_t retries,
                                  std::promise<void>* done) {
  auto fulfilled = std::make_shared<bool>(false);
  auto check = [=] {
    if (*fulfilled)
      return;
    if ((escalations > 0 && counts->escalated.load() >= escalations) ||
        (retries > 0 && counts->retries_scheduled.load() >= retries)) {
      *fulfilled = true;
      done->set_value();
    }
  };
  auto count = [=](const event& ev) {
    counts->events.fetch_add(1, std::memory_order_relaxed);
    if (ev.kind == event_kind::retry_scheduled) {
      counts->retries_scheduled.fetch_add(1, std::memory_order_relaxed);
      check();
    }
  };
  return {
    [=](event_atom, const event& ev) { count(ev); },
    // Batches, from supervisors that have the parent as their services.
    [=](event_atom, const std::vector<event>& evs) {
      for (auto& ev : evs)
        count(ev);
    },
    // A node's services, for supervisors given the parent as theirs
    // (`--services`): every attempt permitted at once, reports dropped.
    [](permit_atom, const permit_request&) { return permit_reply{}; },
    [](agent_result_atom, const std::string&, bool) {},
    [](release_atom, const std::string&) {},
    [](reclaim_atom, const std::string&) {},
    [=](escalate_atom, const task_result& r) {
      if (r.outcome != task_outcome::succeeded)
        counts->failed.fetch_add(1, std::memory_order_relaxed);
      counts->escalated.fetch_add(1, std::memory_order_relaxed);
      check();
    },
  };
}

/// An actor system configured like a tasksup node, with the scheduler policy
/// ("stealing", CAF's default, "sharing", or "handoff", the node's own:
/// tasksup/actors/handoff_scheduler.hpp) and thread count from the command
/// line (`--policy=`, `--threads=`, 0 = CAF's default).
class bench_config : public caf::actor_system_config {
public:
  /// Reads the scheduler options from argv.
  bench_config(int argc, char** argv) {
    register_protocol(*this);
    policy_ = arg_str(argc, argv, "policy", "stealing");
    threads_ = arg_u64(argc, argv, "threads", 0);
    if (policy_ == "handoff")
      load<handoff_coordinator>();
    else
      set("scheduler.policy", caf::atom_from_string(policy_));
    if (threads_ > 0)
      set("scheduler.max-threads", static_cast<std::size_t>(threads_));
  }

  /// The scheduler policy's name.
  const std::string& policy() const { return policy_; }

  /// The worker thread count asked for (0 = CAF's default).
  std::uint64_t threads() const { return threads_; }

private:
  std::string policy_;
  std::uint64_t threads_ = 0;
};

/// A task for the benchmarks: one agent, `max_retries` retries, zero or
/// `backoff_s` standard backoff, every class retried.
inline task_spec bench_task(std::size_t index, const std::string& agent_cli,
                            int max_retries, double backoff_s) {
  task_spec task;
  task.id = task_name(index);
  task.prompt = "bench";
  agent_selection sel;
  agent_spec agent;
  agent.agent_id = "bench";
  agent.agent_cli = agent_cli;
  agent.prompt_as_argument = false;
  sel.agents.push_back(agent);
  task.selection = std::move(sel);
  task.supervisor.max_retries_per_agent = max_retries;
  task.supervisor.max_total_attempts = max_retries + 1;
  task.supervisor.backoff_base_seconds = backoff_s;
  task.supervisor.enable_fallback = false;
  return task;
}

/// A benchmark task supervisor's options: `bench_task(index, ...)` with zero
/// or `backoff_s` backoff on `rt`, asking the shared `classifier` and
/// `backoff` actors (null: the supervisor spawns its own) and `services` for
/// each attempt's permit (null: none, as a standalone supervisor), seeded
/// by index. With services the events come in batches, as to a registry.
inline supervisor_options
bench_supervisor(std::size_t index, int max_retries, double backoff_s,
                 std::shared_ptr<runtime::container_runtime> rt,
                 classifier_actor classifier, backoff_actor backoff,
                 caf::actor services = {}) {
  supervisor_options opts;
  opts.event_batches = static_cast<bool>(services);
  opts.services = caf::actor_cast<node_services_actor>(std::move(services));
  opts.task = bench_task(index, "bench-agent", max_retries, backoff_s);
  opts.runtime = std::move(rt);
  opts.classifier = std::move(classifier);
  opts.backoff = std::move(backoff);
  opts.seed = index + 1;
  opts.attempt_root = "/tmp/tasksup-bench";
  return opts;
}

} // namespace tasksup::bench

#pragma once

// The scheduler policy of a tasksup node: CAF's work sharing (one queue for
// all worker threads) without its thread hand-offs.
//
// CAF's `sharing` policy notifies its condition variable for every actor that
// becomes ready, under the queue's mutex. A chain of messages (the runtime's
// exit report -> worker -> supervisor -> classifier -> supervisor -> next
// worker) then moves from thread to thread at every hop: the thread that sent
// the message goes idle a moment later, the woken one first blocks on the
// mutex the sender still holds. That was 20 of the ~30 context switches per
// attempt of a supervised /bin/false (BENCHMARKS.md §3, issue 17).
//
// This policy keeps the one queue and changes who is woken, and when:
//  - a thread is woken only when one sleeps and none was woken already for
//    the work queued, and outside the mutex;
//  - the first `kept_per_turn` actors that a running actor makes ready are
//    left for the running actor's own thread, which takes them as soon as
//    that actor's turn ends (a message chain stays on one thread, as
//    Erlang's scheduler keeps it); each further one in the same turn, and
//    every actor made ready from outside (the process runtime's reactor,
//    timers, the network), wakes a sleeping thread at once.
//  - the first of those kept actors goes to the thread's own slot, not the
//    queue: the thread runs it next without taking the queue's lock, so a
//    chain of one message per turn never touches the lock (Go's `runnext`,
//    Tokio's LIFO slot). After `max_streak` turns in a row from its slot a
//    thread puts the slot's actor in the queue and takes the queue's
//    oldest, so a chain that never ends does not starve the queue. The
//    other kept actors wait in the queue.
//  - a thread that takes a job and leaves more of its own in the queue
//    wakes a sleeping one for them, so a job never waits behind a turn that
//    blocks (a process runtime's start() with a shim per attempt waits for
//    its shim's report).
// Threads sleep only when the queue is empty, so no job waits while all
// threads sleep. A kept actor waits for the rest of the turn that made it
// ready (short on a node: blocking work runs on detached actors or the
// runtimes' own threads) instead of for a thread's wake-up; the one in the
// slot cannot be taken by another thread meanwhile. A thread that shuts
// down hands its slot to the queue.
//
//   cfg.load<caf::scheduler::coordinator<tasksup::handoff_policy>>();

#include <caf/logger.hpp>
#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

namespace tasksup {

class handoff_policy : public caf::policy::unprofiled {
public:
  /// Actors made ready by one turn of a running actor that wake no thread.
  static constexpr int kept_per_turn = 3;

  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {}

    std::mutex lock;
    std::condition_variable cv;
    std::deque<caf::resumable*> queue;
    /// The queue's size, also read without the lock (a hint).
    std::atomic<std::size_t> queued{0};
    /// Threads waiting on `cv`. Changed under the lock, also read without.
    std::atomic<std::size_t> sleeping{0};
    /// Of those, how many were notified and have not woken yet: never more
    /// than `sleeping`, so a queued job always has a thread coming for it
    /// unless its own thread takes it.
    std::atomic<std::size_t> signalled{0};
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator*) {}

    /// Actors the running actor made ready that no thread was woken for:
    /// this thread takes them after the turn.
    int kept = 0;
    /// The first of them, which no other thread sees: run next, without the
    /// queue's lock.
    caf::resumable* next = nullptr;
    /// Turns in a row taken from `next`.
    int streak = 0;
  };

  /// Turns in a row a thread takes from its own `next` before it looks at
  /// the shared queue again.
  static constexpr int max_streak = 32;

  template<class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    push(d(self), job, true);
  }

  template<class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    push(d(self->parent()), job, true);
  }

  template<class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    auto& w = d(self);
    auto keep = w.kept < kept_per_turn;
    if (keep)
      ++w.kept;
    if (keep && w.next == nullptr) {
      w.next = job;
      return;
    }
    push(d(self->parent()), job, !keep);
  }

  template<class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    push(d(self->parent()), job, true);
  }

  template<class Worker>
  void after_resume(Worker* self, caf::resumable*) {
    d(self).kept = 0;
  }

  template<class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& c = d(self->parent());
    auto& w = d(self);
    w.kept = 0;
    if (w.next != nullptr) {
      if (w.streak < max_streak) {
        ++w.streak;
        auto* job = std::exchange(w.next, nullptr);
        // What else this thread kept is in the shared queue: should this
        // turn block, another thread takes it. Read without the lock: this
        // thread pushed those jobs under it, so a thread that went to sleep
        // before shows in `sleeping`, and one that sleeps after saw them.
        if (c.queued.load(std::memory_order_relaxed) > 0 &&
            c.sleeping.load(std::memory_order_relaxed) >
              c.signalled.load(std::memory_order_relaxed)) {
          bool wake = false;
          {
            std::lock_guard<std::mutex> guard{c.lock};
            wake = !c.queue.empty() && claim_sleeper(c);
          }
          if (wake)
            c.cv.notify_one();
        }
        return job;
      }
      push(c, std::exchange(w.next, nullptr), true);
    }
    w.streak = 0;
    std::unique_lock<std::mutex> guard{c.lock};
    while (c.queue.empty()) {
      ++c.sleeping;
      c.cv.wait(guard);
      --c.sleeping;
      if (c.signalled > 0)
        --c.signalled;
    }
    auto* job = c.queue.front();
    c.queue.pop_front();
    c.queued.store(c.queue.size(), std::memory_order_relaxed);
    // What is left was kept by a turn (or its thread is on the way): should
    // this job's turn block (a runtime starting a process), another thread
    // takes the rest.
    auto wake = !c.queue.empty() && claim_sleeper(c);
    guard.unlock();
    if (wake)
      c.cv.notify_one();
    return job;
  }

  template<class Worker>
  void before_shutdown(Worker* self) {
    // The job this thread kept goes to the others.
    if (auto* job = std::exchange(d(self).next, nullptr))
      push(d(self->parent()), job, true);
  }

  template<class Worker, class UnaryFunction>
  void foreach_resumable(Worker* self, UnaryFunction f) {
    if (auto* job = std::exchange(d(self).next, nullptr))
      f(job);
  }

  template<class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
    auto& c = d(self);
    std::unique_lock<std::mutex> guard{c.lock};
    while (!c.queue.empty()) {
      auto* job = c.queue.front();
      c.queue.pop_front();
      f(job);
    }
    c.queued.store(0, std::memory_order_relaxed);
  }

private:
  /// Counts one more sleeping thread as woken, if one is left to wake.
  static bool claim_sleeper(coordinator_data& c) {
    if (c.sleeping <= c.signalled)
      return false;
    ++c.signalled;
    return true;
  }

  static void push(coordinator_data& c, caf::resumable* job, bool announce) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> guard{c.lock};
      c.queue.push_back(job);
      c.queued.store(c.queue.size(), std::memory_order_relaxed);
      wake = announce && claim_sleeper(c);
    }
    if (wake)
      c.cv.notify_one();
  }
};

/// The coordinator to load into an actor system config.
using handoff_coordinator = caf::scheduler::coordinator<handoff_policy>;

} // namespace tasksup

#if CAF_LOG_LEVEL == CAF_LOG_LEVEL_QUIET

namespace caf::scheduler {

/// A handoff worker's loop: CAF's own, without the logger's bookkeeping.
///
/// Debian's CAF logs nothing (CAF_LOG_LEVEL_QUIET), yet its worker loop
/// still records which actor each thread runs, at every resume: a
/// `dynamic_cast` from the job to `abstract_actor` through the actor's
/// virtual bases (~1,250 instructions), then the id written into a map
/// shared by all threads under one spinlock, once by the loop and once more
/// by the actor's `resume`. That was ~11,000 instructions per supervised
/// attempt (of ~61,000) and a lock every thread takes (BENCHMARKS.md §9).
/// With no current logger on the thread, `resume` skips its part too; with
/// nothing logged, nothing reads the ids.
template<>
inline void worker<tasksup::handoff_policy>::run() {
  logger::set_current_actor_system(nullptr);
  for (;;) {
    auto* job = policy_.dequeue(this);
    policy_.before_resume(this, job);
    auto res = job->resume(this, max_throughput_);
    policy_.after_resume(this, job);
    switch (res) {
      case resumable::resume_later:
        policy_.resume_job_later(this, job);
        break;
      case resumable::done:
        policy_.after_completion(this, job);
        intrusive_ptr_release(job);
        break;
      case resumable::awaiting_message:
        intrusive_ptr_release(job);
        break;
      case resumable::shutdown_execution_unit:
        policy_.after_completion(this, job);
        policy_.before_shutdown(this);
        return;
    }
  }
}

} // namespace caf::scheduler

#endif

// The messaging floor of the supervision design on CAF (issue 6, item 1):
// the same actors and messages as one supervised attempt, with no tasksup
// code and integer payloads, so the figure is what CAF itself costs for
// this design on this machine. Per attempt, as in bench_supervision:
//
//   supervisor spawns a worker, both monitor each other;
//   worker: start (to itself), event -> supervisor -> parent,
//           exit (from the "runtime", anonymous), report -> supervisor,
//           demonitor, quit;
//   supervisor: demonitor, event -> parent, request -> classifier,
//           event -> parent, request -> backoff, event -> parent, next attempt.
//
//   bench_caf_floor [--tasks=1000] [--failures=20] [--policy=stealing|sharing]
//                   [--threads=0]
//
// tasksup cannot be faster than this without fewer actors or messages per
// attempt; BENCHMARKS.md §1 compares the two.

#include "bench_util.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <future>

namespace {

using start_atom = caf::atom_constant<caf::atom("fstart")>;
using event_atom = caf::atom_constant<caf::atom("fevent")>;
using exit_atom = caf::atom_constant<caf::atom("fexit")>;
using report_atom = caf::atom_constant<caf::atom("freport")>;
using ask_atom = caf::atom_constant<caf::atom("fask")>;
using done_atom = caf::atom_constant<caf::atom("fdone")>;

/// Stands in for the registry: counts events and finished tasks.
struct parent_state {
  std::uint64_t events = 0;
  std::uint64_t done = 0;
};

caf::behavior parent_actor(caf::stateful_actor<parent_state>* self,
                           std::uint64_t tasks, std::promise<void>* finished) {
  return {
    [=](event_atom, int) { ++self->state.events; },
    [=](done_atom) {
      if (++self->state.done == tasks)
        finished->set_value();
    },
  };
}

/// Stands in for the classifier and the backoff actor: answers at once.
caf::behavior helper_actor(caf::event_based_actor*) {
  return {
    [](ask_atom, int x) { return x; },
  };
}

caf::behavior worker_actor(caf::event_based_actor* self, caf::actor sup,
                           int code) {
  self->monitor(sup);
  self->send(self, start_atom::value);
  return {
    [=](start_atom) {
      self->send(sup, event_atom::value, 0);
      caf::anon_send(caf::actor_cast<caf::actor>(self), exit_atom::value, code);
    },
    [=](exit_atom, int c) {
      self->send(sup, report_atom::value, c);
      self->demonitor(sup);
      self->quit();
    },
  };
}

struct sup_state {
  int attempt = 0;
  caf::actor worker;
};

caf::behavior sup_actor(caf::stateful_actor<sup_state>* self, caf::actor parent,
                        caf::actor classifier, caf::actor backoff,
                        int failures) {
  auto start = [=] {
    auto& st = self->state;
    ++st.attempt;
    st.worker = self->spawn(worker_actor, caf::actor_cast<caf::actor>(self),
                            st.attempt <= failures ? 1 : 0);
    self->monitor(st.worker);
  };
  start();
  self->set_down_handler([](const caf::down_msg&) {});
  return {
    [=](event_atom, int x) { self->send(parent, event_atom::value, x); },
    [=](report_atom, int code) {
      self->demonitor(self->state.worker);
      self->state.worker = nullptr;
      self->send(parent, event_atom::value, code);
      if (code == 0) {
        self->send(parent, done_atom::value);
        self->quit();
        return;
      }
      self->request(classifier, caf::infinite, ask_atom::value, code)
        .then([=](int) {
          self->send(parent, event_atom::value, 1);
          self->request(backoff, caf::infinite, ask_atom::value, 0)
            .then([=](int) {
              self->send(parent, event_atom::value, 2);
              start();
            });
        });
    },
  };
}

} // namespace

int main(int argc, char** argv) {
  using namespace tasksup::bench;
  auto tasks = arg_u64(argc, argv, "tasks", 1000);
  auto failures = static_cast<int>(arg_u64(argc, argv, "failures", 20));
  auto policy = arg_str(argc, argv, "policy", "stealing");
  auto threads = arg_u64(argc, argv, "threads", 0);
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom_from_string(policy));
  if (threads > 0)
    cfg.set("scheduler.max-threads", static_cast<std::size_t>(threads));
  double elapsed = 0;
  {
    caf::actor_system sys{cfg};
    std::promise<void> finished;
    auto parent = sys.spawn(parent_actor, tasks, &finished);
    auto classifier = sys.spawn(helper_actor);
    auto backoff = sys.spawn(helper_actor);
    auto t0 = bench_clock::now();
    for (std::uint64_t i = 0; i < tasks; ++i)
      sys.spawn(sup_actor, parent, classifier, backoff, failures);
    finished.get_future().wait();
    elapsed = seconds_since(t0);
    for (auto& a : {parent, classifier, backoff})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  auto attempts = tasks * static_cast<std::uint64_t>(failures + 1);
  std::printf("%llu tasks x %d failures: %llu attempts in %.3f s "
              "(CAF messaging only)\n",
              static_cast<unsigned long long>(tasks), failures,
              static_cast<unsigned long long>(attempts), elapsed);
  result_line{"caf_floor"}
    .add("tasks", tasks)
    .add("failures", failures)
    .add("policy", policy)
    .add("threads", threads)
    .add("attempts", attempts)
    .fixed("seconds", elapsed, 3)
    .fixed("attempts_per_s", static_cast<double>(attempts) / elapsed, 0)
    .print();
  return 0;
}

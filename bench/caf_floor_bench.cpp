// The messaging floor of the supervision design on CAF: the same actors and
// messages as one supervised attempt of `bench_supervision
// --services=parent` (supervisors under a registry, as on a node), with no
// tasksup code and integer payloads, so the figure is what CAF itself costs
// for this design on this machine. Per failed attempt, as tasksup sends
// them since the supervisor keeps one worker for the task's life:
//
//   supervisor -> worker: next attempt;
//   worker -> registry: attempt started (event; the worker sends its events
//   to the registry itself);
//   runtime (anonymous) -> worker: exit; worker -> supervisor: report;
//   supervisor -> registry: agent result;
//   supervisor <-> classifier: request;
//   supervisor <-> backoff: request;
//   supervisor -> registry: attempt exited, classified and retry scheduled
//   (one message: a registry's supervisor holds the events while it asks);
//   supervisor -> itself: the zero-delay timer;
//   supervisor <-> registry: permission (slot, breaker, retry budget);
//   then the next attempt.
//
//   bench_caf_floor [--tasks=1000] [--failures=20]
//                   [--policy=stealing|sharing|handoff] [--threads=0]
//
// `handoff` is the policy every tasksup process runs (handoff_scheduler.hpp).
// tasksup cannot be faster than this without fewer actors or messages per
// attempt; BENCHMARKS.md §1 compares the two.

#include "bench_util.hpp"

#include "tasksup/actors/handoff_scheduler.hpp"

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
using result_atom = caf::atom_constant<caf::atom("fresult")>;
using permit_atom = caf::atom_constant<caf::atom("fpermit")>;
using timer_atom = caf::atom_constant<caf::atom("ftimer")>;
using done_atom = caf::atom_constant<caf::atom("fdone")>;

/// Stands in for the registry: counts events, agent results and finished
/// tasks, and grants every permission at once.
struct registry_state {
  std::uint64_t events = 0;
  std::uint64_t results = 0;
  std::uint64_t done = 0;
};

caf::behavior registry_actor(caf::stateful_actor<registry_state>* self,
                             std::uint64_t tasks,
                             std::promise<void>* finished) {
  return {
    [=](event_atom, int) { ++self->state.events; },
    [=](result_atom, int) { ++self->state.results; },
    [](permit_atom, int attempt) { return attempt; },
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

/// One per task: runs each attempt it is sent, reports its exit.
caf::behavior worker_actor(caf::event_based_actor* self, caf::actor sup,
                           caf::actor registry) {
  self->monitor(sup);
  self->set_down_handler([=](const caf::down_msg&) { self->quit(); });
  return {
    [=](start_atom, int code) {
      self->send(registry, event_atom::value, 0);
      caf::anon_send(caf::actor_cast<caf::actor>(self), exit_atom::value, code);
    },
    [=](exit_atom, int code) { self->send(sup, report_atom::value, code); },
  };
}

struct sup_state {
  int attempt = 0;
  caf::actor worker;
};

caf::behavior sup_actor(caf::stateful_actor<sup_state>* self,
                        caf::actor registry, caf::actor classifier,
                        caf::actor backoff, int failures) {
  auto start = [=] {
    auto& st = self->state;
    ++st.attempt;
    self->send(st.worker, start_atom::value, st.attempt <= failures ? 1 : 0);
  };
  self->state.worker =
    self->spawn(worker_actor, caf::actor_cast<caf::actor>(self), registry);
  self->monitor(self->state.worker);
  self->set_down_handler([](const caf::down_msg&) {});
  start();
  return {
    [=](report_atom, int code) {
      self->send(registry, result_atom::value, code);
      if (code == 0) {
        self->send(registry, event_atom::value, code);
        self->send(registry, done_atom::value);
        self->demonitor(self->state.worker);
        self->send_exit(self->state.worker, caf::exit_reason::normal);
        self->quit();
        return;
      }
      self->request(classifier, caf::infinite, ask_atom::value, code)
        .then([=](int) {
          self->request(backoff, caf::infinite, ask_atom::value, 0)
            .then([=](int) {
              self->send(registry, event_atom::value, 3);
              self->send(self, timer_atom::value);
            });
        });
    },
    [=](timer_atom) {
      self
        ->request(registry, caf::infinite, permit_atom::value,
                  self->state.attempt)
        .then([=](int) { start(); });
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
  if (policy == "handoff")
    cfg.load<tasksup::handoff_coordinator>();
  else
    cfg.set("scheduler.policy", caf::atom_from_string(policy));
  if (threads > 0)
    cfg.set("scheduler.max-threads", static_cast<std::size_t>(threads));
  double elapsed = 0;
  {
    caf::actor_system sys{cfg};
    std::promise<void> finished;
    auto registry = sys.spawn(registry_actor, tasks, &finished);
    auto classifier = sys.spawn(helper_actor);
    auto backoff = sys.spawn(helper_actor);
    auto t0 = bench_clock::now();
    for (std::uint64_t i = 0; i < tasks; ++i)
      sys.spawn(sup_actor, registry, classifier, backoff, failures);
    finished.get_future().wait();
    elapsed = seconds_since(t0);
    for (auto& a : {registry, classifier, backoff})
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

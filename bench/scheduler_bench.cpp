// Compares CAF's schedulers for the registry's request latency: a status
// request round trip and a zero-duration task from submit to result, on the
// default work-stealing scheduler and on `sharing`.
//
//   tasksup_scheduler_bench [stealing|sharing] [requests]

#include "tasksup/actors/protocol.hpp"
#include "tasksup/actors/registry_actor.hpp"

#include "tasksup/runtime/scripted_runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double micros(clock_type::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

void report(const char* what, std::vector<double>& xs) {
  std::sort(xs.begin(), xs.end());
  auto at = [&](double q) {
    return xs[static_cast<std::size_t>(q * static_cast<double>(xs.size() - 1))];
  };
  std::printf("%-22s p50 %8.1f us  p90 %8.1f us  p99 %8.1f us\n", what, at(0.5),
              at(0.9), at(0.99));
}

} // namespace

int main(int argc, char** argv) {
  std::string policy = argc > 1 ? argv[1] : "stealing";
  int n = argc > 2 ? std::atoi(argv[2]) : 2000;
  caf::actor_system_config cfg;
  tasksup::register_protocol(cfg);
  cfg.set("scheduler.policy",
          policy == "sharing" ? caf::atom("sharing") : caf::atom("stealing"));
  caf::actor_system sys{cfg};
  tasksup::registry_options opts;
  opts.config = tasksup::builtin_config();
  opts.config.node.default_agent.agent_id = "bench";
  opts.config.node.default_agent.agent_cli = "bench";
  opts.runtimes["*"] = std::make_shared<tasksup::runtime::scripted_runtime>();
  opts.history_limit = static_cast<std::size_t>(n) + 1;
  auto reg = tasksup::spawn_registry(sys, std::move(opts));
  std::vector<double> status_us;
  std::vector<double> task_us;
  {
    caf::scoped_actor self{sys};
    tasksup::task_spec t;
    t.prompt = "p";
    for (int i = 0; i < n; ++i) {
      auto t0 = clock_type::now();
      std::string id;
      self
        ->request(reg, std::chrono::seconds(10), tasksup::submit_atom::value, t)
        .receive([&](std::string& x) { id = x; }, [](caf::error&) {});
      self
        ->request(reg, std::chrono::seconds(10), tasksup::await_atom::value, id)
        .receive([](tasksup::task_result&) {}, [](caf::error&) {});
      task_us.push_back(micros(clock_type::now() - t0));
      auto t1 = clock_type::now();
      self
        ->request(reg, std::chrono::seconds(10), tasksup::status_atom::value,
                  id)
        .receive([](tasksup::task_status&) {}, [](caf::error&) {});
      status_us.push_back(micros(clock_type::now() - t1));
    }
    self->send_exit(reg, caf::exit_reason::user_shutdown);
  }
  std::printf("scheduler.policy=%s, %d requests\n", policy.c_str(), n);
  report("status request", status_us);
  report("submit -> result", task_us);
}

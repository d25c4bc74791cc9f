#include "actor_setup.hpp"

#include "tasksup/actors/handoff_scheduler.hpp"
#include "tasksup/actors/protocol.hpp"

#include <caf/io/middleman.hpp>
#include <caf/timespan.hpp>

#include <chrono>
#include <cstddef>
#include <vector>

namespace tasksup::app {

void configure_actor_system(caf::actor_system_config& cfg, bool network) {
  register_protocol(cfg);
  // Work sharing answers an in-process request in microseconds where work
  // stealing's back-off sleeps add ~90 µs (CAF-NOTES); the actors of one
  // node do little work per message. CAF's own `sharing` moves every message
  // chain from thread to thread; the handoff policy keeps it on one
  // (handoff_scheduler.hpp, BENCHMARKS.md §3).
  cfg.load<handoff_coordinator>();
  if (network) {
    cfg.load<caf::io::middleman>();
    using namespace std::chrono;
    cfg.set("middleman.heartbeat-interval", caf::timespan{seconds{1}});
    cfg.set("middleman.connection-timeout", caf::timespan{seconds{10}});
  }
}

} // namespace tasksup::app

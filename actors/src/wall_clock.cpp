#include "tasksup/actors/events.hpp"

#include <chrono>

namespace tasksup {

double wall_clock_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

} // namespace tasksup

#include "commands.hpp"

#include "tasksup/actors/protocol.hpp"

#include <utility>

namespace tasksup::app {

namespace {

std::multimap<int, command_setup>& registry() {
  static std::multimap<int, command_setup> commands;
  return commands;
}

} // namespace

command_registrar::command_registrar(int order, command_setup setup) {
  registry().emplace(order, std::move(setup));
}

const std::multimap<int, command_setup>& registered_commands() {
  return registry();
}

int task_exit_status(const task_result& r) {
  switch (r.outcome) {
    case task_outcome::succeeded:
      return exit_status::ok;
    case task_outcome::stopped:
      return exit_status::stopped;
    default:
      // A shell can only see 1..255; 0 or unknown would read as success.
      return r.exit_code > 0 && r.exit_code < 256 ? r.exit_code : 1;
  }
}

} // namespace tasksup::app

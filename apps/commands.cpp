#include "commands.hpp"

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

} // namespace tasksup::app

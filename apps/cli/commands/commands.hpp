#pragma once

#include "exit_status.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <map>

namespace tasksup {
struct task_result;
} // namespace tasksup

namespace tasksup::app {

/// The program's exit status for a finished task: 0 on success, 130 when
/// stopped, else the last attempt's exit code (1 when it had none a shell
/// could see).
int task_exit_status(const task_result& r);

/// Adds one subcommand to `app`. The subcommand's callback stores the
/// program's exit status in `status`.
using command_setup = std::function<void(CLI::App& app, int& status)>;

/// Registers a subcommand at static-initialisation time; `order` sorts the
/// `--help` listing. Each `<name>_command.cpp` holds one registrar.
struct command_registrar {
  command_registrar(int order, command_setup setup);
};

/// Every registered subcommand, by `order`. Defined with the registrar in
/// commands.cpp (part of the tasksup_cli object library, not main.cpp) so
/// that tests linking the command objects link.
const std::multimap<int, command_setup>& registered_commands();

} // namespace tasksup::app

// The tasksup program: one executable, one subcommand per file.

#include "commands.hpp"

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  using namespace tasksup::app;
  CLI::App app{"tasksup: supervise agent tasks in containers or processes: "
               "classify every failure, retry with backoff, fall back to "
               "other agents, stop when told."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string{"tasksup " TASKSUP_VERSION});
  int status = exit_status::ok;
  for (auto& [order, setup] : registered_commands())
    setup(app, status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    auto rc = app.exit(e);
    // CLI11 returns 0 for --help/--version; anything else is bad input.
    return rc == 0 ? exit_status::ok : exit_status::bad_input;
  } catch (const std::exception& e) {
    std::cerr << "tasksup: " << e.what() << '\n';
    return 1;
  }
  return status;
}

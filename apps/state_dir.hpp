#pragma once

// Where a node keeps its state, as the node and the commands that talk to
// it both work it out (no actor system needed: the thin front program uses
// this too).

#include <string>

namespace tasksup::app {

/// `dir` made absolute against the current directory (empty stays empty):
/// attempt and state directories are mounted into containers and handed to
/// shims, which do not share the command's working directory.
std::string absolute_dir(const std::string& dir);

/// The node's default state directory: $TASKSUP_STATE_DIR, else
/// $XDG_STATE_HOME/tasksup, else /var/lib/tasksup for root, else
/// ~/.local/state/tasksup. Client commands find a node's default
/// certificates under the same directory.
std::string default_state_dir();

} // namespace tasksup::app

#pragma once

// Where a node keeps its state, as the node and the commands that talk to
// it both work it out (no actor system needed: the thin front program uses
// this too).

#include "tasksup/supervisor/expected.hpp"

#include <optional>
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

/// Makes the state directory `dir` its user's only, whatever it was: a
/// missing one is created with mode 0700 (its missing parents as mkdir -p
/// would); an existing one that group or others may use is tightened to
/// 0700 and its old permission bits returned, for the caller to warn. An
/// error when `dir` is not a directory, or is open to others and cannot be
/// tightened (it belongs to another user).
expected<std::optional<unsigned>>
make_state_dir_private(const std::string& dir);

} // namespace tasksup::app

#pragma once

// What tasksup writes for a node or an attempt (the journal, output logs,
// exit records, the prompt and environment a task was given) is its user's
// only: files are created 0600 and directories 0700, whatever the umask and
// whatever the mode of the directory they are made in.

#include <sys/types.h>

#include <string>

namespace tasksup::runtime {

/// The mode of every file tasksup creates under a state or work directory.
inline constexpr mode_t private_file_mode = 0600;

/// The mode of every directory tasksup creates under a state or work
/// directory.
inline constexpr mode_t private_dir_mode = 0700;

/// Creates `dir` and its missing parents with `private_dir_mode` (existing
/// ones keep their modes); returns "" or why it could not.
std::string make_private_dirs(const std::string& dir);

} // namespace tasksup::runtime

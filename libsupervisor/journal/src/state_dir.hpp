#pragma once

// What both journal backends do with the node's state directory: create it
// private, and hold its lock (one node per state directory) while the
// journal is open.

#include "tasksup/supervisor/expected.hpp"

#include <string>

namespace tasksup::journal::detail {

/// Creates `dir` with mode 0700 when missing; an existing path must be a
/// directory.
expected<bool> make_state_dir(const std::string& dir);

/// The state directory's lock (`<dir>/lock`, holding the node's pid), held
/// until destroyed.
class state_dir_lock {
public:
  state_dir_lock() = default;
  ~state_dir_lock();
  state_dir_lock(const state_dir_lock&) = delete;
  state_dir_lock& operator=(const state_dir_lock&) = delete;

  /// Takes the lock of `dir`; fails naming the pid of the node that holds
  /// it.
  expected<bool> take(const std::string& dir);

private:
  int fd_ = -1;
};

/// Creates the state directory and takes its lock: what opening any journal
/// starts with.
expected<bool> claim_state_dir(const std::string& dir, state_dir_lock& lock);

} // namespace tasksup::journal::detail

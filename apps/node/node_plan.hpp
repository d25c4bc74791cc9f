#pragma once

// What a node is made of, decided before any part of it starts: the options
// checked, the configuration read, the state directory made private, the
// journal read back, the TLS credentials and the runtimes made. Private to
// node.cpp.

#include "node.hpp"
#include "node_address.hpp"
#include "node_setup.hpp"
#include "notifier.hpp"
#include "tls_server_context.hpp"

#include "tasksup/actors/registry_actor.hpp"
#include "tasksup/journal/journal_store.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace tasksup::app {

struct node_plan {
  node_address addr;
  std::optional<node_address> http_addr;
  notifier_options notify;
  loaded_config config;
  std::string default_runtime;
  std::string state_dir;
  /// The opened journal, until the journal child takes it; null with
  /// --no-journal.
  std::unique_ptr<journal::journal_store> store;
  /// With a shared (PostgreSQL) journal: the leader lease. The journal is
  /// read only once this coordinator leads (`restore_journal`).
  std::unique_ptr<leadership> leader;
  tls_server_context tls;
  /// The registry's options, complete but for the journal's handle.
  registry_options registry;
  std::string attempt_root;
  /// Restored tasks that resume, finished ones kept, and finished ones
  /// retention removed from the journal before it was read.
  std::size_t resumed = 0;
  std::size_t kept = 0;
  std::int64_t expired = 0;
};

/// Checks what needs no state: the addresses, the notification options, the
/// configuration. On a bad option, says why on stderr and returns the exit
/// status.
std::optional<int> check_options(const node_options& opts, node_plan& plan);

/// Opens the node's state: the state directory (made private), the journal
/// (read back unless it is shared: see `restore_journal`), the front door's
/// credentials, the runtimes, the attempt root.
/// Slow for a large journal: a signal meanwhile is counted by the caller.
/// On failure, says why on stderr and returns the exit status.
std::optional<int> open_state(const node_options& opts, node_plan& plan);

/// Reads the journal back into the registry's options (a shared journal:
/// once this coordinator leads, fenced with its epoch). On failure, says why
/// on stderr and returns the exit status.
std::optional<int> restore_journal(node_plan& plan);

} // namespace tasksup::app

#pragma once

// Where an attempt runs in a cluster: worker nodes offer capacity (their
// attempt limit, runtimes and labels), a task may ask for labels, and each
// attempt goes to the fitting node with the most free capacity. Pure: the
// coordinator's registry keeps the table and calls these.

#include "tasksup/supervisor/expected.hpp"

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tasksup {

/// Labels a node offers or a task asks for: `gpu=true`, `zone=eu-1`.
using label_map = std::map<std::string, std::string>;

/// Most labels a node or a task may carry.
inline constexpr std::size_t max_labels = 32;

/// Longest label key and value.
inline constexpr std::size_t max_label_key_bytes = 63;
inline constexpr std::size_t max_label_value_bytes = 255;

/// Most nodes a coordinator accepts.
inline constexpr std::size_t max_nodes = 1024;

/// What a worker node offers when it joins a coordinator.
struct node_offer {
  /// Unique among the coordinator's nodes (by default the host name).
  std::string name;
  /// Attempts it runs at once.
  int max_concurrent = 1;
  /// The runtimes it has, by name (`process`, `docker`).
  std::vector<std::string> runtimes;
  label_map labels;
  /// Seconds without a word from the coordinator after which the node
  /// kills its attempts (`--lease`); 0: not stated. It must be below the
  /// coordinator's peer timeout, or the coordinator would move attempts
  /// elsewhere while they still run there.
  double lease_s = 0;
};

/// A node as placement sees it: its offer and its attempts now.
struct node_load {
  node_offer offer;
  int running = 0;

  int free() const noexcept { return offer.max_concurrent - running; }
};

/// What one attempt needs from a node.
struct placement_request {
  /// The runtime the attempt uses.
  std::string runtime;
  /// Labels the node must carry, each with the same value.
  label_map labels;
};

/// Whether `node` has the runtime and every label `req` asks for (whatever
/// its load).
bool fits(const node_offer& node, const placement_request& req);

/// The index of the node that fits `req` and has the most free capacity
/// (ties go to the first in `nodes`); nullopt when none has a free slot.
std::optional<std::size_t> choose_node(const std::vector<node_load>& nodes,
                                       const placement_request& req);

/// Why `req` cannot be placed now, in a sentence for `status`: no node at
/// all, no node with the runtime or labels (naming the first label no node
/// matches), or every fitting node busy.
std::string unplaced_reason(const std::vector<node_load>& nodes,
                            const placement_request& req);

/// Checks a label's key and value: keys are 1-63 bytes of letters, digits,
/// `.`, `_`, `-` and `/`, starting with a letter or digit; values are at most
/// 255 bytes of printable ASCII. `what` names the label in the message.
expected<bool> check_label(std::string_view key, std::string_view value,
                           std::string_view what);

/// Parses `KEY=VALUE` (the `--label` option) and checks it.
expected<std::pair<std::string, std::string>>
parse_label(std::string_view text);

/// Checks a whole node offer as it arrives from the network: name, limit,
/// runtimes and labels within bounds.
expected<bool> check_offer(const node_offer& offer);

/// `k1=v1,k2=v2`, for messages.
std::string to_string(const label_map& labels);

} // namespace tasksup

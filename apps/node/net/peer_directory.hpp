#pragma once

// Which client certificate each remote client showed, by the CAF node id
// its requests carry: the connection guard terminates TLS and sees both the
// certificate and the client's BASP handshake (which names its node id);
// the door sees only the node id of a request's sender. The directory
// joins the two, so audit lines can name who asked.

#include "tasksup/actors/node_door_actor.hpp"

#include <caf/node_id.hpp>

#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace tasksup::app {

/// Thread-safe map from a client's node id to its certificate, holding the
/// `capacity` clients seen last.
class peer_directory {
public:
  explicit peer_directory(std::size_t capacity = 4096) : capacity_(capacity) {}

  /// Records the client whose BASP client handshake payload is
  /// `handshake` (its node id comes first) as `subject`. A payload that
  /// does not start with a node id is ignored; a node id already known
  /// keeps its first subject (a second connection claiming it is not
  /// believed).
  void record(const std::string& handshake, const peer_certificate& cert);

  /// The certificate recorded for `node`, or nullopt.
  std::optional<peer_certificate> find(const caf::node_id& node) const;

private:
  mutable std::mutex mtx_;
  std::size_t capacity_;
  std::map<caf::node_id, peer_certificate> subjects_;
  /// Node ids in the order recorded, oldest first (evicted first).
  std::deque<caf::node_id> order_;
};

} // namespace tasksup::app

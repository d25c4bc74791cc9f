#include "peer_directory.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/error.hpp>

namespace tasksup::app {

void peer_directory::record(const std::string& handshake,
                            const peer_certificate& cert) {
  caf::node_id node;
  caf::binary_deserializer source{nullptr, handshake.data(), handshake.size()};
  if (auto err = source(node); err || !node)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  if (!subjects_.emplace(node, cert).second)
    return;
  order_.push_back(node);
  while (order_.size() > capacity_) {
    subjects_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<peer_certificate>
peer_directory::find(const caf::node_id& node) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = subjects_.find(node);
  if (i == subjects_.end())
    return std::nullopt;
  return i->second;
}

} // namespace tasksup::app

// The peer directory names a client by the node id its BASP client
// handshake carries: the first subject recorded for a node id stays, a
// payload that is no node id is ignored, and the oldest entries go first.

#include "peer_directory.hpp"

#include <catch2/catch.hpp>

#include <caf/binary_serializer.hpp>
#include <caf/node_id.hpp>
#include <caf/optional.hpp>

#include <string>
#include <vector>

using namespace tasksup::app;

namespace {

caf::node_id node(std::uint32_t pid) {
  return *caf::make_node_id(pid, "0123456789012345678901234567890123456789");
}

/// A client handshake's payload as CAF 0.17 writes it: the node id first
/// (then whatever follows).
std::string handshake(const caf::node_id& id) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(static_cast<bool>(sink(const_cast<caf::node_id&>(id))));
  buf.push_back('x');
  return {buf.begin(), buf.end()};
}

/// The subject recorded for `node`, or empty.
std::string subject_of(const peer_directory& dir, const caf::node_id& node) {
  auto cert = dir.find(node);
  return cert ? cert->subject : std::string{};
}

} // namespace

TEST_CASE("peer directory: a node id names its certificate's subject",
          "[peer_directory]") {
  peer_directory dir{2};
  dir.record(handshake(node(1)), {"CN=alice,O=acme"});
  CHECK(subject_of(dir, node(1)) == "CN=alice,O=acme");
  CHECK(subject_of(dir, node(2)).empty());
  CHECK_FALSE(dir.find(node(2)));
  REQUIRE(dir.find(node(1)));
  CHECK_FALSE(dir.find(node(1))->node_certificate);
  // A second connection claiming the same node id is not believed, not
  // even with a node certificate.
  dir.record(handshake(node(1)), {"CN=mallory,O=acme", true});
  CHECK(subject_of(dir, node(1)) == "CN=alice,O=acme");
  CHECK_FALSE(dir.find(node(1))->node_certificate);
  // Not a node id: ignored.
  dir.record("garbage", {"CN=bob"});
  dir.record("", {"CN=bob"});
  // The oldest goes when the directory is full.
  dir.record(handshake(node(2)), {"CN=bob"});
  dir.record(handshake(node(3)), {"CN=carol"});
  CHECK(subject_of(dir, node(1)).empty());
  CHECK(subject_of(dir, node(2)) == "CN=bob");
  CHECK(subject_of(dir, node(3)) == "CN=carol");
}

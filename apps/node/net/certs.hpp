#pragma once

// Creates the certificates of mutual TLS with OpenSSL's library: a CA (its
// key and a self-signed certificate), a node certificate and a client
// certificate signed by it. EC P-256 keys, SHA-256 signatures, random
// 159-bit serial numbers. The directory is 0700, keys 0600, certificates
// 0644; a file is written under a temporary name and then linked into place,
// so a reader never sees half a key and an existing file is never replaced
// unless asked.

#include "tasksup/supervisor/expected.hpp"

#include <string>
#include <vector>

namespace tasksup::app {

/// What `init_certs` creates and for how long.
struct certs_init_options {
  /// Replace files that exist (otherwise their presence is an error).
  bool force = false;
  /// Validity of the CA certificate, in days.
  int ca_days = 3650;
  /// Validity of the node and client certificates, in days.
  int leaf_days = 825;
};

/// Creates `dir` (0700, with missing parents 0700) and in it ca.key, ca.crt,
/// node.key, node.crt, client.key, client.crt. Refuses, naming the files,
/// when any of them exists and `opts.force` is false. Returns the paths
/// written.
expected<std::vector<std::string>> init_certs(const std::string& dir,
                                              const certs_init_options& opts);

/// What `ensure_node_certs` found.
enum class node_certs_state {
  /// The node's files were there.
  present,
  /// There was nothing: a CA, node and client certificate were created.
  created,
};

/// Makes `dir` usable by a node: when none of the six files exists, creates
/// them all (a node's first start); when ca.crt, node.crt and node.key
/// exist, leaves them; anything in between is an error naming the missing
/// file (a half-written directory is never completed silently).
expected<node_certs_state> ensure_node_certs(const std::string& dir);

/// Files in `dir` (a key, or the directory itself) that users other than
/// the owner may read or write, for a warning at start.
std::vector<std::string> exposed_cert_files(const std::string& dir);

/// The first OpenSSL error of this thread as text (and the queue cleared),
/// for messages.
std::string ssl_error_text();

} // namespace tasksup::app

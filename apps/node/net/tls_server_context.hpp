#pragma once

// The TLS context of the node's front door (the connection guard): mutual
// TLS with the node's certificate and key, TLS 1.2 at least, and a peer
// accepted only with a certificate signed by the node's own CA.

#include "tls_credentials.hpp"

#include "tasksup/supervisor/expected.hpp"

#include <memory>
#include <string>

struct ssl_ctx_st;

namespace tasksup::app {

/// An OpenSSL server context (SSL_CTX), shared by the guard's connections.
using tls_server_context = std::shared_ptr<ssl_ctx_st>;

/// Builds the front door's server context from `creds` (a node's
/// credentials): every file is checked first and an error names it.
expected<tls_server_context>
make_tls_server_context(const node_credentials& creds);

/// The front door's TLS for `tasksup serve`: none with `insecure`; else the
/// node credentials in `certs_flag` (which must be there), or in
/// `<state_dir>/certs`, created on the node's first start. Logs what it
/// did; errors name the file.
expected<tls_server_context> front_door_tls(const std::string& certs_flag,
                                            const std::string& state_dir,
                                            bool insecure);

} // namespace tasksup::app

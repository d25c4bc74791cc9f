#pragma once

// Who a node or a client is on the wire: the certificate files of mutual
// TLS, where a command finds them, and the check that they can be read
// (CAF's OpenSSL session aborts the program on a file it cannot load, so
// every file is checked first and an error names it).

#include "tasksup/supervisor/expected.hpp"

#include <optional>
#include <string>

namespace tasksup::app {

/// File names inside a certificate directory (`tasksup certs init DIR`).
namespace cert_file {
inline constexpr const char* ca_certificate = "ca.crt";
inline constexpr const char* ca_key = "ca.key";
inline constexpr const char* node_certificate = "node.crt";
inline constexpr const char* node_key = "node.key";
inline constexpr const char* client_certificate = "client.crt";
inline constexpr const char* client_key = "client.key";
} // namespace cert_file

/// The credentials of one end of a connection: the CA whose signature the
/// other end must carry, and this end's certificate and private key (PEM).
/// `insecure` means plain TCP and no files at all (`--insecure`).
struct node_credentials {
  bool insecure = false;
  std::string ca_file;
  std::string certificate_file;
  std::string key_file;
};

/// Plain TCP (`--insecure`).
node_credentials insecure_credentials();

/// A client's credentials in `dir`: ca.crt, client.crt, client.key.
node_credentials client_credentials_in(const std::string& dir);

/// A node's credentials in `dir`: ca.crt, node.crt, node.key. A worker
/// joining a coordinator connects with these too (the node certificate is
/// valid for both ends).
node_credentials node_credentials_in(const std::string& dir);

/// Where a client command finds its credentials: `flag` (`--certs DIR`) if
/// given, else $TASKSUP_CERTS if set, else `fallback` (resolve_node_target's
/// certs_dir: usually <state dir>/certs, which a node started without
/// `--certs` creates).
std::string client_certs_dir(const std::string& flag,
                             const std::string& fallback);

/// Where `tasksup serve` takes its credentials from: `flag` (`--certs DIR`)
/// if given, else `<state_dir>/certs`.
std::string node_certs_dir(const std::string& flag,
                           const std::string& state_dir);

/// The credentials a worker node joins a coordinator with: insecure with
/// `insecure`, else the node certificate and key (node.crt, node.key,
/// ca.crt; valid as a client too) in the directory a command would use:
/// `flag` (its `--certs DIR`), else $TASKSUP_CERTS, else
/// `<default state dir>/certs`. On the coordinator's machine and user that
/// is the coordinator's own directory; elsewhere, copy the coordinator's
/// ca.crt, node.crt and node.key (never ca.key) and pass `--certs`.
node_credentials joining_credentials(const std::string& flag, bool insecure);

/// Whether each file of `creds` exists and can be read by this process;
/// the error names the first one that cannot, and why. Nothing to check
/// for insecure credentials.
std::optional<error> check_credentials(const node_credentials& creds);

/// The `--help` text on how a client command finds its credentials.
std::string client_certs_help();

} // namespace tasksup::app

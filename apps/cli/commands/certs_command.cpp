// `tasksup certs init DIR`: creates the CA and the node and client
// certificates of mutual TLS (see certs.hpp).

#include "certs.hpp"
#include "commands.hpp"
#include "tls_credentials.hpp"

#include <iostream>
#include <memory>
#include <string>

namespace tasksup::app {

namespace {

struct certs_options {
  std::string action;
  std::string dir;
  bool force = false;
  int days = certs_init_options{}.leaf_days;
};

int certs_init(const certs_options& opts) {
  certs_init_options init;
  init.force = opts.force;
  init.leaf_days = opts.days;
  auto written = init_certs(opts.dir, init);
  if (!written) {
    std::cerr << "tasksup certs: " << written.error().to_string() << '\n';
    return exit_status::bad_input;
  }
  for (auto& path : *written)
    std::cout << path << '\n';
  std::cerr << "tasksup certs: start a node with `tasksup serve --certs "
            << opts.dir << "`; commands find the client certificate with "
            << "--certs " << opts.dir << " or TASKSUP_CERTS=" << opts.dir
            << ". Copy ca.crt, client.crt and client.key (never ca.key) to "
               "another machine to let it in.\n";
  return exit_status::ok;
}

void setup_certs(CLI::App& app, int& status) {
  auto opts = std::make_shared<certs_options>();
  auto* cmd = app.add_subcommand(
    "certs", "Create the certificates of mutual TLS: `certs init DIR` makes "
             "a CA, a node certificate and a client certificate signed by "
             "it.");
  cmd->add_option("action", opts->action, "init")
    ->required()
    ->check(CLI::IsMember({"init"}));
  cmd->add_option("dir", opts->dir, "Directory for the files (created 0700)")
    ->required();
  cmd->add_flag("--force", opts->force,
                "Replace files that exist (a node started with the new ones "
                "refuses every peer that holds only the old ones)");
  cmd
    ->add_option("--days", opts->days,
                 "Validity of the node and client certificates in days (the "
                 "CA's: 3650)")
    ->check(CLI::Range(1, 36500))
    ->capture_default_str();
  cmd->footer(std::string{"Writes, with OpenSSL's library: "} +
              cert_file::ca_key + " and " + cert_file::ca_certificate +
              " (the CA), " + cert_file::node_key + " and " +
              cert_file::node_certificate + " (for `tasksup serve`), " +
              cert_file::client_key + " and " + cert_file::client_certificate +
              R"( (for the commands).
EC P-256 keys, SHA-256 signatures, random serial numbers. Keys are 0600, the
directory 0700; an existing file is never replaced without --force. A node
started without --certs makes the same files in <state dir>/certs on its
first start, so this command is needed only for certificates kept elsewhere
(another user or machine). A node accepts only peers whose certificate its
CA signed; give clients ca.crt, client.crt and client.key, never ca.key.

Example:
  tasksup certs init ~/tasksup-certs
  tasksup serve --certs ~/tasksup-certs &
  TASKSUP_CERTS=~/tasksup-certs tasksup status)");
  cmd->callback([opts, &status] { status = certs_init(*opts); });
}

command_registrar registrar{45, setup_certs};

} // namespace

} // namespace tasksup::app

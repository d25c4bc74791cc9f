#!/usr/bin/env bash
# The least a command that reaches a node over its TCP port can cost here
# (issue 17, client start): bare C programs that do nothing but what such a
# command must — load a TLS library, load the CA and the client's key and
# certificate, and complete a mutual-TLS handshake with a running
# `tasksup serve` — timed with hyperfine. No tasksup code runs on the
# client side, so these are floors for any client written against these
# libraries. OpenSSL (libssl-dev, which the build needs) always; GnuTLS
# when libgnutls28-dev is installed. Prints one RESULT line.
#
#   bench/tls_client_floor.sh TASKSUP_BINARY
set -euo pipefail
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/scratch_nodes.sh"

cat >"$work/connect_loopback.h" <<'EOF'
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
/* A TCP connection to 127.0.0.1:port; -1 when it fails. */
static int connect_loopback(const char* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)atoi(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}
EOF
cat >"$work/openssl_client.c" <<'EOF'
/* argv: port, mode (0: load the credentials only, 1: and handshake) */
#include "connect_loopback.h"
#include <openssl/ssl.h>
int main(int argc, char** argv) {
  if (argc < 3) return 9;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx || SSL_CTX_load_verify_locations(ctx, "ca.crt", NULL) != 1 ||
      SSL_CTX_use_certificate_file(ctx, "client.crt", SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, "client.key", SSL_FILETYPE_PEM) != 1)
    return 2;
  if (atoi(argv[2]) == 0) return 0;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  int fd = connect_loopback(argv[1]);
  if (fd < 0) return 3;
  SSL* s = SSL_new(ctx);
  SSL_set_fd(s, fd);
  if (SSL_connect(s) != 1) return 4;
  SSL_shutdown(s);
  return 0;
}
EOF
cat >"$work/empty.c" <<'EOF'
int main(void) { return 0; }
EOF
cat >"$work/gnutls_client.c" <<'EOF'
#include "connect_loopback.h"
#include <gnutls/gnutls.h>
int main(int argc, char** argv) {
  if (argc < 3) return 9;
  gnutls_certificate_credentials_t x;
  gnutls_certificate_allocate_credentials(&x);
  if (gnutls_certificate_set_x509_trust_file(x, "ca.crt", GNUTLS_X509_FMT_PEM) < 0 ||
      gnutls_certificate_set_x509_key_file(x, "client.crt", "client.key",
                                           GNUTLS_X509_FMT_PEM) < 0)
    return 2;
  if (atoi(argv[2]) == 0) return 0;
  int fd = connect_loopback(argv[1]);
  if (fd < 0) return 3;
  gnutls_session_t s;
  gnutls_init(&s, GNUTLS_CLIENT);
  gnutls_set_default_priority(s);
  gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, x);
  gnutls_session_set_verify_cert(s, NULL, 0);
  gnutls_transport_set_int(s, fd);
  int r;
  do r = gnutls_handshake(s); while (r < 0 && !gnutls_error_is_fatal(r));
  if (r < 0) return 4;
  gnutls_bye(s, GNUTLS_SHUT_WR);
  return 0;
}
EOF
cc -O2 -o "$work/empty_ssl" "$work/empty.c" -Wl,--no-as-needed -lssl -lcrypto
cc -O2 -o "$work/openssl_client" "$work/openssl_client.c" -lssl -lcrypto
have_gnutls=0
if cc -O2 -o "$work/gnutls_client" "$work/gnutls_client.c" -lgnutls 2>/dev/null; then
  have_gnutls=1
fi

port=$((20000 + RANDOM % 20000))
"$bin" serve --listen "127.0.0.1:$port" --work-dir "$work/node" \
  --state-dir "$work/state" >"$work/node.log" 2>&1 &
node_pids+=($!)
# The node writes its CA and a client certificate on its first start.
for ((i = 0; i < 100; i++)); do
  [[ -f "$work/state/certs/client.key" ]] &&
    (cd "$work/state/certs" && "$work/openssl_client" "$port" 1) && break
  sleep 0.1
done
cd "$work/state/certs"
"$work/openssl_client" "$port" 1 || { cat "$work/node.log" >&2; exit 1; }

cmds=("$work/empty_ssl" "$work/openssl_client $port 0" "$work/openssl_client $port 1")
((have_gnutls)) && cmds+=("$work/gnutls_client $port 0" "$work/gnutls_client $port 1")
hyperfine -N --warmup 10 --runs 100 --export-json "$work/h.json" "${cmds[@]}"
mean_ms() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%.2f" % (1000*r[int(sys.argv[2])]["mean"]))' "$work/h.json" "$1"
}
extra=
((have_gnutls)) && extra=" gnutls_credentials_ms=$(mean_ms 3) gnutls_handshake_ms=$(mean_ms 4)"
echo "RESULT name=tls_client_floor openssl_loaded_ms=$(mean_ms 0) openssl_credentials_ms=$(mean_ms 1) openssl_handshake_ms=$(mean_ms 2)$extra load1=$(cut -d' ' -f1 /proc/loadavg)"

#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests (the PostgreSQL journal, the
# leader lease, failover). `start DIR` creates a cluster with initdb in a
# fresh temporary directory, as a non-root user (PostgreSQL refuses root),
# listening on 127.0.0.1 only at a free port, with trust authentication for
# that loopback address only; it writes the server's URL to DIR/url. A server
# this script started for DIR and that still runs is reused. `stop DIR` stops
# it and removes its files. ctest runs both as a fixture around the tests
# that need a server (tests/CMakeLists.txt).
set -euo pipefail
cmd=${1:-}
dir=${2:-}
if [[ -z "$cmd" || -z "$dir" ]]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [[ -z "$bin" || ! -x "$bin/initdb" ]]; then
  echo "$0: PostgreSQL's server programs are missing (Debian's postgresql-15);" \
       "scripts/bootstrap.sh installs them" >&2
  exit 1
fi
# The user the server runs as: never root.
as_user() {
  if [[ $(id -u) == 0 ]]; then
    runuser -u "$pg_user" -- "$@"
  else
    "$@"
  fi
}
if [[ $(id -u) == 0 ]]; then
  pg_user=postgres
  if ! id "$pg_user" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user"
  fi
else
  pg_user=$(id -un)
fi

mkdir -p "$dir"
data_file="$dir/data-dir"
running() {
  [[ -f "$data_file" ]] && [[ -d "$(cat "$data_file")" ]] &&
    as_user "$bin/pg_ctl" -D "$(cat "$data_file")/cluster" status >/dev/null 2>&1
}

case "$cmd" in
start)
  if running && [[ -s "$dir/url" ]]; then
    echo "PostgreSQL for the tests already runs: $(cat "$dir/url")"
    exit 0
  fi
  base=$(mktemp -d /tmp/tasksup-pg.XXXXXX)
  chmod 0755 "$base"
  [[ $(id -u) == 0 ]] && chown "$pg_user" "$base"
  echo "$base" >"$data_file"
  as_user "$bin/initdb" -D "$base/cluster" -U postgres --auth=trust \
    --no-sync -E UTF8 --locale=C.UTF-8 >"$base/initdb.log" 2>&1 || {
    cat "$base/initdb.log" >&2
    exit 1
  }
  # Only the loopback address; nobody else may connect at all.
  cat >"$base/cluster/pg_hba.conf" <<'HBA'
host all postgres 127.0.0.1/32 trust
HBA
  started=0
  for _ in $(seq 1 20); do
    port=$((20000 + RANDOM % 20000))
    if as_user "$bin/pg_ctl" -D "$base/cluster" -l "$base/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$base -c fsync=on -c max_connections=200" \
        start >/dev/null 2>&1; then
      started=1
      break
    fi
  done
  if [[ $started != 1 ]]; then
    echo "$0: the test server did not start; its log:" >&2
    cat "$base/server.log" >&2 || true
    exit 1
  fi
  echo "postgresql://postgres@127.0.0.1:$port/postgres" >"$dir/url"
  echo "PostgreSQL for the tests: $(cat "$dir/url") (data in $base)"
  ;;
stop)
  if [[ -f "$data_file" ]]; then
    base=$(cat "$data_file")
    if running; then
      as_user "$bin/pg_ctl" -D "$base/cluster" -m fast -w -t 30 stop >/dev/null || true
    fi
    rm -rf "$base"
  fi
  rm -f "$data_file" "$dir/url"
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2
  exit 2
  ;;
esac

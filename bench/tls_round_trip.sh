#!/usr/bin/env bash
# What mutual TLS costs a command: `tasksup status` against a node with TLS
# (the default) and against one started with --insecure, alternating, RUNS
# times each, in one run (same load for both). Each run is a whole command:
# process start, connection (TCP + TLS handshake + CAF's handshake), one
# request, exit. Prints one RESULT line with medians, means and the ratio.
#
#   bench/tls_round_trip.sh TASKSUP_BINARY [RUNS=50]
set -euo pipefail
bin=$(realpath "${1:?path to the tasksup binary}")
runs=${2:-50}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

start_node() { # name, extra flags...
  local name=$1
  shift
  mkdir -p "$work/$name"
  "$bin" serve --listen 127.0.0.1:0 --work-dir "$work/$name/work" \
    --state-dir "$work/$name/state" --no-journal "$@" \
    >/dev/null 2>"$work/$name.err" &
  pids+=($!)
}
address_of() { # name -> HOST:PORT once the node has logged it
  for _ in $(seq 100); do
    grep -q "listening on" "$work/$1.err" 2>/dev/null && break
    sleep 0.1
  done
  sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/$1.err" | head -n 1
}
start_node tls
start_node plain --insecure
tls_node=$(address_of tls)
plain_node=$(address_of plain)
export TASKSUP_CERTS=$work/tls/state/certs
"$bin" status --node "$tls_node" >/dev/null
"$bin" status --node "$plain_node" --insecure >/dev/null 2>&1

us() { # command... -> microseconds of one run
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000))
}
: >"$work/tls.us"
: >"$work/plain.us"
for _ in $(seq 3); do # warm-up
  us "$bin" status --node "$tls_node" >/dev/null
  us "$bin" status --node "$plain_node" --insecure >/dev/null
done
for _ in $(seq "$runs"); do
  us "$bin" status --node "$tls_node" >>"$work/tls.us"
  us "$bin" status --node "$plain_node" --insecure >>"$work/plain.us"
done
python3 - "$work/tls.us" "$work/plain.us" "$runs" <<'PY'
import statistics, sys, os
tls = [int(x) / 1000 for x in open(sys.argv[1])]
plain = [int(x) / 1000 for x in open(sys.argv[2])]
mt, mp = statistics.median(tls), statistics.median(plain)
print("RESULT name=tls_round_trip runs=%s tls_median_ms=%.2f insecure_median_ms=%.2f "
      "tls_mean_ms=%.2f insecure_mean_ms=%.2f ratio_median=%.2f load1=%s" % (
      sys.argv[3], mt, mp, statistics.mean(tls), statistics.mean(plain), mt / mp,
      open("/proc/loadavg").read().split()[0]))
PY

#!/usr/bin/env bash
# Acceptance rate of batch submission: one `tasksup submit -` client sends N
# tasks (JSON lines) to a fresh node; the figure is tasks accepted (ids
# printed) per second of wall time, over the node's control socket (batches
# of 64) and then, for N more tasks, over its TCP port with mutual TLS (one
# connection, 64 requests in flight; --certs names the credentials). The
# node runs at most one attempt at a time, so the accepted tasks queue and
# running them does not compete with accepting them. Prints one RESULT line.
#
#   bench/submit_batch_bench.sh build/apps/tasksup [N]
set -euo pipefail
tasksup=$(realpath "${1:?path to the tasksup binary}")
n=${2:-10000}
work=$(mktemp -d)
trap 'kill -9 "$node" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/config"
cat >"$work/config/node.json" <<JSON
{"max_concurrent": 1, "default_agent": {"agent_id": "t", "agent_cli": "/bin/true",
 "cli_flags": "", "prompt_as_argument": true}, "default_runtime": "process"}
JSON
# The commands find the node's certificates in the same state directory.
export TASKSUP_STATE_DIR=$work/state
"$tasksup" serve --listen 127.0.0.1:0 --config "$work/config" \
  --work-dir "$work/node" --state-dir "$work/state" 2>"$work/node.err" &
node=$!
for _ in $(seq 100); do
  grep -q "control socket" "$work/node.err" && break
  sleep 0.1
done
addr=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$work/node.err" | head -n 1)
rate() { # TAG EXTRA-ARGS...: prints "accepted seconds"
  local tag=$1 start end
  shift
  for i in $(seq "$n"); do
    printf '{"id": "%s%d", "prompt": "x"}\n' "$tag" "$i"
  done >"$work/tasks.jsonl"
  start=$(date +%s.%N)
  "$tasksup" submit - --node "$addr" "$@" <"$work/tasks.jsonl" >"$work/ids.txt"
  end=$(date +%s.%N)
  awk -v got="$(wc -l <"$work/ids.txt")" -v s="$start" -v e="$end" 'BEGIN { printf "%d %.3f\n", got, e - s }'
}
read -r got secs < <(rate b)
read -r tcp_got tcp_secs < <(rate c --certs "$work/state/certs")
awk -v n="$n" -v got="$got" -v s="$secs" -v tg="$tcp_got" -v ts="$tcp_secs" 'BEGIN {
  printf "RESULT name=submit_batch tasks=%d accepted=%d seconds=%.2f tasks_per_s=%.0f tcp_accepted=%d tcp_seconds=%.2f tcp_tasks_per_s=%.0f\n",
    n, got, s, got / s, tg, ts, tg / ts }'

#!/usr/bin/env bash
# fsync and fdatasync calls per attempt (issue 11): a real `tasksup serve`
# under `strace -f` runs N one-attempt tasks (/bin/true), with
# --journal-sync full and normal (and --no-journal for the floor), one after
# the other in one run. The calls are counted per process kind: the node
# (every thread of tasksup serve, the journal's among them) and the shims
# (each writes its attempt's exit record atomically).
#
# Usage: N=500 bench/journal_fsyncs.sh [path to tasksup]
set -u
T=$(realpath "${1:-$(dirname "$0")/../build/apps/tasksup}")
N=${N:-500}
run() {
  local mode=$1 d
  d=$(mktemp -d /tmp/tasksup-fsync-XXXXXX)
  # The commands find the node's certificates there.
  export TASKSUP_STATE_DIR=$d/state
  mkdir -p "$d/config" "$d/trace"
  echo '{"max_concurrent": 16, "default_agent": {"agent_id": "t", "agent_cli": "/bin/true", "cli_flags": ""}, "default_runtime": "process", "circuit_breaker": {"max_failures": 100000}}' > "$d/config/node.json"
  local extra=""
  [ "$mode" = off ] && extra="--no-journal"
  [ "$mode" = normal ] && extra="--journal-sync normal"
  strace --seccomp-bpf -f -ff -qq -e trace=fsync,fdatasync,execve -o "$d/trace/t" \
    "$T" serve --listen 127.0.0.1:0 --config "$d/config" --work-dir "$d/work" \
    --state-dir "$d/state" $extra 2> "$d/node.err" &
  local node=$!
  for _ in $(seq 600); do grep -q "listening on" "$d/node.err" && break; sleep 0.1; done
  local port
  port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$d/node.err" | cut -d: -f2)
  [ -n "$port" ] || { echo "the node did not start"; cat "$d/node.err"; exit 1; }
  for i in $(seq "$N"); do echo "{\"prompt\": \"p\"}"; done > "$d/tasks.jsonl"
  # What starting up costs is not counted: only what the tasks add.
  local before
  before=$(cat "$d"/trace/t.* | grep -c '^f\(data\)\?sync(' || true)
  "$T" submit --node "127.0.0.1:$port" - < "$d/tasks.jsonl" > /dev/null
  while "$T" status --json --node "127.0.0.1:$port" | grep -q '"running"\|"queued"\|"backoff"'; do sleep 0.2; done
  local node_calls=0 shim_calls=0 other=0
  for f in "$d"/trace/t.*; do
    local n
    n=$(grep -c '^f\(data\)\?sync(' "$f" || true)
    if grep -q 'execve("[^"]*tasksup-shim"' "$f"; then
      shim_calls=$((shim_calls + n))
    elif grep -q 'execve(' "$f" && ! grep -q "execve(\"$T\"" "$f"; then
      other=$((other + n))
    else
      node_calls=$((node_calls + n))
    fi
  done
  node_calls=$((node_calls - before))
  # $node is strace; the node is its child (strace waits for it).
  kill -TERM "$(cat "/proc/$node/task/$node/children")"
  wait "$node" 2>/dev/null
  printf '%-6s %d attempts: node %d calls (%.2f per attempt), shims %d (%.2f per attempt), agents %d\n' \
    "$mode" "$N" "$node_calls" "$(echo "$node_calls / $N" | bc -l)" \
    "$shim_calls" "$(echo "$shim_calls / $N" | bc -l)" "$other"
  rm -rf "$d"
}
for mode in full normal off; do run "$mode"; done

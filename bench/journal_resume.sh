#!/usr/bin/env bash
# Time to resume a journal of FIN finished and UNF unfinished tasks after a
# SIGKILL (issue 11). A real `tasksup serve` (max_concurrent 16) runs FIN
# tasks to their end, then takes UNF tasks whose agent sleeps: 16 run, the
# rest wait in the queue. The node is killed with SIGKILL; a new node is
# started on the same state directory ROUNDS times (each killed again), and
# for each start this prints: the time until it listens (journal opened,
# checked and read, tasks rebuilt), until `status` answers with every task,
# and until the 16 running attempts are adopted (running again).
#
# Usage: FIN=5000 UNF=5000 ROUNDS=3 bench/journal_resume.sh [path to tasksup]
set -u
T=$(realpath "${1:-$(dirname "$0")/../build/apps/tasksup}")
FIN=${FIN:-5000}
UNF=${UNF:-5000}
ROUNDS=${ROUNDS:-3}
d=$(mktemp -d /tmp/tasksup-resume-XXXXXX)
# The commands find the node's certificates there.
export TASKSUP_STATE_DIR=$d/state
node=""
cleanup() {
  [ -n "$node" ] && kill -KILL "$node" 2>/dev/null && wait "$node" 2>/dev/null
  # The attempts that outlived the killed nodes (their shims and agents
  # carry this directory in their command lines).
  for p in /proc/[0-9]*; do
    if tr '\0' ' ' 2>/dev/null < "$p/cmdline" | grep -q "$d/"; then
      kill -KILL "${p#/proc/}" 2>/dev/null
    fi
  done
  rm -rf "$d"
}
trap cleanup EXIT

# The sleeping agent names the directory in its command line (argv[0]), so
# the cleanup finds it.
cat > "$d/agent.sh" <<EOF
#!/bin/bash
[ "\$1" = fast ] && exit 0
exec -a "$d/sleeping-agent" sleep 3600
EOF
chmod +x "$d/agent.sh"
mkdir -p "$d/config"
cat > "$d/config/node.json" <<EOF
{"max_concurrent": 16, "default_agent": {"agent_id": "sh",
 "agent_cli": "$d/agent.sh", "cli_flags": "", "prompt_as_argument": true},
 "default_runtime": "process", "circuit_breaker": {"max_failures": 100000}}
EOF
now() { date +%s.%N; }
start_node() {
  "$T" serve --listen 127.0.0.1:0 --config "$d/config" --work-dir "$d/work" \
    --state-dir "$d/state" 2> "$d/node-$1.err" &
  node=$!
  for _ in $(seq 6000); do
    grep -qs "listening on" "$d/node-$1.err" && break
    kill -0 "$node" 2>/dev/null || break
    sleep 0.01
  done
  port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$d/node-$1.err" | cut -d: -f2)
  [ -n "$port" ] || { echo "node $1 did not start:"; cat "$d/node-$1.err"; exit 1; }
}
count() { "$T" status --json --node "127.0.0.1:$port" | grep -o "\"state\":\"$1\"" | wc -l; }

start_node 0
for i in $(seq "$FIN"); do echo "{\"id\": \"f$i\", \"prompt\": \"fast\"}"; done |
  "$T" submit --node "127.0.0.1:$port" - > /dev/null
while [ "$(count done)" -lt "$FIN" ]; do sleep 0.5; done
for i in $(seq "$UNF"); do echo "{\"id\": \"u$i\", \"prompt\": \"slow\"}"; done |
  "$T" submit --node "127.0.0.1:$port" - > /dev/null
while [ "$(count running)" -lt 16 ]; do sleep 0.2; done
echo "journal: $(stat -c %s "$d/state/journal.db") bytes (+ WAL $(stat -c %s "$d/state/journal.db-wal" 2>/dev/null || echo 0)), $FIN finished, $UNF unfinished (16 running)"
for r in $(seq "$ROUNDS"); do
  kill -KILL "$node"; wait "$node" 2>/dev/null
  t0=$(now)
  start_node "$r"
  t1=$(now)
  while ! out=$("$T" status --json --node "127.0.0.1:$port" 2>/dev/null); do :; done
  t2=$(now)
  n=$(echo "$out" | grep -o '"state":"' | wc -l)
  while [ "$(count running)" -lt 16 ]; do sleep 0.05; done
  t3=$(now)
  echo "round $r: listening after $(echo "$t1 - $t0" | bc) s; status with $n tasks after $(echo "$t2 - $t0" | bc) s; 16 running again after $(echo "$t3 - $t0" | bc) s"
  grep -o 'journal in .*' "$d/node-$r.err" | head -1
done

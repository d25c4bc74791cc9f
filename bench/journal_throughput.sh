#!/usr/bin/env bash
# Attempts per second through a real node with the journal (sync full and
# normal) and without it: N tasks running /bin/true, alternating, in one run.
# Usage: N=1000 [AGENT=/bin/false] bench/journal_throughput.sh [path to tasksup]
# With AGENT=/bin/false every task fails after 5 attempts (4 retries, no
# backoff): attempts per second = 5 x tasks per second.
T=${1:-$(dirname "$0")/../build/apps/tasksup}; N=${N:-1000}; AGENT=${AGENT:-/bin/true}
run() {
  local mode=$1 d=$(mktemp -d)
  mkdir -p $d/config
  echo '{"max_concurrent": 16, "default_agent": {"agent_id": "t", "agent_cli": "'$AGENT'", "cli_flags": ""}, "default_runtime": "process", "circuit_breaker": {"max_failures": 100000}}' > $d/config/node.json
  local extra=""; [ "$mode" = off ] && extra="--no-journal"; [ "$mode" = normal ] && extra="--journal-sync normal"
  export TASKSUP_STATE_DIR=$d/state # the commands find the node's certificates there
  $T serve --listen 127.0.0.1:0 --config $d/config --work-dir /dev/shm/jb-$$-$mode --state-dir $d/state $extra 2> $d/node.err &
  local node=$!
  for i in $(seq 50); do grep -q "listening on" $d/node.err && break; sleep 0.1; done
  local port=$(grep -o 'listening on 127.0.0.1:[0-9]*' $d/node.err | cut -d: -f2)
  local task='{"prompt": "p"}'
  [ "$AGENT" = /bin/false ] && task='{"prompt": "p", "supervisor": {"enable_fallback": false, "max_retries_per_agent": 4, "max_total_attempts": 5, "backoff_base_seconds": 0}}'
  for i in $(seq $N); do echo "$task"; done > $d/tasks.jsonl
  local t0=$(date +%s.%N)
  $T submit --node 127.0.0.1:$port - < $d/tasks.jsonl > /dev/null
  while $T status --json --node 127.0.0.1:$port | grep -q '"running"\|"queued"\|"backoff"'; do sleep 0.1; done
  local t1=$(date +%s.%N)
  local commits=""
  # The node's CPU time (user + system, every thread), in seconds.
  local ticks=$(awk '{print $14 + $15}' /proc/$node/stat)
  local cpu=$(echo "scale=2; $ticks / $(getconf CLK_TCK)" | bc)
  kill $node; wait $node 2>/dev/null
  [ "$mode" != off ] && commits=" journal $(stat -c %s $d/state/journal.db) bytes"
  echo "$mode: $N tasks in $(echo "$t1 - $t0" | bc) s = $(echo "$N / ($t1 - $t0)" | bc) tasks/s, node cpu $cpu s$commits"
  rm -rf $d /dev/shm/jb-$$-$mode
}
for r in ${ROUNDS:-1 2}; do for m in ${MODES:-on normal off}; do run $m; done; done

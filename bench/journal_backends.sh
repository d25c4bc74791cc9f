#!/usr/bin/env bash
# Attempts per second through a real coordinator with the SQLite journal
# (sync full, the default) and with the PostgreSQL journal (issue 32), in one
# run, alternating. Both place every attempt on one worker node (16 slots):
# the tasks ask for the worker's label, so neither coordinator runs them
# itself (a PostgreSQL coordinator never does). N tasks of one attempt each
# running /bin/true; `submit -` of all of them, then `status` polled every
# 100 ms until none is left. The PostgreSQL server is the tests' throwaway
# one (scripts/postgres-test.sh; fsync on), a fresh database per run.
# Usage: N=1000 ROUNDS="1 2" bench/journal_backends.sh [path to tasksup]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
T=$(realpath "${1:-$root/build/apps/tasksup}")
N=${N:-1000}
pg=$(mktemp -d /tmp/tasksup-bench-pg-XXXXXX)
"$root/scripts/postgres-test.sh" start "$pg" > /dev/null || exit 1
server=$(cat "$pg/url")
trap '"$root/scripts/postgres-test.sh" stop "$pg"; rm -rf "$pg"' EXIT
run() {
  local mode=$1 d
  d=$(mktemp -d /tmp/tasksup-bench-XXXXXX)
  mkdir -p "$d/config"
  echo '{"max_concurrent": 16, "default_agent": {"agent_id": "t", "agent_cli": "/bin/true", "cli_flags": ""}, "default_runtime": "process", "circuit_breaker": {"max_failures": 100000}}' > "$d/config/node.json"
  export TASKSUP_STATE_DIR=$d/state
  local port=$((20000 + RANDOM % 20000)) extra=() db=""
  if [ "$mode" = postgresql ]; then
    db=bench_$RANDOM$RANDOM
    psql -q "$server" -c "CREATE DATABASE $db" || exit 1
    extra=(--journal "${server%/*}/$db")
  fi
  "$T" serve --listen 127.0.0.1:$port --config "$d/config" --state-dir "$d/state" \
    --work-dir /dev/shm/jbk-$$-$mode "${extra[@]}" 2> "$d/node.err" &
  local node=$!
  for _ in $(seq 100); do grep -q "listening on" "$d/node.err" && break; sleep 0.1; done
  "$T" serve --join 127.0.0.1:$port --name w1 --label pool=w --config "$d/config" \
    --state-dir "$d/w1" --work-dir /dev/shm/jbk-$$-$mode-w 2> "$d/w1.err" &
  local worker=$!
  for _ in $(seq 100); do grep -q "worker node w1 joined" "$d/node.err" && break; sleep 0.1; done
  for _ in $(seq "$N"); do echo '{"prompt": "p", "placement": {"labels": {"pool": "w"}}}'; done > "$d/tasks.jsonl"
  local t0 t1
  t0=$(date +%s.%N)
  "$T" submit --node 127.0.0.1:$port - < "$d/tasks.jsonl" > /dev/null
  while "$T" status --json --node 127.0.0.1:$port | grep -q '"running"\|"queued"\|"backoff"'; do sleep 0.1; done
  t1=$(date +%s.%N)
  local ticks cpu
  ticks=$(awk '{print $14 + $15}' /proc/$node/stat)
  cpu=$(echo "scale=2; $ticks / $(getconf CLK_TCK)" | bc)
  local ok
  ok=$("$T" status --json --node 127.0.0.1:$port | grep -o '"outcome":"succeeded"' | wc -l)
  kill $worker $node; wait $worker $node 2>/dev/null
  echo "$mode: $N tasks ($ok succeeded) in $(echo "$t1 - $t0" | bc) s = $(echo "$N / ($t1 - $t0)" | bc) tasks/s, coordinator cpu $cpu s"
  [ -n "$db" ] && psql -q "$server" -c "DROP DATABASE $db WITH (FORCE)"
  rm -rf "$d" /dev/shm/jbk-$$-$mode /dev/shm/jbk-$$-$mode-w
}
for r in ${ROUNDS:-1 2}; do for m in ${MODES:-sqlite postgresql}; do run "$m"; done; done

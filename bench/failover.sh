#!/usr/bin/env bash
# Failover of coordinators sharing a PostgreSQL journal (issue 32): two
# coordinators (lease LEASE s), WORKERS worker nodes joining both, TASKS
# tasks whose agent works WORK s. While they run, the leader is killed with
# SIGKILL KILLS times (each time once the standby has taken over and the
# killed one stands by again). Prints each failover's time (the kill to the
# standby's "leading" line, read from its log's own timestamp), p50 and max,
# then what became of the tasks: succeeded, other outcomes, lost (not done),
# tasks whose agent finished more than once (work done twice), and agents
# left running at the end.
# Usage: LEASE=2 KILLS=20 TASKS=1000 WORKERS=2 WORK=0.5 bench/failover.sh [tasksup]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
T=$(realpath "${1:-$root/build/apps/tasksup}")
LEASE=${LEASE:-2}; KILLS=${KILLS:-20}; TASKS=${TASKS:-1000}
WORKERS=${WORKERS:-2}; WORK=${WORK:-0.5}
NAME=failover
COORDINATOR_FLAGS=(--heartbeat-ms 200)
. "$root/bench/shared_journal.sh"
printf '#!/bin/sh\necho "start $TASKSUP_TASK_ID $TASKSUP_ATTEMPT" >> "%s/ran.txt"\nsleep %s\necho "end $TASKSUP_TASK_ID $TASKSUP_ATTEMPT" >> "%s/ran.txt"\n' \
  "$d" "$WORK" "$d" > "$d/agent.sh"
chmod +x "$d/agent.sh"
echo '{"max_concurrent": 8, "default_agent": {"agent_id": "sh", "agent_cli": "'"$d/agent.sh"'", "cli_flags": "", "prompt_as_argument": true}, "default_runtime": "process", "circuit_breaker": {"max_failures": 100000}}' > "$d/config/node.json"
start_leader_and_standby
for w in $(seq "$WORKERS"); do
  "$T" serve --join "$(addr 0),$(addr 1)" --name "w$w" --config "$d/config" \
    --state-dir "$d/w$w" --heartbeat-ms 200 --lease 1.5 2> "$d/w$w.err" &
  pids+=($!)
done
for w in $(seq "$WORKERS"); do wait_for "$d/c0.err" 0 "worker node w$w joined"; done
for i in $(seq "$TASKS"); do echo "{\"id\": \"t$i\", \"prompt\": \"p\", \"supervisor\": {\"backoff_base_seconds\": 0.2}}"; done |
  "$T" submit --node "$(addr 0)" - > /dev/null || exit 1
leader=0
times=()
for k in $(seq "$KILLS"); do
  sleep 1
  other=$((1 - leader))
  before=$(grep -c "leading (epoch" "$d/c$other.err")
  t0=$(date +%s.%N)
  kill -KILL "${cpid[$leader]}"
  wait "${cpid[$leader]}" 2>/dev/null
  wait_for "$d/c$other.err" "$before" "leading (epoch"
  # The log's own timestamp of the takeover (local time, ms).
  line=$(grep "leading (epoch" "$d/c$other.err" | tail -1)
  t1=$(stamp "$line")
  ms=$(echo "($t1 - $t0) * 1000 / 1" | bc)
  times+=("$ms")
  echo "failover $k: ${ms} ms ($(echo "$line" | grep -o 'epoch [0-9]*'))"
  stood=$(grep -c 'stands by' "$d/c$leader.err")
  start "$leader"
  wait_for "$d/c$leader.err" "$stood" "stands by"
  leader=$other
done
sorted=($(printf '%s\n' "${times[@]}" | sort -n))
n=${#sorted[@]}
echo "failover over $n kills (lease $LEASE s): p50 ${sorted[$((n / 2))]} ms, max ${sorted[$((n - 1))]} ms"
# Every task to its end.
out=""
for _ in $(seq 1200); do
  out=$("$T" status --json --node "$(addr $leader)" 2>/dev/null) &&
    ! echo "$out" | grep -q '"running"\|"queued"\|"backoff"' && break
  sleep 0.5
done
succeeded=$(echo "$out" | grep -o '"outcome":"succeeded"' | wc -l)
done_n=$(echo "$out" | grep -o '"state":"done"' | wc -l)
twice=$(grep '^end ' "$d/ran.txt" | awk '{print $2}' | sort | uniq -d | wc -l)
starts=$(grep -c '^start ' "$d/ran.txt")
echo "tasks: $TASKS; done $done_n, succeeded $succeeded, other outcomes $((done_n - succeeded)), lost $((TASKS - done_n)); agent starts $starts; tasks whose agent finished more than once $twice"
left=0
for p in /proc/[0-9]*; do
  tr '\0' ' ' 2>/dev/null < "$p/cmdline" | grep -q "^/bin/sh $d/agent.sh" && left=$((left + 1))
done
echo "agents left running: $left"

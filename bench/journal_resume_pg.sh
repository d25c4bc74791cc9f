#!/usr/bin/env bash
# Resume of a PostgreSQL journal (issue 32): a coordinator on the tests'
# throwaway server runs FIN tasks to their end on one worker node, then the
# worker stops and UNF more tasks queue (attempts run on workers only). The
# coordinator is killed with SIGKILL; a second one on the same journal, which
# stood by, takes over. For ROUNDS kills this prints: the takeover (the
# kill to its "took the leader lease" line: the lease running out), the
# journal read and the tasks rebuilt (that line to "listening"), and the kill to a
# `status` that lists every task. The killed one starts again as a standby.
# Usage: FIN=5000 UNF=5000 ROUNDS=3 LEASE=4 bench/journal_resume_pg.sh [tasksup]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
T=$(realpath "${1:-$root/build/apps/tasksup}")
FIN=${FIN:-5000}; UNF=${UNF:-5000}; ROUNDS=${ROUNDS:-3}; LEASE=${LEASE:-4}
NAME=resume-pg
COORDINATOR_FLAGS=(--retain-tasks 0)
. "$root/bench/shared_journal.sh"
echo '{"max_concurrent": 16, "default_agent": {"agent_id": "t", "agent_cli": "/bin/true", "cli_flags": ""}, "default_runtime": "process", "circuit_breaker": {"max_failures": 100000}}' > "$d/config/node.json"
count() { "$T" status --json --node "$(addr "$1")" 2>/dev/null | grep -o "\"state\":\"$2\"" | wc -l; }
start_leader_and_standby
"$T" serve --join "$(addr 0)" --name w1 --config "$d/config" --state-dir "$d/w1" 2> "$d/w1.err" &
worker=$!
pids+=($worker)
wait_for "$d/c0.err" 0 "worker node w1 joined"
for i in $(seq "$FIN"); do echo "{\"id\": \"f$i\", \"prompt\": \"p\"}"; done |
  "$T" submit --node "$(addr 0)" - > /dev/null || exit 1
while [ "$(count 0 done)" -lt "$FIN" ]; do sleep 0.5; done
kill "$worker"; wait "$worker" 2>/dev/null
for i in $(seq "$UNF"); do echo "{\"id\": \"u$i\", \"prompt\": \"p\"}"; done |
  "$T" submit --node "$(addr 0)" - > /dev/null || exit 1
echo "journal: $(psql -Atq "$url" -c "select pg_size_pretty(pg_database_size(current_database()))"), $FIN finished, $UNF queued"
leader=0
for r in $(seq "$ROUNDS"); do
  other=$((1 - leader))
  led=$(grep -c "leading (epoch" "$d/c$other.err")
  heard=$(grep -c "listening on" "$d/c$other.err")
  t0=$(date +%s.%N)
  kill -KILL "${cpid[$leader]}"; wait "${cpid[$leader]}" 2>/dev/null
  wait_for "$d/c$other.err" "$led" "leading (epoch"
  wait_for "$d/c$other.err" "$heard" "listening on"
  while [ "$(count "$other" '[a-z]*')" -lt $((FIN + UNF)) ]; do sleep 0.05; done
  t3=$(date +%s.%N)
  t1=$(stamp "$(grep 'took the leader lease' "$d/c$other.err" | tail -1)")
  t2=$(stamp "$(grep 'listening on' "$d/c$other.err" | tail -1)")
  echo "round $r: lease taken $(echo "$t1 - $t0" | bc) s after the kill; journal read and tasks rebuilt $(echo "$t2 - $t1" | bc) s; status with $((FIN + UNF)) tasks $(echo "$t3 - $t0" | bc) s after the kill"
  stood=$(grep -c 'stands by' "$d/c$leader.err")
  start "$leader"
  wait_for "$d/c$leader.err" "$stood" "stands by"
  leader=$other
done

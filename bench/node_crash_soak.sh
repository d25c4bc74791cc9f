#!/usr/bin/env bash
# Fault injection at scale (issue 11): a real `tasksup serve` is killed with
# SIGKILL KILLS times at random moments while TASKS tasks with mixed outcomes
# run, and restarted on the same state directory each time. Afterwards it
# checks that no task was lost (every task ended, with the outcome its
# script implies), that no agent ran twice for one attempt, that every
# attempt an agent ran is counted by its task (numbers 1..total_attempts),
# and that no agent process is left; it prints the counts and exits 1 on any
# violation. An attempt a kill caught before its agent started is counted
# (classified infrastructure, "node restarted and the attempt could not be
# adopted") with no agent run: those are reported, not violations.
# The integration test `node crash: 10 SIGKILLs during 200 tasks ...` is
# the same harness at a smaller size.
#
# Usage: TASKS=1000 KILLS=50 SEED=1 bench/node_crash_soak.sh [path to tasksup]
set -u
T=$(realpath "${1:-$(dirname "$0")/../build/apps/tasksup}")
TASKS=${TASKS:-1000}
KILLS=${KILLS:-50}
SEED=${SEED:-1}
RANDOM=$SEED
d=$(mktemp -d /tmp/tasksup-soak-XXXXXX)
# The commands find the node's certificates there.
export TASKSUP_STATE_DIR=$d/state
node=""
cleanup() {
  [ -n "$node" ] && kill -KILL "$node" 2>/dev/null && wait "$node" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then echo "kept $d"; else rm -rf "$d"; fi
}
trap cleanup EXIT

# ok: works, then succeeds; flaky: fails its first attempt with a transient
# error; fatal: a bad key. Each start is recorded (one short append).
cat > "$d/agent.sh" <<EOF
#!/bin/sh
echo "\$TASKSUP_TASK_ID \$TASKSUP_ATTEMPT" >> '$d/ran.txt'
set -- \$*
case "\$1" in
  ok) sleep "\$2"; exit 0 ;;
  flaky) sleep "\$2"
    if [ "\$TASKSUP_ATTEMPT" -lt 2 ]; then echo 'connection reset' >&2; exit 1; fi
    exit 0 ;;
  *) echo 'Error: Invalid API key' >&2; exit 1 ;;
esac
EOF
chmod +x "$d/agent.sh"
mkdir -p "$d/config"
cat > "$d/config/node.json" <<EOF
{"max_concurrent": 16, "default_agent": {"agent_id": "sh",
 "agent_cli": "$d/agent.sh", "cli_flags": "", "prompt_as_argument": true},
 "default_runtime": "process", "circuit_breaker": {"max_failures": 100000}}
EOF
kinds=(ok flaky fatal)
: > "$d/expected.txt"
for i in $(seq 0 $((TASKS - 1))); do
  k=${kinds[$((RANDOM % 3))]}
  printf '{"id": "t%d", "prompt": "%s 0.%02d", "supervisor": {"backoff_base_seconds": 0.2}}\n' \
    "$i" "$k" $((RANDOM % 60)) >> "$d/tasks.jsonl"
  echo "t$i $k" >> "$d/expected.txt"
done

start_node() {
  "$T" serve --listen 127.0.0.1:0 --config "$d/config" --work-dir "$d/work" \
    --state-dir "$d/state" 2> "$d/node-$1.err" &
  node=$!
  for _ in $(seq 600); do
    grep -qs "listening on" "$d/node-$1.err" && break
    kill -0 "$node" 2>/dev/null || break
    sleep 0.05
  done
  port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$d/node-$1.err" | cut -d: -f2)
  if [ -z "$port" ]; then
    echo "node $1 did not start:"; cat "$d/node-$1.err"; exit 1
  fi
}

t0=$(date +%s.%N)
start_node 0
"$T" submit --node "127.0.0.1:$port" - < "$d/tasks.jsonl" > /dev/null || {
  echo "submit failed"; exit 1; }
restart_s=()
for k in $(seq 1 "$KILLS"); do
  sleep "0.$((200 + RANDOM % 700))"
  kill -KILL "$node"; wait "$node" 2>/dev/null
  r0=$(date +%s.%N)
  start_node "$k"
  restart_s+=("$(echo "$(date +%s.%N) - $r0" | bc)")
done
killed_at=$(date +%s.%N)
for _ in $(seq 3600); do
  out=$("$T" status --json --node "127.0.0.1:$port" 2>/dev/null) || { sleep 0.1; continue; }
  echo "$out" | grep -q '"running"\|"queued"\|"backoff"' || break
  sleep 0.1
done
t1=$(date +%s.%N)
"$T" status --json --node "127.0.0.1:$port" > "$d/final.json"
kill -TERM "$node"; wait "$node"; node=""
left=0
for p in /proc/[0-9]*; do
  tr '\0' ' ' 2>/dev/null < "$p/cmdline" | grep -q "$d/agent.sh" && left=$((left + 1))
done

/usr/bin/python3 - "$d" "$left" "$(echo "$t1 - $t0" | bc)" "$(echo "$t1 - $killed_at" | bc)" \
  "${restart_s[*]}" <<'EOF'
import json, sys, collections
d, left, wall, tail, restarts = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
expected = dict(l.split() for l in open(d + "/expected.txt"))
final = [json.loads(line) for line in open(d + "/final.json") if line.strip()]
tasks = final if isinstance(final, list) else final.get("tasks", [])
by_id = {t["task_id"]: t for t in tasks}
starts = collections.Counter(tuple(l.split()) for l in open(d + "/ran.txt"))
twice = sum(1 for n in starts.values() if n > 1)
per_task = collections.defaultdict(set)
for (tid, a) in starts:
    per_task[tid].add(int(a))
lost = [i for i in expected if i not in by_id or by_id[i].get("state") != "done"]
wrong, mismatch = [], []
never_ran = 0
outcomes = collections.Counter()
for i, k in expected.items():
    t = by_id.get(i)
    if not t or t.get("state") != "done":
        continue
    r = t["result"]
    outcomes[r["outcome"]] += 1
    want = "failed" if k == "fatal" else "succeeded"
    if r["outcome"] != want or (k == "flaky" and r["metadata"]["total_attempts"] < 2):
        wrong.append(i)
    counted = set(range(1, r["metadata"]["total_attempts"] + 1))
    if not per_task[i] <= counted:
        mismatch.append(i)
    never_ran += len(counted - per_task[i])
rs = sorted(float(x) for x in restarts.split())
print(f"tasks {len(expected)}, kills {len(rs)}, wall {wall:.1f} s "
      f"(after the last kill {tail:.1f} s)")
print(f"outcomes: {dict(outcomes)}; agent starts {sum(starts.values())}")
if rs:
    print(f"restart to listening: median {rs[len(rs)//2]:.2f} s, max {rs[-1]:.2f} s")
print(f"attempts counted whose agent never started (killed between the "
      f"journaled start and the spawn): {never_ran}")
print(f"lost {len(lost)}, wrong outcome {len(wrong)}, agent run twice for one "
      f"attempt {twice}, agent runs not counted {len(mismatch)}, agents left {left}")
for name, xs in (("lost", lost), ("wrong", wrong)):
    if xs:
        print(f"  {name}: {' '.join(sorted(xs)[:20])}")
for i in sorted(mismatch)[:20]:
    r = by_id[i]["result"]
    print(f"  {i} ({expected[i]}): agent started for attempts "
          f"{sorted(per_task[i])}, the task counts {r['metadata']['total_attempts']}"
          f" ({r['outcome']}: {r.get('error')})")
sys.exit(1 if lost or wrong or twice or mismatch or left else 0)
EOF

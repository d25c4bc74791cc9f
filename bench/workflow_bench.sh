#!/usr/bin/env bash
# Workflows against the same tasks submitted on their own (issue 34), on a
# real `tasksup serve`; every step's and every task's agent is /bin/true.
#
# - chain: one workflow of N steps, step i depending on step i-1, against N
#   independent tasks submitted in one batch (`submit -`) to a node with
#   max_concurrent 1, so that both run one attempt at a time. The chain
#   also runs on a max_concurrent 1 node (it never has two steps ready).
# - fanin: one workflow of N-1 independent steps and a last step that
#   depends on all of them, against N independent tasks in one batch; both
#   on a node with max_concurrent MAXC (default 4, node.json's default).
#   Each time is from the start of `submit` to the end of `wait` (of the
#   workflow; of the last MAXC tasks of the batch, which end last since the
#   queue is FIFO). The two sides alternate, ROUNDS rounds, each run on a
#   fresh node (its start not timed), and each run is checked afterwards:
#   every step or task must have succeeded.
# - memory: VmRSS of an idle node, then of the same node holding one chain
#   of N steps whose first step's agent sleeps (N-1 steps wait), against a
#   fresh node holding N queued plain tasks (max_concurrent 1, the first
#   one's agent sleeps). Alternating, ROUNDS rounds.
# - resume: a node (max_concurrent 16) holding WF workflows of three steps
#   in a chain whose first step's agent sleeps (16 running, the rest
#   queued, two steps each waiting) is killed with SIGKILL and started
#   again on the same state directory ROUNDS times: the time until it
#   listens, until `status` answers, and until the 16 running steps are
#   adopted (running again).
#
# Attempt directories and journals are on tmpfs (SCRATCH_PARENT, default
# /dev/shm): the disk is not what is measured. Prints RESULT lines.
#
# Usage: N=10000 WF=1000 ROUNDS=2 MAXC=4 PARTS="chain fanin memory resume" \
#          bench/workflow_bench.sh [path to tasksup]
# Quick check: N=200 WF=50 bench/workflow_bench.sh
set -u
T=$(realpath "${1:-$(dirname "$0")/../build/apps/tasksup}")
N=${N:-10000}
WF=${WF:-1000}
ROUNDS=${ROUNDS:-2}
MAXC=${MAXC:-4}
PARTS=${PARTS:-chain fanin memory resume}
# Upper bound for any one wait, in seconds.
LIMIT=${LIMIT:-1800}
d=$(mktemp -d "${SCRATCH_PARENT:-/dev/shm}/tasksup-wf-XXXXXX")
node=""
cleanup() {
  [ -n "$node" ] && kill -KILL "$node" 2>/dev/null && wait "$node" 2>/dev/null
  # The attempts that outlived their node (their shims and agents carry
  # this directory in their command lines).
  for p in /proc/[0-9]*; do
    if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q "$d/"; then
      kill -KILL "${p#/proc/}" 2>/dev/null
    fi
  done
  rm -rf "$d"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The agent of the memory and resume parts: "fast" ends at once, anything
# else sleeps, named after this directory so the cleanup finds it.
cat >"$d/agent.sh" <<EOF
#!/bin/bash
[ "\$1" = fast ] && exit 0
exec -a "$d/sleeping-agent" sleep 3600
EOF
chmod +x "$d/agent.sh"
# config_dir MAXC AGENT: a config directory with that node.json.
config_dir() {
  local c=$d/config-$1-$(basename "$2")
  if [ ! -d "$c" ]; then
    mkdir -p "$c"
    cat >"$c/node.json" <<EOF
{"max_concurrent": $1, "default_agent": {"agent_id": "a", "agent_cli": "$2",
 "cli_flags": "", "prompt_as_argument": true}, "default_runtime": "process",
 "circuit_breaker": {"max_failures": 100000}}
EOF
  fi
  echo "$c"
}

now() { date +%s.%N; }
load() { cut -d' ' -f1 /proc/loadavg; }
# start_node NAME MAXC AGENT: a node on state directory $d/NAME; sets node
# and port (waits for "listening on", at most 60 s).
start_node() {
  local dir=$d/$1 log
  mkdir -p "$dir"
  log=$dir/node-$(date +%s%N).err
  "$T" serve --listen 127.0.0.1:0 --config "$(config_dir "$2" "$3")" \
    --work-dir "$dir/work" --state-dir "$dir/state" --await-timeout 86400 \
    --retain-tasks 0 2>"$log" &
  node=$!
  port=""
  for _ in $(seq 6000); do
    grep -qs "listening on" "$log" && break
    kill -0 "$node" 2>/dev/null || break
    sleep 0.01
  done
  port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$log" | cut -d: -f2)
  [ -n "$port" ] || { echo "node $1 did not start:" >&2; cat "$log" >&2; exit 1; }
  export TASKSUP_STATE_DIR=$dir/state
}
# stop_node NAME: SIGTERM (SIGKILL after 60 s), then remove its directory.
stop_node() {
  kill -TERM "$node" 2>/dev/null
  for _ in $(seq 600); do kill -0 "$node" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$node" 2>/dev/null
  wait "$node" 2>/dev/null
  node=""
  rm -rf "${d:?}/$1"
}
ts() { "$T" "$@" --node "127.0.0.1:$port"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$node/status"; }
# count_tasks STATE: step tasks (ids with a dot) or plain tasks (ids
# starting with p) in that state.
count_tasks() {
  ts status --json --state "$1" 2>/dev/null | python3 -c '
import json, sys
try:
    d = [json.loads(line) for line in sys.stdin if line.strip()]
except ValueError:
    print(-1); sys.exit()
print(sum(1 for t in d if "." in t["task_id"] or t["task_id"].startswith("p")))'
}
succeeded() { # how many step or plain tasks succeeded
  ts status --json --outcome succeeded | python3 -c '
import json, sys
print(sum(1 for line in sys.stdin if line.strip() for t in [json.loads(line)] if "." in t["task_id"] or t["task_id"].startswith("p")))'
}

# The inputs: a chain, a fan-in and N plain tasks (JSON lines).
python3 - "$N" "$d" <<'EOF'
import json, sys
n, d = int(sys.argv[1]), sys.argv[2]
def step(i, deps, prompt="x"):
    s = {"id": "s%d" % i, "task": {"prompt": prompt}}
    if deps:
        s["depends_on"] = deps
    return s
with open(d + "/chain.json", "w") as f:
    json.dump({"id": "chain", "steps": [step(i, ["s%d" % (i - 1)] if i else [])
                                        for i in range(n)]}, f)
with open(d + "/fanin.json", "w") as f:
    json.dump({"id": "fanin", "steps": [step(i, []) for i in range(n - 1)] +
               [step(n - 1, ["s%d" % i for i in range(n - 1)])]}, f)
with open(d + "/held-chain.json", "w") as f:
    json.dump({"id": "held", "steps": [step(i, ["s%d" % (i - 1)] if i else [],
                                            "slow" if i == 0 else "fast")
                                       for i in range(n)]}, f)
with open(d + "/plain.jsonl", "w") as f:
    for i in range(n):
        f.write(json.dumps({"id": "p%d" % i, "prompt": "x"}) + "\n")
with open(d + "/held-plain.jsonl", "w") as f:
    for i in range(n):
        f.write(json.dumps({"id": "p%d" % i, "prompt": "slow" if i == 0 else "fast"}) + "\n")
EOF

# run_workflow KIND MAXC: times submit + wait of $d/KIND.json; prints a RESULT.
run_workflow() {
  local kind=$1 maxc=$2 l0 t0 t1 rc ok
  start_node "wf-$kind" "$maxc" /bin/true
  l0=$(load)
  t0=$(now)
  ts submit "$d/$kind.json" >/dev/null || { echo "submit of $kind failed" >&2; exit 1; }
  ts wait "$kind" --timeout "$LIMIT" >/dev/null
  rc=$?
  t1=$(now)
  ok=$(succeeded)
  stop_node "wf-$kind"
  awk -v k="$kind" -v n="$N" -v m="$maxc" -v s="$t0" -v e="$t1" -v rc="$rc" -v ok="$ok" \
    -v l0="$l0" -v l1="$(load)" 'BEGIN {
    printf "RESULT name=workflow_%s side=workflow steps=%d max_concurrent=%d seconds=%.2f ms_per_step=%.3f wait_rc=%d succeeded=%d load=%s-%s\n",
      k, n, m, e - s, 1000 * (e - s) / n, rc, ok, l0, l1 }'
}
# run_batch KIND MAXC: times `submit -` of the N plain tasks and a wait for
# the last MAXC of them; prints a RESULT.
run_batch() {
  local kind=$1 maxc=$2 l0 t0 t1 rc=0 ok i
  start_node "batch-$kind" "$maxc" /bin/true
  l0=$(load)
  t0=$(now)
  ts submit - <"$d/plain.jsonl" >/dev/null || { echo "batch submit failed" >&2; exit 1; }
  for ((i = N - maxc; i < N; i++)); do
    ((i < 0)) && continue
    ts wait "p$i" --timeout "$LIMIT" >/dev/null || rc=$?
  done
  t1=$(now)
  ok=$(succeeded)
  stop_node "batch-$kind"
  awk -v k="$kind" -v n="$N" -v m="$maxc" -v s="$t0" -v e="$t1" -v rc="$rc" -v ok="$ok" \
    -v l0="$l0" -v l1="$(load)" 'BEGIN {
    printf "RESULT name=workflow_%s side=tasks tasks=%d max_concurrent=%d seconds=%.2f ms_per_task=%.3f wait_rc=%d succeeded=%d load=%s-%s\n",
      k, n, m, e - s, 1000 * (e - s) / n, rc, ok, l0, l1 }'
}

# held SIDE: RSS of an idle node, then holding the N-step chain or the N
# plain tasks with only the first running; prints a RESULT.
held() {
  local side=$1 idle full t0 t1 running=0
  start_node "mem-$side" 1 "$d/agent.sh"
  sleep 2
  idle=$(rss_kb)
  t0=$(now)
  if [ "$side" = workflow ]; then
    ts submit "$d/held-chain.json" >/dev/null || exit 1
  else
    ts submit - <"$d/held-plain.jsonl" >/dev/null || exit 1
  fi
  t1=$(now)
  for _ in $(seq 600); do
    running=$(count_tasks running)
    [ "$running" = 1 ] && break
    sleep 0.1
  done
  sleep 2
  full=$(rss_kb)
  local queued
  queued=$(count_tasks queued)
  stop_node "mem-$side"
  awk -v side="$side" -v n="$N" -v i="$idle" -v f="$full" -v s="$t0" -v e="$t1" \
    -v r="$running" -v q="$queued" -v l="$(load)" 'BEGIN {
    printf "RESULT name=workflow_memory side=%s held=%d running=%d queued_tasks=%d submit_s=%.2f idle_rss_kb=%d held_rss_kb=%d bytes_per_step=%.0f load=%s\n",
      side, n, r, q, e - s, i, f, 1024 * (f - i) / n, l }'
}

for part in $PARTS; do
  echo "# $part, N=$N WF=$WF ROUNDS=$ROUNDS MAXC=$MAXC, $(uptime)"
  case $part in
  chain)
    for r in $(seq "$ROUNDS"); do
      run_workflow chain 1
      run_batch chain 1
    done
    ;;
  fanin)
    for r in $(seq "$ROUNDS"); do
      run_workflow fanin "$MAXC"
      run_batch fanin "$MAXC"
    done
    ;;
  memory)
    for r in $(seq "$ROUNDS"); do
      held workflow
      held tasks
    done
    ;;
  resume)
    start_node resume 16 "$d/agent.sh"
    t0=$(now)
    for i in $(seq "$WF"); do
      printf '{"id": "w%d", "steps": [{"id": "a", "task": {"prompt": "slow"}}, {"id": "b", "depends_on": ["a"], "task": {"prompt": "fast"}}, {"id": "c", "depends_on": ["b"], "task": {"prompt": "fast"}}]}\n' "$i"
    done | ts submit - >/dev/null || exit 1
    t1=$(now)
    want=$((WF < 16 ? WF : 16))
    for _ in $(seq 3000); do
      [ "$(count_tasks running)" -ge "$want" ] && break
      sleep 0.2
    done
    echo "resume: $WF workflows submitted in $(echo "$t1 - $t0" | bc) s, $(count_tasks running) steps running, $(count_tasks queued) queued; journal $(stat -c %s "$d/resume/state/journal.db") bytes + WAL $(stat -c %s "$d/resume/state/journal.db-wal" 2>/dev/null || echo 0); node RSS $(rss_kb) kB"
    for r in $(seq "$ROUNDS"); do
      kill -KILL "$node"
      wait "$node" 2>/dev/null
      l0=$(load)
      t0=$(now)
      start_node resume 16 "$d/agent.sh"
      t1=$(now)
      out=""
      for _ in $(seq 60000); do
        out=$(ts status --json 2>/dev/null) && break
        kill -0 "$node" 2>/dev/null || break
      done
      t2=$(now)
      records=$(echo "$out" | grep -o '"task_id":"' | wc -l)
      running=0
      for _ in $(seq 6000); do
        running=$(count_tasks running)
        [ "$running" -ge "$want" ] && break
        sleep 0.05
      done
      t3=$(now)
      echo "RESULT name=workflow_resume workflows=$WF round=$r listening_s=$(echo "$t1 - $t0" | bc) status_s=$(echo "$t2 - $t0" | bc) status_records=$records adopted_s=$(echo "$t3 - $t0" | bc) running=$running rss_kb=$(rss_kb) load=$l0-$(load)"
      grep -ho 'journal in .*' "$d"/resume/node-*.err | tail -1
    done
    stop_node resume
    ;;
  *) echo "unknown part $part" >&2 ;;
  esac
done
echo "# done, $(uptime)"

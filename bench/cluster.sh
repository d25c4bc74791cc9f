#!/usr/bin/env bash
# The cluster (issue 12, BENCHMARKS.md §12), on loopback, in one run:
#  1. Attempts per second through a coordinator + 2 worker nodes (CAP slots
#     each) against one node alone with the same slots (2 × CAP), the two
#     setups alternating, ROUNDS times each: N tasks of one instant attempt
#     (/bin/true); N tasks of /bin/false with 4 retries each (5 attempts,
#     backoff 0); and one task of SERIAL /bin/false attempts in a row (its
#     time per attempt is the latency of one attempt, so the difference
#     between the setups is what the cluster adds to each attempt).
#  2. A worker's death: KILLS times, SIGKILL the worker running a task's
#     attempt and take the time from the kill to the attempt's start on the
#     other worker (the agent records its own start); then FREEZES times the
#     same with SIGSTOP against a coordinator at --peer-timeout 2, thawing
#     the worker after each and waiting for it to join again.
# Every task's attempts and outcome are checked against what it must have
# done. Prints the commit, date and load, progress on stderr, and the
# tables (markdown) on stdout.
#
#   N=500 ROUNDS=3 CAP=4 SERIAL=200 KILLS=20 FREEZES=5 bench/cluster.sh [tasksup]
#
# DIR (default $TMPDIR or /tmp) holds the nodes' state directories: the
# coordinator's (or the single node's) journal, and every attempt directory.
# KEEP=1 keeps them (and the nodes' logs) afterwards.
set -uo pipefail
T=$(realpath "${1:-$(dirname "$0")/../build/apps/tasksup}")
N=${N:-500}
ROUNDS=${ROUNDS:-3}
CAP=${CAP:-4}
SERIAL=${SERIAL:-200}
KILLS=${KILLS:-20}
FREEZES=${FREEZES:-5}
D=$(mktemp -d "${DIR:-${TMPDIR:-/tmp}}/tasksup-cluster.XXXXXX")

# Every tasksup command goes through ts, with the certificates of one CA
# made for this run (mutual TLS): the nodes and the client alike.
"$T" certs init "$D/certs" >/dev/null
ts_flags=(--certs "$D/certs")
ts() { "$T" "$1" "${ts_flags[@]}" "${@:2}"; }
# The same, in place of the shell running it: a node started with
# `ts_exec serve ... &` is the background process itself, so that $! is the
# node's process id (a signal to it reaches the node, not a shell around it).
ts_exec() { exec "$T" "$1" "${ts_flags[@]}" "${@:2}"; }

declare -A pid   # node name -> process id, for the nodes this script runs
cleanup() {
  local p
  for p in "${pid[@]}"; do
    { kill -CONT "$p"; kill -KILL "$p"; wait "$p"; } 2>/dev/null
  done
  if [ -n "${KEEP:-}" ]; then echo "kept $D" >&2; else rm -rf "$D"; fi
}
trap cleanup EXIT
die() {
  echo "cluster.sh: $*" >&2
  local f
  for f in "$D"/*.err; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }
  done
  exit 1
}
now() { date +%s.%N; }
say() { echo "$*" >&2; }
# until_ok SECONDS COMMAND...: runs COMMAND every 20 ms until it succeeds.
until_ok() {
  local limit=$1 t0
  shift
  t0=$(date +%s)
  until "$@"; do
    (($(date +%s) - t0 > limit)) && return 1
    sleep 0.02
  done
}

# One node configuration for every node: its slots only. The tasks name
# their agent; the circuit breaker never opens (every /bin/false attempt
# is a failure of the agent).
config() {
  mkdir -p "$D/config-$1"
  printf '{"max_concurrent": %d, "default_runtime": "process",
  "default_agent": {"agent_id": "none", "agent_cli": "/bin/false",
                    "cli_flags": ""},
  "circuit_breaker": {"max_failures": 100000000}}\n' "$2" \
    >"$D/config-$1/node.json"
  echo "$D/config-$1"
}

# start_coordinator NAME [FLAGS...]: a node on a free loopback port; sets
# addr once it listens.
start_coordinator() {
  local name=$1
  shift
  rm -rf "${D:?}/$name"
  : >"$D/$name.err"
  ts_exec serve --listen 127.0.0.1:0 --config "$(config "$name" $((2 * CAP)))" \
    --state-dir "$D/$name" --heartbeat-ms 200 "$@" 2>"$D/$name.err" &
  pid[$name]=$!
  until_ok 30 grep -q "listening on" "$D/$name.err" ||
    die "$name did not listen"
  addr=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' \
    "$D/$name.err" | head -n 1)
  coordinator=$name
}
joins() { grep -c "worker node $1 joined" "$D/$coordinator.err"; }
# start_worker NAME: a worker node with CAP slots joining the coordinator;
# returns once the coordinator has logged its join.
start_worker() {
  local name=$1 before
  before=$(joins "$name")
  ts_exec serve --join "$addr" --name "$name" --config "$(config "$name" "$CAP")" \
    --state-dir "$D/$name" --heartbeat-ms 200 --lease 1.5 \
    2>>"$D/$name.err" &
  pid[$name]=$!
  until_ok 30 eval '(($(joins "$name") > before))' ||
    die "$name did not join"
}
stop() {
  {
    kill -CONT "${pid[$1]}"
    kill -KILL "${pid[$1]}"
    wait "${pid[$1]}"
  } 2>/dev/null
  unset "pid[$1]"
}

# A task line: task ID, agent, retries per agent.
task() {
  printf '{"id": "%s", "prompt": "p", "agent_selection": {"agents": [{"agent_id": "a", "agent_cli": "%s", "cli_flags": "", "prompt_as_argument": false}]}, "supervisor": {"enable_fallback": false, "max_retries_per_agent": %d, "max_total_attempts": %d, "backoff_base_seconds": 0}}\n' \
    "$1" "$2" "$3" $(($3 + 1))
}
unfinished() {
  [ -n "$(ts status --json --node "$addr" --state queued,running,backoff)" ]
}
# The records of the tasks whose ids start with PREFIX, one per line:
# "id total_attempts outcome".
records() {
  ts status --json --node "$addr" | sed 's/},{"task_id"/}\n{"task_id"/g' |
    awk -v p="$1" '
      function get(re) { return match($0, re) ? substr($0, RSTART, RLENGTH) : "" }
      {
        id = get("\"task_id\":\"[^\"]*\""); gsub(/^"task_id":"|"$/, "", id)
        if (index(id, p) != 1) next
        n = get("\"total_attempts\":[0-9]+"); sub(/.*:/, "", n)
        o = get("\"outcome\":\"[a-z_]*\""); gsub(/^"outcome":"|"$/, "", o)
        print id, n, o
      }'
}

# batch TAG AGENT RETRIES COUNT: submits COUNT tasks at once, waits until
# every one is done, checks each made 1 + RETRIES attempts and ended as it
# must; prints "attempts seconds wrong", wrong being the number of tasks
# that did not (each named on stderr).
batch() {
  local tag=$1 agent=$2 retries=$3 count=$4 i t0 t1 want outcome wrong
  for ((i = 1; i <= count; i++)); do task "$tag-$i" "$agent" "$retries"; done \
    >"$D/$tag.jsonl"
  t0=$(now)
  ts submit --node "$addr" - <"$D/$tag.jsonl" >"$D/$tag.ids" ||
    die "$tag: submit failed"
  while unfinished; do sleep 0.1; done
  t1=$(now)
  [ "$(wc -l <"$D/$tag.ids")" = "$count" ] || die "$tag: not every task taken"
  want=$((retries + 1))
  outcome=succeeded
  [ "$agent" = /bin/false ] && outcome=failed
  records "$tag-" >"$D/$tag.records"
  [ "$(wc -l <"$D/$tag.records")" = "$count" ] ||
    die "$tag: $(wc -l <"$D/$tag.records") finished tasks of $count"
  wrong=$(awk -v want="$want" -v o="$outcome" -v tag="$tag" '
    $2 != want || $3 != o { bad++; print tag ": task " $0 " (expected " want " attempts, " o ")" > "/dev/stderr" }
    END { print bad + 0 }' "$D/$tag.records")
  awk -v a="$((count * want))" -v s="$t0" -v e="$t1" -v w="$wrong" \
    'BEGIN {print a, e - s, w}'
}

# One setup (single or cluster) in round R: the three workloads on fresh
# nodes; appends "setup workload round attempts seconds" to $D/results.
setup() {
  local kind=$1 r=$2 line
  if [ "$kind" = single ]; then
    start_coordinator "single-$r"
  else
    start_coordinator "coord-$r"
    start_worker w1
    start_worker w2
  fi
  say "round $r, $kind: $N × /bin/true"
  line=$(batch "$kind$r-true" /bin/true 0 "$N") || exit 1
  echo "$kind true $r $line" >>"$D/results"
  say "round $r, $kind: $N × /bin/false, 5 attempts each"
  line=$(batch "$kind$r-false" /bin/false 4 "$N") || exit 1
  echo "$kind false $r $line" >>"$D/results"
  say "round $r, $kind: 1 task of $SERIAL /bin/false attempts in a row"
  line=$(batch "$kind$r-serial" /bin/false $((SERIAL - 1)) 1) || exit 1
  echo "$kind serial $r $line" >>"$D/results"
  [ "$kind" = cluster ] && { stop w1; stop w2; }
  stop "$coordinator"
  echo "$kind lost $r $(grep -c "container worker died" "$D/$coordinator.err")" >>"$D/results"
}

# The agent of the loss rounds: records "task attempt directory time pid",
# works a minute on attempt 1 and ends at once on later ones.
cat >"$D/agent.sh" <<AGENT
#!/bin/sh
echo "\$TASKSUP_TASK_ID \$TASKSUP_ATTEMPT \$PWD \$(date +%s.%N) \$\$" >>"$D/ran.txt"
[ "\$TASKSUP_ATTEMPT" = 1 ] && exec sleep 60
exit 0
AGENT
chmod +x "$D/agent.sh"
touch "$D/ran.txt"
started() { grep -q "^$1 $2 " "$D/ran.txt"; }
field() { awk -v t="$1" -v a="$2" -v f="$3" '$1 == t && $2 == a {print $f; exit}' "$D/ran.txt"; }
node_of() {
  case $1 in
  "$D"/w1/*) echo w1 ;;
  "$D"/w2/*) echo w2 ;;
  *) echo "?" ;;
  esac
}

# loss KIND ID: one round: a task's attempt 1 starts on a worker; KIND
# (kill or freeze) takes that worker away; appends "seconds until attempt 2
# started, lost worker, other worker" to $D/KIND, then checks the task
# ended after 2 attempts, attempt 1's agent is gone and the worker has
# joined again. (Not in a subshell: it restarts workers.)
loss() {
  local kind=$1 id=$2 w other t0 t1 p1 before rec
  task "$id" "$D/agent.sh" 4 | ts submit --node "$addr" - >/dev/null ||
    die "$id: submit failed"
  until_ok 20 started "$id" 1 || die "$id: attempt 1 did not start"
  w=$(node_of "$(field "$id" 1 3)")
  p1=$(field "$id" 1 5)
  [ "$w" = "?" ] && die "$id: attempt 1 ran on no worker"
  # shellcheck disable=SC2034 # read by the eval in until_ok
  before=$(joins "$w")
  t0=$(now)
  if [ "$kind" = kill ]; then
    { kill -KILL "${pid[$w]}"; wait "${pid[$w]}"; } 2>/dev/null
  else
    kill -STOP "${pid[$w]}"
  fi
  until_ok 30 started "$id" 2 || die "$id: attempt 2 did not start"
  t1=$(field "$id" 2 4)
  other=$(node_of "$(field "$id" 2 3)")
  [ "$kind" = kill ] && start_worker "$w"
  [ "$kind" = freeze ] && {
    kill -CONT "${pid[$w]}"
    until_ok 30 eval '(($(joins "$w") > before))' ||
      die "$id: $w did not join again after SIGCONT"
  }
  until_ok 5 eval '! kill -0 "$p1" 2>/dev/null' ||
    die "$id: attempt 1's agent (pid $p1) outlived its worker $w"
  until_ok 20 eval '! unfinished' || die "$id: not done"
  rec=$(records "$id" | awk -v id="$id" '$1 == id')
  [ "$rec" = "$id 2 succeeded" ] || die "$id: '$rec' (expected 2 attempts, succeeded)"
  [ "$(grep -c "^$id " "$D/ran.txt")" = 2 ] || die "$id: started more than twice"
  awk -v a="$t0" -v b="$t1" -v w="$w" -v o="$other" \
    'BEGIN {printf "%.3f %s %s\n", b - a, w, o}' >>"$D/$kind"
  say "$id: $(tail -n 1 "$D/$kind")"
}
# stats FILE: "p50 p99 max" of the first column (nearest rank).
stats() {
  sort -n "$1" | awk '{v[NR] = $1} END {
    i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++
    i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++
    printf "%.3f %.3f %.3f\n", v[i50], v[i99], v[NR] }'
}

commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null)
echo "bench/cluster.sh: $("$T" --version 2>/dev/null | head -n 1), commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "N=$N ROUNDS=$ROUNDS CAP=$CAP SERIAL=$SERIAL KILLS=$KILLS FREEZES=$FREEZES DIR=$(dirname "$D")"
echo "load at start:$(uptime | sed 's/.*load average://')"

# 1. Throughput and latency, alternating.
: >"$D/results"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then setup single "$r"; setup cluster "$r"
  else setup cluster "$r"; setup single "$r"; fi
done
echo
echo "Attempts per second ($N tasks at once; single: 1 node, $((2 * CAP)) slots; cluster: coordinator + 2 workers × $CAP slots):"
echo
echo "| round | workload | attempts | single s | single attempts/s | cluster s | cluster attempts/s | cluster / single | tasks ended wrong (single, cluster) |"
echo "|---|---|---|---|---|---|---|---|---|"
for w in true false; do
  for ((r = 1; r <= ROUNDS; r++)); do
    awk -v w="$w" -v r="$r" '$2 == w && $3 == r {s[$1] = $5; a = $4; x[$1] = $6}
      END {printf "| %d | /bin/%s%s | %d | %.2f | %.0f | %.2f | %.0f | %.2f | %d, %d |\n", r, w,
        (w == "false" ? " ×5" : ""), a, s["single"], a / s["single"],
        s["cluster"], a / s["cluster"], s["single"] / s["cluster"], x["single"], x["cluster"]}' "$D/results"
  done
done
echo
echo "Latency of one attempt (1 task, $SERIAL /bin/false attempts in a row, backoff 0):"
echo
echo "| round | single ms/attempt | cluster ms/attempt | added by the cluster ms |"
echo "|---|---|---|---|"
for ((r = 1; r <= ROUNDS; r++)); do
  awk -v r="$r" '$2 == "serial" && $3 == r {s[$1] = $5 / $4 * 1000}
    END {printf "| %d | %.2f | %.2f | %.2f |\n", r, s["single"], s["cluster"],
      s["cluster"] - s["single"]}' "$D/results"
done
echo
echo "Attempts whose outcome was lost (\"container worker died: exit_reason(unknown)\" in the coordinator's log), per round (single, cluster):$(awk '$2 == "lost" {n[$1 " " $3] = $4} END {for (r = 1; ("single " r) in n; r++) printf " round %d: %d, %d;", r, n["single " r], n["cluster " r]}' "$D/results")"
echo "load after part 1:$(uptime | sed 's/.*load average://')"

# 2. Node loss.
start_coordinator coord-kill
start_worker w1
start_worker w2
: >"$D/kill"
for ((i = 1; i <= KILLS; i++)); do loss kill "kill-$i"; done
stop w1
stop w2
stop "$coordinator"
start_coordinator coord-freeze --peer-timeout 2
start_worker w1
start_worker w2
: >"$D/freeze"
for ((i = 1; i <= FREEZES; i++)); do loss freeze "freeze-$i"; done
stop w1
stop w2
stop "$coordinator"
echo
echo "From a worker's loss to its attempt's start on the other worker (seconds):"
echo
echo "| loss | rounds | p50 | p99 | max | every round |"
echo "|---|---|---|---|---|---|"
read -r k50 k99 kmax <<<"$(stats "$D/kill")"
read -r f50 f99 fmax <<<"$(stats "$D/freeze")"
echo "| SIGKILL | $KILLS | $k50 | $k99 | $kmax | $(cut -d' ' -f1 "$D/kill" | paste -sd' ') |"
echo "| SIGSTOP, --peer-timeout 2 | $FREEZES | $f50 | $f99 | $fmax | $(cut -d' ' -f1 "$D/freeze" | paste -sd' ') |"
echo
echo "Every loss round: 2 attempts, succeeded, attempt 1's agent gone, the worker joined again."
echo "load at end:$(uptime | sed 's/.*load average://')"

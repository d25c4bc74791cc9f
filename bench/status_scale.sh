#!/usr/bin/env bash
# `tasksup status` against a node with many finished tasks (issue 17,
# client start): N one-attempt tasks of /bin/true are submitted and run,
# then hyperfine times `status`, `status --json` (both over the node's
# control socket) and `status --certs DIR` (the TCP port with mutual TLS),
# and the first page of 100 (`status --limit 100`) both ways.
# With a second binary, a second node of that build gets the same tasks and
# its commands alternate with the first's in one hyperfine run (the node's
# side of `status` changes with the build too). Prints one RESULT line.
#
#   [QUEUED=1] [RUNS=20] [WARMUP=3] bench/status_scale.sh TASKSUP_BINARY [OTHER_TASKSUP_BINARY] [N=2001]
set -euo pipefail
bin=$1
other=${2:-}
n=${3:-2001}
# Attempt directories and journals on tmpfs: the disk is not what is measured.
SCRATCH_PARENT=/dev/shm source "$(dirname "${BASH_SOURCE[0]}")/scratch_nodes.sh"

# QUEUED=1: the tasks' agent sleeps an hour, so all but the node's four
# running ones stay queued (the registry asks an unfinished task's
# supervisor for its status); else they run /bin/true and finish.
queued=${QUEUED:-0}
printf '#!/bin/sh\nexec sleep 3600\n' >"$work/sleeper"
chmod +x "$work/sleeper"
python3 -c '
import json, sys
n, queued = int(sys.argv[1]), sys.argv[2] == "1"
agent = {"agent_id": "t", "agent_cli": sys.argv[3]} \
    if queued else {"agent_id": "t", "agent_cli": "/bin/true"}
for i in range(n):
    print(json.dumps({"id": "t-%d" % i, "prompt": "x",
                      "agent_selection": {"agents": [agent]}}))' "$n" "$queued" \
  "$work/sleeper" \
  >"$work/tasks.jsonl"
# Every finished task kept (the default keeps 10,000).
retain=()
((n > 10000)) && retain=(--retain-tasks "$n")

# start_node NAME BINARY: a node with its own state directory; sets $port.
start_node() {
  local name=$1 program=$2
  port=$((20000 + RANDOM % 20000))
  "$program" serve --listen "127.0.0.1:$port" --work-dir "$work/$name/work" \
    --state-dir "$work/$name/state" "${retain[@]}" >"$work/$name.log" 2>&1 &
  node_pids+=($!)
  for ((i = 0; i < 100; i++)); do
    TASKSUP_STATE_DIR=$work/$name/state "$program" status \
      --node "127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.1
  done
  TASKSUP_STATE_DIR=$work/$name/state "$program" submit - \
    --node "127.0.0.1:$port" <"$work/tasks.jsonl" >/dev/null
  [[ "$queued" == 1 ]] && return 0
  # Until every task has finished (bounded: 10 minutes).
  for ((i = 0; i < 6000; i++)); do
    local page done_n left
    # A build with pages: the line under a one-task page of the finished
    # ones counts them, and the node asks no supervisor for it.
    if page=$(TASKSUP_STATE_DIR=$work/$name/state "$program" status --json \
      --state done --limit 1 --node "127.0.0.1:$port" 2>&1 >/dev/null); then
      done_n=$(sed -n 's/^1 of \([0-9]*\) .*/\1/p' <<<"$page")
      [[ "${done_n:-0}" -ge "$n" ]] && return 0
    else
      # Before pages: the records of the unfinished tasks (a JSON array).
      left=$(TASKSUP_STATE_DIR=$work/$name/state "$program" status --json \
        --state queued,running,backoff,paused,quota_wait,not_now \
        --node "127.0.0.1:$port" | grep -o '"task_id"' | wc -l)
      [[ "$left" == 0 ]] && return 0
    fi
    sleep 0.1
  done
  echo "status_scale: $name's tasks did not finish" >&2
  exit 1
}

commands_for() { # NAME BINARY PORT
  local env="env TASKSUP_STATE_DIR=$work/$1/state"
  cmds+=("$env $2 status --node 127.0.0.1:$3"
    "$env $2 status --json --node 127.0.0.1:$3"
    "$env $2 status --node 127.0.0.1:$3 --certs $work/$1/state/certs")
}

cmds=()
start_node a "$bin"
commands_for a "$bin" "$port"
# The first page of 100, over the socket and over TLS (this build only).
cmds+=("env TASKSUP_STATE_DIR=$work/a/state $bin status --limit 100 --node 127.0.0.1:$port"
  "env TASKSUP_STATE_DIR=$work/a/state $bin status --limit 100 --node 127.0.0.1:$port --certs $work/a/state/certs")
if [[ -n "$other" ]]; then
  start_node b "$other"
  commands_for b "$other" "$port"
fi
hyperfine -N --warmup "${WARMUP:-3}" --runs "${RUNS:-20}" --export-json "$work/h.json" "${cmds[@]}"
mean_ms() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%.1f" % (1000*r[int(sys.argv[2])]["mean"]))' "$work/h.json" "$1"
}
extra=
[[ -n "$other" ]] && extra=" other_status_ms=$(mean_ms 5) other_json_ms=$(mean_ms 6) other_tcp_status_ms=$(mean_ms 7)"
echo "RESULT name=status_scale tasks=$n queued=$queued status_ms=$(mean_ms 0) json_ms=$(mean_ms 1) tcp_status_ms=$(mean_ms 2) first_page_ms=$(mean_ms 3) tcp_first_page_ms=$(mean_ms 4)$extra load1=$(cut -d' ' -f1 /proc/loadavg)"

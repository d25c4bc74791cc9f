#!/usr/bin/env bash
# Client start-up (issue 17): wall time of `tasksup --version` and of
# `tasksup status` against a running node, with hyperfine (Debian's package;
# scripts/bench.sh installs it), plus the instructions one `--version` runs
# under valgrind when valgrind is there (start-up work, load independent).
# `status` goes over the node's control socket (the commands share the
# node's state directory); `status --certs DIR` names the credentials and so
# goes over the TCP port with mutual TLS, timed in the same run (tcp_status).
# With a second binary (e.g. the previous build) the two alternate in one
# hyperfine run. Prints one RESULT line for the first binary.
#
#   bench/client_start.sh TASKSUP_BINARY [OTHER_TASKSUP_BINARY]
set -euo pipefail
bin=$1
other=${2:-}
source "$(dirname "${BASH_SOURCE[0]}")/scratch_nodes.sh"

port=$((20000 + RANDOM % 20000))
# The commands find the node's certificates in the same state directory.
export TASKSUP_STATE_DIR=$work/state
"$bin" serve --listen "127.0.0.1:$port" --work-dir "$work/node" \
  --state-dir "$work/state" >"$work/node.log" 2>&1 &
node_pids+=($!)
export TASKSUP_NODE=127.0.0.1:$port
for ((i = 0; i < 100; i++)); do
  "$bin" status >/dev/null 2>&1 && break
  sleep 0.1
done
"$bin" status >/dev/null || { cat "$work/node.log" >&2; exit 1; }

cmds=("$bin --version" "$bin status" "$bin status --certs $work/state/certs")
[[ -n "$other" ]] && cmds+=("$other --version" "$other status")
hyperfine -N --warmup 5 --runs 60 --export-json "$work/h.json" "${cmds[@]}"
mean_ms() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print("%.2f" % (1000*r[int(sys.argv[2])]["mean"]))' "$work/h.json" "$1"
}
instr=-1
if command -v valgrind >/dev/null; then
  instr=$(valgrind --tool=none --trace-children=no "$bin" --version 2>&1 >/dev/null |
    sed -n 's/.*total instrs.*: *//p' | head -n 1)
  [[ -n "$instr" ]] || instr=$(valgrind --tool=lackey "$bin" --version 2>&1 >/dev/null |
    sed -n 's/.*guest instrs: *//p' | tr -d , | head -n 1)
fi
# `submit` of one task per invocation (a fresh id each time; the agent is
# /bin/true), over the control socket and over the TCP port, alternating:
# the mean wall time per invocation from the shell's clock, less the same
# loop running /bin/true instead (the shell's own fork, exec and printf).
submit_loop_ms() { # PROGRAM PATH-TAG EXTRA-ARGS...
  local program=$1 tag=$2 start end
  shift 2
  start=$(date +%s%N)
  for ((i = 0; i < 100; i++)); do
    printf '{"id":"%s-%d","prompt":"x","agent_selection":{"agents":[{"agent_id":"t","agent_cli":"/bin/true"}]}}' \
      "$tag" "$i" >"$work/task.json"
    "$program" submit "$work/task.json" "$@" >/dev/null
  done
  end=$(date +%s%N)
  echo $(((end - start) / 100))
}
submit_ms() { # PATH-TAG EXTRA-ARGS...
  local with without
  with=$(submit_loop_ms "$bin" "$@")
  without=$(submit_loop_ms /bin/true "$@")
  python3 -c 'import sys; print("%.2f" % ((int(sys.argv[1]) - int(sys.argv[2])) / 1e6))' "$with" "$without"
}
local_submit=$(submit_ms local-a)
tcp_submit=$(submit_ms tcp-a --certs "$work/state/certs")
local_submit2=$(submit_ms local-b)
tcp_submit2=$(submit_ms tcp-b --certs "$work/state/certs")
extra=" submit_ms=$local_submit,$local_submit2 tcp_submit_ms=$tcp_submit,$tcp_submit2"
[[ -n "$other" ]] && extra+=" other_version_ms=$(mean_ms 3) other_status_ms=$(mean_ms 4)"
echo "RESULT name=client_start version_ms=$(mean_ms 0) status_ms=$(mean_ms 1) tcp_status_ms=$(mean_ms 2)$extra version_instructions=$instr load1=$(cut -d' ' -f1 /proc/loadavg)"

#!/usr/bin/env bash
# Client start-up (issue 17): wall time of `tasksup --version` and of
# `tasksup status` against a running node, with hyperfine (Debian's package;
# scripts/bench.sh installs it), plus the instructions one `--version` runs
# under valgrind when valgrind is there (start-up work, load independent).
# With a second binary (e.g. the previous build) the two alternate in one
# hyperfine run. Prints one RESULT line for the first binary.
#
#   bench/client_start.sh TASKSUP_BINARY [OTHER_TASKSUP_BINARY]
set -euo pipefail
bin=$1
other=${2:-}
work=$(mktemp -d)
node_pid=
cleanup() {
  [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
# The commands find the node's certificates in the same state directory.
export TASKSUP_STATE_DIR=$work/state
"$bin" serve --listen "127.0.0.1:$port" --work-dir "$work/node" \
  --state-dir "$work/state" >"$work/node.log" 2>&1 &
node_pid=$!
export TASKSUP_NODE=127.0.0.1:$port
for ((i = 0; i < 100; i++)); do
  "$bin" status >/dev/null 2>&1 && break
  sleep 0.1
done
"$bin" status >/dev/null || { cat "$work/node.log" >&2; exit 1; }

cmds=("$bin --version" "$bin status")
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
extra=
[[ -n "$other" ]] && extra=" other_version_ms=$(mean_ms 2) other_status_ms=$(mean_ms 3)"
echo "RESULT name=client_start version_ms=$(mean_ms 0) status_ms=$(mean_ms 1)$extra version_instructions=$instr load1=$(cut -d' ' -f1 /proc/loadavg)"

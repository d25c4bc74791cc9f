#!/usr/bin/env bash
# `tasksup run` instructions per attempt (issue 17), load independent: the
# task of bench/run_loop.sh (an agent failing until attempt N, backoff 0,
# `--quiet --no-output`) under callgrind at two attempt counts; the
# difference over the extra attempts is the cost of one attempt in the
# tasksup process (the agents are not traced). Also the part of it in
# `event_console::write` (the human view). Each binary given is measured
# the same way. Prints one RESULT line per binary.
#
#   bench/run_instructions.sh TASKSUP_BINARY [OTHER_BINARY...]
set -euo pipefail
small=${RUN_INSTRUCTIONS_SMALL:-21}
large=${RUN_INSTRUCTIONS_LARGE:-101}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /dev/shm/tasksup-runinstr.XXXXXX)
[[ -n "${RUN_INSTRUCTIONS_KEEP:-}" ]] && echo "work: $work" >&2
[[ -n "${RUN_INSTRUCTIONS_KEEP:-}" ]] || trap 'rm -rf "$work"' EXIT
# shellcheck source=bench/run_bench_setup.sh
. "$root/bench/run_bench_setup.sh"
run_bench_setup "$work" "$((large * 2))"
agent=$work/agent

task() { # attempts
  cat >"$work/task-$1.json" <<JSON
{
  "id": "run-bench",
  "prompt": "bench",
  "agent_selection": {
    "agents": [{"agent_id": "flaky", "agent_cli": "$agent",
                "cli_flags": "$1"}]
  },
  "supervisor": {"backoff_base_seconds": 0, "max_retries_per_agent": $1,
                 "max_total_attempts": $1, "enable_fallback": false,
                 "intensity": {"max_restarts": $(($1 * 2)), "period_s": 1,
                               "reset_after_s": 1}}
}
JSON
}
task "$small"
task "$large"

# Prints "total write" instructions of one run of `attempts`.
measure() { # binary attempts
  local out=$work/cg.out
  rm -f "$out"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$1" run --quiet \
    --no-output --config "$work/config" --work-dir "$work/w" \
    "$work/task-$2.json" >"$work/run.log" 2>&1 || true
  # The count holds whether the task ended well or not: every attempt ran.
  grep -q "attempts: $2," "$work/run.log" ||
    { echo "the run did not make $2 attempts" >&2; cat "$work/run.log" >&2; exit 1; }
  rm -rf "$work/w"
  local total write
  total=$(callgrind_annotate "$out" 2>/dev/null |
    sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
  write=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
    awk '/event_console::write/ {gsub(/,/, "", $1); print $1; exit}')
  echo "$total ${write:-0}"
}

for bin in "$@"; do
  read -r t1 w1 < <(measure "$bin" "$small")
  read -r t2 w2 < <(measure "$bin" "$large")
  n=$((large - small))
  echo "RESULT name=run_instructions binary=$bin per_attempt=$(((t2 - t1) / n)) event_console_per_attempt=$(((w2 - w1) / n)) attempts=$small/$large"
done

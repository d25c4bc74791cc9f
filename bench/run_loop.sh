#!/usr/bin/env bash
# `tasksup run` per attempt (issue 17): one task whose agent fails (exit 1)
# on attempts 1..N-1 and succeeds on attempt N, backoff 0, against a shell
# loop running the same agent N times with its output to a file in the same
# directory (no process but the agent's per attempt). The two sides
# alternate, `rounds` times each; attempt directories go under $dir (tmpfs or
# ext4). Prints one RESULT line.
#
#   bench/run_loop.sh TASKSUP_BINARY [attempts=1001] [rounds=3] [dir=/dev/shm]
set -euo pipefail
tasksup=$1
attempts=${2:-1001}
rounds=${3:-3}
dir=${4:-/dev/shm}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "$dir/tasksup-runbench.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The agent (exit 1 until attempt N, then 0) and the shipped configuration
# with the breaker opened only after every attempt.
# shellcheck source=bench/run_bench_setup.sh
. "$root/bench/run_bench_setup.sh"
run_bench_setup "$work" "$((attempts * 2))"
agent=$work/agent

cat >"$work/task.json" <<JSON
{
  "id": "run-bench",
  "prompt": "bench",
  "agent_selection": {
    "agents": [{"agent_id": "flaky", "agent_cli": "$agent",
                "cli_flags": "$attempts"}]
  },
  "supervisor": {"backoff_base_seconds": 0, "max_retries_per_agent": $attempts,
                 "max_total_attempts": $attempts, "enable_fallback": false,
                 "intensity": {"max_restarts": $((attempts * 2)), "period_s": 1,
                               "reset_after_s": 1}}
}
JSON

now() { date +%s.%N; }
div() { awk -v a="$1" -v b="$2" -v k="${3:-1}" 'BEGIN {print a / b * k}'; }
run_tasksup() {
  local w=$work/t.$1
  local start end
  start=$(now)
  "$tasksup" run --quiet --no-output --config "$work/config" --work-dir "$w" \
    "$work/task.json" \
    >"$work/run.out" 2>&1 || { cat "$work/run.out" >&2; exit 1; }
  end=$(now)
  # The run must have made every attempt: attempt-N holds the last one.
  [[ -d "$w/run-bench/attempt-$attempts" ]] || {
    echo "tasksup run did not reach attempt $attempts" >&2
    cat "$work/run.out" >&2
    exit 1
  }
  rm -rf "$w"
  awk -v a="$start" -v b="$end" 'BEGIN {print b - a}'
}
run_shell() {
  local w=$work/s.$1
  mkdir -p "$w"
  local start end i
  start=$(now)
  for ((i = 1; i <= attempts; i++)); do
    TASKSUP_ATTEMPT=$i "$agent" "$attempts" bench \
      >"$w/attempt-$i.log" 2>&1 || true
  done
  end=$(now)
  rm -rf "$w"
  awk -v a="$start" -v b="$end" 'BEGIN {print b - a}'
}

t_all=()
s_all=()
for ((r = 1; r <= rounds; r++)); do
  t=$(run_tasksup "$r")
  s=$(run_shell "$r")
  t_all+=("$t")
  s_all+=("$s")
  printf 'round %d: tasksup run %.3f s, shell loop %.3f s, ratio %.2f\n' \
    "$r" "$t" "$s" "$(div "$t" "$s")"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tm=$(median "${t_all[@]}")
sm=$(median "${s_all[@]}")
fs=$(df -T "$dir" | awk 'NR==2 {print $2}')
printf 'RESULT name=run_loop attempts=%d fs=%s tasksup_s=%.3f shell_s=%.3f ratio=%.2f per_attempt_us=%.0f load1=%s\n' \
  "$attempts" "$fs" "$tm" "$sm" "$(div "$tm" "$sm")" \
  "$(div "$tm" "$attempts" 1000000)" "$(cut -d' ' -f1 /proc/loadavg)"

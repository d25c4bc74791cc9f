#!/usr/bin/env bash
# Attempt directories run after run (issue 17): `runs` consecutive
# `tasksup run`s of one task whose agent (/bin/false) fails `attempts` times,
# backoff 0, each with a fresh --work-dir under every directory given,
# removed after the run (as a user cleaning up, or a benchmark, does); the
# directories take turns within each run number. Prints the cost per
# attempt of every run (wall, and system CPU time of tasksup and its
# children, which load from elsewhere moves less) and, per directory, last
# run / first run: on ext4 the inode allocator skips inodes deleted in the
# last seconds, so a run right after a removal can pay more per attempt than
# the one before it.
#
#   bench/attempt_dirs.sh TASKSUP_BINARY [attempts=300] [runs=10] [dir...]
#   (dirs default to /tmp /dev/shm)
#
# A dir given as BINARY::TMP runs BINARY with TMPDIR=TMP and its default work
# dir ($TMPDIR/tasksup/run-...), to compare two builds' defaults.
set -euo pipefail
tasksup=$1
attempts=${2:-300}
runs=${3:-10}
shift $(($# < 3 ? $# : 3))
dirs=("$@")
((${#dirs[@]} > 0)) || dirs=(/tmp /dev/shm)
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /dev/shm/tasksup-dirbench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The shipped configuration, the breaker opened only after every attempt.
cp -r "$root/config" "$work/config"
sed -i 's/"max_failures": [0-9]*/"max_failures": '"$((attempts * 2))"'/' \
  "$work/config/node.json"
cat >"$work/task.json" <<JSON
{
  "id": "dirs",
  "prompt": "bench",
  "agent_selection": {"agents": [{"agent_id": "false", "agent_cli": "/bin/false"}]},
  "supervisor": {"backoff_base_seconds": 0, "max_retries_per_agent": $attempts,
                 "max_total_attempts": $attempts, "enable_fallback": false,
                 "intensity": {"max_restarts": $((attempts * 2)), "period_s": 1,
                               "reset_after_s": 1}}
}
JSON

declare -A first last all sys_all
for ((r = 1; r <= runs; r++)); do
  line="run $r:"
  for d in "${dirs[@]}"; do
    bin=$tasksup
    args=()
    envs=()
    if [[ "$d" == *::* ]]; then
      bin=${d%%::*}
      mkdir -p "${d#*::}"
      envs=("TMPDIR=${d#*::}")
    else
      w=$(mktemp -d "$d/tasksup-dirbench-run.XXXXXX")
      args=(--work-dir "$w")
    fi
    TIMEFORMAT='%R %S'
    { time env "${envs[@]}" "$bin" run --quiet --no-output \
      --config "$work/config" "${args[@]}" "$work/task.json" \
      >"$work/out" 2>&1 || true; } 2>"$work/time"
    read -r wall sys <"$work/time"
    [[ "$d" != *::* ]] || w=$(ls -dt "${d#*::}"/tasksup/run-* | head -n 1)
    [[ -d "$w/dirs/attempt-$attempts" ]] || {
      echo "tasksup run did not reach attempt $attempts under $d" >&2
      cat "$work/out" >&2
      exit 1
    }
    rm -rf "$w"
    us=$(awk -v t="$wall" -v n="$attempts" 'BEGIN {printf "%.0f", t / n * 1e6}')
    sys_us=$(awk -v t="$sys" -v n="$attempts" 'BEGIN {printf "%.0f", t / n * 1e6}')
    [[ -n "${first[$d]:-}" ]] || first[$d]=$us
    last[$d]=$us
    all[$d]="${all[$d]:-}${all[$d]:+,}$us"
    sys_all[$d]="${sys_all[$d]:-}${sys_all[$d]:+,}$sys_us"
    line+=" $d $us us/attempt (sys $sys_us);"
  done
  echo "$line load $(cut -d' ' -f1 /proc/loadavg)"
done
result="RESULT name=attempt_dirs attempts=$attempts runs=$runs"
for d in "${dirs[@]}"; do
  fs=$(df -T "${d#*::}" | awk 'NR==2 {print $2}')
  key=$(basename "$(dirname "${d%%::*}")")-$(basename "${d#*::}")
  result+=" ${key}_fs=$fs ${key}_us=${all[$d]} ${key}_sys_us=${sys_all[$d]}"
  result+=" ${key}_last_over_first=$(awk -v a="${first[$d]}" -v b="${last[$d]}" \
    'BEGIN {printf "%.2f", b / a}')"
done
echo "$result load1=$(cut -d' ' -f1 /proc/loadavg)"

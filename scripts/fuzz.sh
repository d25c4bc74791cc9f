#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang into build-fuzz/ (or
# $TASKSUP_FUZZ_BUILD_DIR) and runs each for $TASKSUP_FUZZ_SECONDS seconds
# (default 60) from its seed corpus; one input running over 30 s is a hang
# and fails the run. New inputs go to a scratch directory, not
# into the tree; a crash fails the run and leaves its input in build-fuzz/.
# $TASKSUP_FUZZ_TARGETS picks targets (default: "classifier output task protocol
# journal"), one per core at a time under nice, e.g. for a longer run:
#   TASKSUP_FUZZ_TARGETS=task TASKSUP_FUZZ_SECONDS=600 scripts/fuzz.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${TASKSUP_FUZZ_SECONDS:-60}
"$root/scripts/bootstrap.sh"
generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
CXX=${TASKSUP_FUZZ_CXX:-clang++-14} cmake -S "$root" -B "$build" \
  "${generator[@]}" -DTASKSUP_FUZZ=ON -DTASKSUP_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
read -r -a targets <<<"${TASKSUP_FUZZ_TARGETS:-classifier output task protocol journal}"
for t in "${targets[@]}"; do
  [[ -d "$root/tests/fuzz/corpus/$t" ]] || {
    echo "fuzz.sh: no fuzz target '$t'" >&2
    exit 2
  }
done
cmake --build "$build" -j "$(nproc)" --target \
  $(for t in "${targets[@]}"; do echo "tasksup_${t}_fuzz"; done)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# One target per core at a time (each still gets its full time); each one's
# output is shown once it ends, and any failure fails the run.
fuzz_one() {
  local t=$1
  mkdir -p "$scratch/$t"
  (cd "$build" && UBSAN_OPTIONS=suppressions=$root/tests/sanitizers/ubsan.supp \
    nice -n 10 "$build/tests/fuzz/tasksup_${t}_fuzz" -max_total_time="$seconds" \
    -max_len=65536 -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
    "$scratch/$t" "$root/tests/fuzz/corpus/$t") >"$scratch/$t.log" 2>&1
}
jobs_max=$(nproc)
declare -A running=()
failed=()
# Waits for one target to end, shows its output and notes a failure.
reap_one() {
  local pid t rc
  if wait -n -p pid; then rc=0; else rc=$?; fi
  for t in "${!running[@]}"; do
    [[ ${running[$t]} == "$pid" ]] || continue
    unset "running[$t]"
    echo "== fuzz $t (exit $rc)" >&2
    cat "$scratch/$t.log" >&2
    ((rc == 0)) || failed+=("$t")
  done
}
for t in "${targets[@]}"; do
  while ((${#running[@]} >= jobs_max)); do reap_one; done
  echo "fuzzing $t for ${seconds}s" >&2
  fuzz_one "$t" &
  running[$t]=$!
done
while ((${#running[@]} > 0)); do reap_one; done
if ((${#failed[@]} > 0)); then
  echo "fuzz.sh: failed: ${failed[*]} (inputs in $build)" >&2
  exit 1
fi

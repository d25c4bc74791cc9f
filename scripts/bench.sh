#!/usr/bin/env bash
# Builds the benchmarks in Release (-O2) into build-release/ (or
# $TASKSUP_BENCH_BUILD_DIR) and runs them all with sizes that finish in a few
# minutes on 2 cores. Every program ends with one `RESULT name=... key=value`
# line; this script prints the machine first and collects the RESULT lines at
# the end (also into $TASKSUP_BENCH_OUT, default build-release/bench-results.txt).
# Figures and what bounds them: BENCHMARKS.md.
#
#   scripts/bench.sh            # everything
#   scripts/bench.sh classifier # only the runs whose name matches
#   TASKSUP_BENCH_FULL=1 scripts/bench.sh   # adds the 100,000-task run on
#                                           # the default scheduler (minutes)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_BENCH_BUILD_DIR:-$root/build-release}
out=${TASKSUP_BENCH_OUT:-$build/bench-results.txt}
filter=${1:-}

"$root/scripts/bootstrap.sh"
generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DTASKSUP_BUILD_TESTS=OFF \
  -DTASKSUP_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target tasksup bench_classifier \
  bench_spawn_loop bench_supervision bench_caf_floor bench_memory bench_process \
  bench_docker

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -n 1)," \
  "$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)"
echo "commit:  $(git -C "$root" rev-parse --short HEAD)"

bin=$build/bench
results=()
run() {
  local label=$1
  shift
  [[ -z "$filter" || "$label" == *"$filter"* ]] || return 0
  echo
  echo "== $label: ${*#"$root/"}   (load average$(uptime | sed 's/.*load average//'))"
  local log
  log=$(mktemp)
  if "$@" | tee "$log"; then
    results+=("$(grep '^RESULT ' "$log" | tail -n 1)")
  else
    results+=("FAILED $label: $*")
  fi
  rm -f "$log"
}

# 4. Classifier: 100-line tail and a 10 MB log, RE2 against std::regex.
run classifier "$bin/bench_classifier" --log-mb=10 --tasksup="$build/apps/tasksup"

# 1. Supervision throughput and latency (in-memory runtime, zero backoff).
run supervision-1 "$bin/bench_supervision" --tasks=1 --failures=20000
run supervision-1k "$bin/bench_supervision" --tasks=1000 --failures=20
run supervision-1k-sharing "$bin/bench_supervision" --tasks=1000 --failures=20 --policy=sharing
run supervision-100k-sharing "$bin/bench_supervision" --tasks=100000 --failures=3 --policy=sharing
# The same actors and messages with no tasksup code: CAF's own share.
run caf-floor-1 "$bin/bench_caf_floor" --tasks=1 --failures=20000
run caf-floor-1k "$bin/bench_caf_floor" --tasks=1000 --failures=20
if [[ -n "${TASKSUP_BENCH_FULL:-}" ]]; then
  run supervision-100k "$bin/bench_supervision" --tasks=100000 --failures=3
fi

# 2. Memory per task parked in a one-hour backoff.
run memory "$bin/bench_memory" --tasks=100000
# The same through a node's registry on the CLI's scheduler, tasks arriving
# 1,000 at a time; and everything at once on that scheduler (the worst burst).
run memory-node "$bin/bench_memory" --tasks=100000 --via=registry --batch=1000 \
  --policy=sharing
run memory-burst-sharing "$bin/bench_memory" --tasks=100000 --policy=sharing

# 3. Process runtime against posix_spawn + waitpid of /bin/false.
run process "$bin/bench_process" --restarts=1000 --binary=/bin/false
# The same with the attempt directories on tmpfs: how much is the disk.
run process-tmpfs "$bin/bench_process" --restarts=1000 --binary=/bin/false --tmp=/dev/shm

# 5. Docker runtime against docker run --rm (needs scripts/docker-setup.sh).
run docker "$bin/bench_docker" --attempts=20

echo
echo "== results"
mkdir -p "$(dirname "$out")"
printf '%s\n' "${results[@]}" | tee "$out"

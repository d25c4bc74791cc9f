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
# Measuring tools of the benchmarks only (not needed to build or test):
# hyperfine for the client start, valgrind for instruction counts, Erlang/OTP
# (erlang-base) for the peers of the supervision and process benchmarks,
# curl and openssl for the webhook benchmark.
missing=()
command -v hyperfine >/dev/null || missing+=(hyperfine)
command -v valgrind >/dev/null || missing+=(valgrind)
command -v escript >/dev/null || missing+=(erlang-base)
# curl and openssl sign and send the webhook benchmark's deliveries.
command -v curl >/dev/null || missing+=(curl)
command -v openssl >/dev/null || missing+=(openssl)
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -eq 0 ]]; then
    apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "bench.sh: install ${missing[*]} (apt-get) for every figure" >&2
  fi
fi
generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DTASKSUP_BUILD_TESTS=OFF \
  -DTASKSUP_WERROR=ON >/dev/null
# tasksup-shim: the process runtime runs every attempt under it.
cmake --build "$build" -j "$(nproc)" --target tasksup tasksup-shim bench_classifier \
  bench_spawn_loop bench_supervision bench_caf_floor bench_memory bench_process \
  bench_docker bench_groups bench_nats_intake

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

# 4. Classifier: 100-line tail and a 10 MB log, RE2 against std::regex, and
# the engine before issue 17 (alternating) on the same tails.
run classifier "$bin/bench_classifier" --log-mb=10 --tasksup="$build/apps/tasksup"
# Instructions per classification of the no-match 100-line tail, new and old
# engine: callgrind totals at 2,000 calls minus 0 calls.
classifier_instructions() {
  local side case n0 n1
  for side in new old; do
    for case in nomatch ratelimit; do
      n0=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$bin/bench_classifier" --only=$side --case=$case --calls=0 2>&1 |
        sed -n 's/.*refs: *//p' | tr -d ,)
      n1=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$bin/bench_classifier" --only=$side --case=$case --calls=2000 2>&1 |
        sed -n 's/.*refs: *//p' | tr -d ,)
      echo "$side engine, $case tail: $(((n1 - n0) / 2000)) instructions per call"
      line+=" ${side}_${case}=$(((n1 - n0) / 2000))"
    done
  done
  echo "RESULT name=classifier_instructions$line"
}
if command -v valgrind >/dev/null; then
  line=
  run classifier-instructions classifier_instructions
fi

# 6. `tasksup run`: 1,001 attempts (exit 1, then 0; backoff 0) against a
# shell loop running the same agent, attempt directories on tmpfs and ext4.
run run-loop-tmpfs "$root/bench/run_loop.sh" "$build/apps/tasksup" 1001 3 /dev/shm
run run-loop-ext4 "$root/bench/run_loop.sh" "$build/apps/tasksup" 1001 3 "${TMPDIR:-/tmp}"
# Attempt directories run after run (issue 17): 10 consecutive runs of 300
# attempts on the disk's temporary directory and on tmpfs, alternating.
run attempt-dirs "$root/bench/attempt_dirs.sh" "$build/apps/tasksup" 300 10 \
  "${TMPDIR:-/tmp}" /dev/shm

# 7. Client start: `tasksup --version` and `tasksup status` against a node.
# `status` against a node with 2,001 finished tasks, and the floor of any
# command over the TCP port (bare C clients: TLS library, credentials,
# mutual-TLS handshake).
if command -v hyperfine >/dev/null; then
  run client-start "$root/bench/client_start.sh" "$build/apps/tasksup"
  run status-scale "$root/bench/status_scale.sh" "$build/apps/tasksup" "" 2001
  run tls-client-floor "$root/bench/tls_client_floor.sh" "$build/apps/tasksup"
fi

# 11. Mutual TLS: `tasksup status` against a TLS node and an --insecure one.
run tls-round-trip "$root/bench/tls_round_trip.sh" "$build/apps/tasksup" 50

# 16. Coordinators on a shared PostgreSQL journal: against SQLite, failover
# under load, resume (the tests' throwaway server, scripts/postgres-test.sh).
run journal-backends env N=500 ROUNDS=1 "$root/bench/journal_backends.sh" "$build/apps/tasksup"
run failover env KILLS=5 TASKS=200 WORK=1 "$root/bench/failover.sh" "$build/apps/tasksup"
run journal-resume-pg env FIN=2000 UNF=2000 ROUNDS=1 "$root/bench/journal_resume_pg.sh" "$build/apps/tasksup"
# Message-driven automation (issue 35, BENCHMARKS.md §19): JetStream intake
# on a real nats-server, webhook to attempt start, and a minute of schedule
# drift (the hour-long figure: bench/schedule_drift.sh BINARY 3600).
run nats-intake "$bin/bench_nats_intake" --tasksup="$build/apps/tasksup" --messages=40000
run webhook-latency "$root/bench/webhook_latency.sh" "$build/apps/tasksup" 200
run schedule-drift "$root/bench/schedule_drift.sh" "$build/apps/tasksup" 60

# 1. Supervision throughput and latency (in-memory runtime, zero backoff).
run supervision-1 "$bin/bench_supervision" --tasks=1 --failures=20000
run supervision-1k "$bin/bench_supervision" --tasks=1000 --failures=20
run supervision-1k-sharing "$bin/bench_supervision" --tasks=1000 --failures=20 --policy=sharing
run supervision-100k-sharing "$bin/bench_supervision" --tasks=100000 --failures=3 --policy=sharing
# The same actors and messages with no tasksup code: CAF's own share.
run caf-floor-1 "$bin/bench_caf_floor" --tasks=1 --failures=20000
run caf-floor-1k "$bin/bench_caf_floor" --tasks=1000 --failures=20
# tasksup's own scheduler policy on both sides (handoff_scheduler.hpp).
run supervision-1k-handoff "$bin/bench_supervision" --tasks=1000 --failures=20 --policy=handoff
# Under a registry as on a node (a permit per attempt): the floor's pattern.
run supervision-1k-handoff-services "$bin/bench_supervision" --tasks=1000 --failures=20 --policy=handoff --services=parent
run caf-floor-1k-handoff "$bin/bench_caf_floor" --tasks=1000 --failures=20 --policy=handoff
if [[ -n "${TASKSUP_BENCH_FULL:-}" ]]; then
  run supervision-100k "$bin/bench_supervision" --tasks=100000 --failures=3
fi

# 17. Group supervisors (issue 33), on an in-process host whose members run
# and stop at once: 50 one_for_all restarts of a 1,000-member group, and a
# 10 x 10 x 100 tree started and stopped; on CAF's default scheduler and on
# the hand-off scheduler the CLI runs. OTP's peers follow below.
run groups-one-for-all "$bin/bench_groups" --case=one_for_all --members=1000 --restarts=50
run groups-one-for-all-handoff "$bin/bench_groups" --case=one_for_all --members=1000 --restarts=50 --policy=handoff
run groups-tree "$bin/bench_groups" --case=tree --members=10000
run groups-tree-handoff "$bin/bench_groups" --case=tree --members=10000 --policy=handoff

# Erlang/OTP peers, same machine, same run: a simple_one_for_one supervisor
# with N dynamic children restarting (transient, at once), and an Erlang port
# loop running /bin/false (the peer of section 3's process runtime).
if command -v escript >/dev/null; then
  # OTP keeps every restart of the last `period` (1 s) in a list it walks on
  # each restart, so one supervisor's cost per restart grows with its
  # restart rate: 2,000 restarts show the per-restart cost, 20,000 (the
  # same count as supervision-1) include that growth.
  run erlang-sup-1-2k escript "$root/bench/erlang_peers.escript" sup 1 2000
  run erlang-sup-1 escript "$root/bench/erlang_peers.escript" sup 1 20000
  run erlang-sup-1k escript "$root/bench/erlang_peers.escript" sup 1000 20
  run erlang-port escript "$root/bench/erlang_peers.escript" port 1000 /bin/false
  # The peers of section 17: OTP's supervisor, one_for_all over 1,000 static
  # workers, and a 10 x 10 x 100 tree of supervisors.
  run erlang-groups-one-for-all escript "$root/bench/erlang_groups.escript" one_for_all 1000 50
  run erlang-groups-tree escript "$root/bench/erlang_groups.escript" tree 10000
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

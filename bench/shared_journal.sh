# Sourced by the benchmarks of coordinators sharing a PostgreSQL journal
# (failover.sh, journal_resume_pg.sh): the tests' throwaway server with one
# database, certificates every process uses, two coordinators (0 and 1) on
# it, and the waits they need. Set before sourcing: root, T (the tasksup
# binary), LEASE, NAME (the scratch directory's and database's name) and
# COORDINATOR_FLAGS (an array of further `serve` flags). Sets d (the scratch
# directory), url, pids (killed at exit) and cpid (the coordinators').
d=$(mktemp -d "/tmp/tasksup-$NAME-XXXXXX")
[ -d "$d" ] || exit 1
"$root/scripts/postgres-test.sh" start "$d/pg" > /dev/null || exit 1
server=$(cat "$d/pg/url")
psql -q "$server" -c "CREATE DATABASE ${NAME//-/_}" || exit 1
url=${server%/*}/${NAME//-/_}
pids=()
cleanup() {
  [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  "$root/scripts/postgres-test.sh" stop "$d/pg"
  rm -rf "$d"
}
trap cleanup EXIT
export TASKSUP_STATE_DIR=$d/state
"$T" certs init "$d/state/certs" > /dev/null || exit 1
mkdir -p "$d/config"
ports=($((20000 + RANDOM % 10000)) $((30000 + RANDOM % 10000)))
addr() { echo "127.0.0.1:${ports[$1]}"; }
cpid=("" "")
# Starts coordinator $1 (its log: $d/c$1.err, appended to).
start() {
  "$T" serve --listen "$(addr "$1")" --config "$d/config" --state-dir "$d/c$1" \
    --certs "$d/state/certs" --journal "$url" --leader-lease "$LEASE" \
    "${COORDINATOR_FLAGS[@]}" 2>> "$d/c$1.err" &
  cpid[$1]=$!
  pids+=($!)
}
# Waits (10 ms steps, at most 120 s) until file $1 has more than $2 lines
# matching $3.
wait_for() {
  for _ in $(seq 12000); do
    [ "$(grep -c "$3" "$1" 2>/dev/null)" -gt "$2" ] && return 0
    sleep 0.01
  done
  echo "timed out waiting for '$3' in $1" >&2
  tail -20 "$1" >&2
  exit 1
}
# The time of log line $1, from its own timestamp (seconds).
stamp() { date -d "$(echo "$1" | cut -c1-23)" +%s.%N; }
# Starts coordinator 0, waits until it leads, then 1 until it stands by.
start_leader_and_standby() {
  start 0; wait_for "$d/c0.err" 0 "leading (epoch"
  start 1; wait_for "$d/c1.err" 0 "stands by"
}

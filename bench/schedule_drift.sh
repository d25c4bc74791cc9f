#!/usr/bin/env bash
# Schedule drift (issue 35): a node runs one schedule, `"every": "1s"`, for
# SECONDS (default 3600). Each run's task is named by its due time
# (tick-YYYYMMDDTHHMMSSZ, whole seconds: an interval fires at its multiples
# since the epoch) and the node logs, to the millisecond, when it submitted
# it. A run's drift is that time less its due time. Prints one RESULT line:
# runs seen, runs missed (due times with no run), drift p50, p99 and max.
#
#   bench/schedule_drift.sh TASKSUP_BINARY [SECONDS=3600]
set -euo pipefail
tasksup=$(realpath "${1:?path to the tasksup binary}")
secs=${2:-3600}
work=$(mktemp -d)
trap 'kill -9 "$node" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/config/schedules"
cat >"$work/config/node.json" <<JSON
{"max_concurrent": 4, "default_agent": {"agent_id": "t", "agent_cli": "/bin/true",
 "cli_flags": "", "prompt_as_argument": true}, "default_runtime": "process"}
JSON
echo '{"every": "1s", "task": {"prompt": "tick"}}' >"$work/config/schedules/tick.json"
# The log's times are UTC, as the run ids'.
TZ=UTC "$tasksup" serve --listen 127.0.0.1:0 --config "$work/config" \
  --state-dir "$work/state" 2>"$work/node.err" &
node=$!
sleep "$secs"
kill -TERM "$node"
wait "$node" || true
python3 - "$work/node.err" "$secs" <<'PY'
import datetime, re, sys
log, secs = sys.argv[1], int(sys.argv[2])
pat = re.compile(r"^(\S+ \S+) tasksup info: \[tick-(\d{8}T\d{6}Z)\] task \S+ submitted")
drifts = {}
for line in open(log, errors="replace"):
    m = pat.match(line)
    if not m:
        continue
    at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
    due = datetime.datetime.strptime(m.group(2), "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    drifts[due] = (at - due).total_seconds() * 1000
if not drifts:
    sys.exit("no runs in the log")
dues = sorted(drifts)
span = int((dues[-1] - dues[0]).total_seconds()) + 1
ms = sorted(drifts.values())
pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
print("RESULT name=schedule_drift seconds=%d runs=%d missed=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f"
      % (secs, len(ms), span - len(ms), pick(0.5), pick(0.99), ms[-1]))
PY

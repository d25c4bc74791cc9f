#!/bin/bash
# Peak RSS, wall time and output sizes of `tasksup run` while its agent floods
# it (BENCHMARKS.md §6). usage: bench/flood_measure.sh BIN lines|line BYTES [NODE_JSON]
# NODE_JSON defaults to the limits the integration test uses; pass '{}' for
# the defaults (or for a build without the `output` key).
BIN=$1; MODE=$2; BYTES=$3
NODE_JSON=${4:-'{"output": {"log_max_bytes": 8388608, "line_max_bytes": 256, "attempt_max_bytes": 65536}}'}
SRC=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d /tmp/flood-XXXX)
mkdir -p $D/config
echo "$NODE_JSON" > $D/config/node.json
cp $SRC/config/classifier.json $D/config/
cat > $D/task.json <<T
{"id": "flood", "prompt": "flood", "agent_selection": {"agents": [{"agent_id": "flood", "agent_cli": "$SRC/tests/fixtures/flood.sh", "cli_flags": "$MODE $BYTES", "prompt_as_argument": false}]}, "supervisor": {"max_retries_per_agent": 0}}
T
start=$(date +%s.%N)
$BIN run --config $D/config --events $D/ev.jsonl --work-dir $D/work $D/task.json > $D/out 2> $D/err &
PID=$!
peak=0
while kill -0 $PID 2>/dev/null; do
  r=$(awk '/VmRSS/{print $2}' /proc/$PID/status 2>/dev/null); [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r
  sleep 0.05
done
wait $PID; rc=$?
end=$(date +%s.%N)
echo "rc=$rc peak_rss_kb=$peak wall_s=$(echo "$end - $start" | bc) log_bytes=$(stat -c %s $(find $D/work -name output.log)) events_bytes=$(stat -c %s $D/ev.jsonl) console_bytes=$(cat $D/out $D/err | wc -c)"
grep -o '"stream":"tasksup"[^}]*' $D/ev.jsonl | head -2
tail -c 300 $(find $D/work -name output.log)
grep -v "\"log\"" $D/ev.jsonl | cut -c1-300; tail -5 $D/err; rm -rf $D

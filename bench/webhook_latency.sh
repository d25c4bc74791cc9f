#!/usr/bin/env bash
# Webhook to attempt start (issue 35): N deliveries, one every 100 ms, each
# signed with HMAC-SHA256 (openssl) and POSTed by curl to a generic trigger
# at /hooks/NAME of a node with --http. A delivery's latency is from the
# moment before curl starts to the node's log line of its task's first
# attempt starting (milliseconds, the node's clock; both on this machine).
# The agent is /bin/true and the node runs 4 attempts at once, so tasks do
# not queue. Prints one RESULT line: deliveries, answered 200, p50, p99 and
# max latency.
#
#   bench/webhook_latency.sh TASKSUP_BINARY [N=200]
set -euo pipefail
tasksup=$(realpath "${1:?path to the tasksup binary}")
n=${2:-200}
work=$(mktemp -d)
trap 'kill -9 "$node" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/config/triggers"
cat >"$work/config/node.json" <<JSON
{"max_concurrent": 4, "default_agent": {"agent_id": "t", "agent_cli": "/bin/true",
 "cli_flags": "", "prompt_as_argument": true}, "default_runtime": "process"}
JSON
secret=bench-secret-$RANDOM$RANDOM
printf '%s\n' "$secret" >"$work/config/hook.secret"
cat >"$work/config/triggers/hook.json" <<'JSON'
{"source": "generic", "secret_file": "hook.secret", "on": {"/kind": "job"},
 "task": {"prompt": "delivery {{delivery}}"}}
JSON
TZ=UTC "$tasksup" serve --listen 127.0.0.1:0 --config "$work/config" \
  --state-dir "$work/state" --http 127.0.0.1:0 2>"$work/node.err" &
node=$!
disown "$node"
port=
for _ in $(seq 200); do
  port=$(sed -n 's|.*dashboard on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$work/node.err" | head -n 1)
  [[ -n "$port" ]] && break
  sleep 0.05
done
[[ -n "$port" ]] || { echo "the node did not serve HTTP" >&2; exit 1; }
: >"$work/sent.txt"
ok=0
for i in $(seq "$n"); do
  body="{\"kind\": \"job\", \"n\": $i}"
  sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$secret" -r | cut -d' ' -f1)
  echo "d-$i $(date +%s.%N)" >>"$work/sent.txt"
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Tasksup-Signature-256: sha256=$sig" \
    -H "X-Tasksup-Delivery: d-$i" -H 'Content-Type: application/json' \
    --data "$body" "http://127.0.0.1:$port/hooks/hook")
  [[ "$code" == 200 ]] && ok=$((ok + 1))
  sleep 0.1
done
# Until every task's attempt started (bounded: 30 s).
for _ in $(seq 300); do
  (($(grep -c 'attempt 1: .* started' "$work/node.err" || true) >= ok)) && break
  sleep 0.1
done
python3 - "$work/sent.txt" "$work/node.err" "$n" "$ok" <<'PY'
import datetime, re, sys
sent = {}
for line in open(sys.argv[1]):
    d, t = line.split()
    sent[d] = float(t)
pat = re.compile(r"^(\S+ \S+) tasksup info: \[hook-(d-\d+)\] attempt 1: .* started")
ms = []
for line in open(sys.argv[2], errors="replace"):
    m = pat.match(line)
    if m and m.group(2) in sent:
        at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
        ms.append((at - sent[m.group(2)]) * 1000)
if not ms:
    sys.exit("no attempt started")
ms.sort()
pick = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
print("RESULT name=webhook_latency deliveries=%s answered_200=%s started=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f"
      % (sys.argv[3], sys.argv[4], len(ms), pick(0.5), pick(0.99), ms[-1]))
PY

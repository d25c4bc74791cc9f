# Sourced by bench/run_loop.sh and bench/run_instructions.sh: the agent and
# configuration of their `tasksup run` task.
#
#   run_bench_setup WORK MAX_FAILURES
#
# WORK/agent prints one line, exits 1 until attempt N (its first argument,
# the task's cli_flags), then 0 (the demo flaky-agent prints its attempt
# number, and "attempt 429" is a rate limit). WORK/config is the shipped
# configuration with the node's per-agent circuit breaker opened only after
# MAX_FAILURES failures (it would stop the task after 5).
run_bench_setup() {
  local work=$1 max_failures=$2
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  cat >"$work/agent" <<'AGENT'
#!/bin/sh
echo "bench-agent: working on $2"
[ "${TASKSUP_ATTEMPT:-1}" -ge "$1" ] && exit 0
echo "error: transient failure" >&2
exit 1
AGENT
  chmod +x "$work/agent"
  cp -r "$root/config" "$work/config"
  sed -i 's/"max_failures": [0-9]*/"max_failures": '"$max_failures"'/' \
    "$work/config/node.json"
  grep -q "\"max_failures\": $max_failures" "$work/config/node.json"
}

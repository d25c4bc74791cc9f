#!/usr/bin/env bash
# Installs what is missing, builds, and runs the demo task on the process
# runtime: the primary agent is not installed, so tasksup falls back to a
# backup agent that is rate limited twice (HTTP 429 with Retry-After) and then
# succeeds. Pass another task file to run that instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_BUILD_DIR:-$root/build}
"$root/scripts/build.sh" >/dev/null
task=${1:-$root/config/examples/demo-recovery.json}
echo "tasksup run $task" >&2
exec "$build/apps/tasksup" run --config "$root/config" "$task"

#!/usr/bin/env bash
# Installs the real agent CLIs that the agent-profile integration tests run
# (claude, codex, gemini, qwen), pinned to exact versions, from the npm
# registry into <build>/agent-clis (never globally). Idempotent: a tree that
# already holds these exact versions is left alone. When npm or the registry
# cannot be reached it says so and exits 0: the tests that need a CLI skip
# with a visible message naming the missing one.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TASKSUP_BUILD_DIR:-$root/build}
dest=${TASKSUP_AGENT_CLIS_DIR:-$build/agent-clis}

# Pinned versions: bump deliberately, re-run the integration tests and refresh
# tests/fixtures/agent-logs/ when a CLI changes what it prints.
pins=(
  "@anthropic-ai/claude-code@2.1.330"
  "@openai/codex@0.169.0"
  "@google/gemini-cli@0.61.0"
  "@qwen-code/qwen-code@0.24.4"
)

if ! command -v npm >/dev/null 2>&1; then
  echo "tasksup: npm not found: real agent CLI tests will be skipped (scripts/bootstrap.sh installs it)" >&2
  exit 0
fi

stamp="$dest/.pins"
want=$(printf '%s\n' "${pins[@]}")
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi

mkdir -p "$dest"
echo "tasksup: installing agent CLIs into $dest: ${pins[*]}" >&2
if ! timeout 600 npm install --prefix "$dest" --no-save --no-audit --no-fund \
  --loglevel=error "${pins[@]}" >&2; then
  echo "tasksup: npm install failed (registry unreachable?): real agent CLI tests will be skipped" >&2
  exit 0
fi
printf '%s\n' "$want" >"$stamp"

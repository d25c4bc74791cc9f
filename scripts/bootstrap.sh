#!/usr/bin/env bash
# Installs exactly what tasksup needs and is missing, from Debian's packages.
# Idempotent: a second run installs nothing. Needs root (or sudo) only when
# something is missing. Set TASKSUP_WITH_DOCKER=1 to include the Docker Engine
# and busybox (for the docker runtime tests).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang-format
  clang-14 libclang-rt-14-dev
  libcaf-dev libssl-dev
  libboost1.81-dev libboost-json1.81-dev libboost-system1.81-dev
  libspdlog-dev libfmt-dev catch2 libre2-dev libcli11-dev libsqlite3-dev
  # Answers are checked against JSON Schema with valijson; its tests run the
  # official JSON-Schema-Test-Suite.
  libvalijson-dev json-schema-test-suite
  # The time zones quota resets and cron schedules name (/usr/share/zoneinfo).
  tzdata
  # The PostgreSQL journal (libpq), and the server its tests start
  # (scripts/postgres-test.sh).
  libpq-dev postgresql-15
  # Task intake from NATS JetStream (serve --nats): its C client, and the
  # server its tests start.
  libnats-dev nats-server
  # The observability tests: Prometheus' own text parser checks /metrics,
  # a headless browser loads the dashboard.
  python3-prometheus-client chromium
)
# npm installs the real agent CLIs for the agent-profile tests
# (scripts/agent-clis.sh); a node that came with its own npm is kept.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
if [[ "${TASKSUP_WITH_DOCKER:-0}" == 1 ]]; then
  packages+=(docker.io busybox-static)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "tasksup: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || {
    echo "tasksup: need root to install: ${missing[*]}" >&2
    exit 1
  }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"

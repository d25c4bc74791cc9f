#!/usr/bin/env bash
# Installs the tasksup build in BUILD into a scratch prefix and checks the
# systemd unit it ships: in <prefix>/lib/systemd/system, Type=notify, and
# ExecStart naming the installed program (which exists and runs). With
# systemd-analyze available, the unit must also pass `systemd-analyze
# verify` (not required: the test does not depend on systemd).
set -euo pipefail
build=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
prefix="$scratch/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
unit="$prefix/lib/systemd/system/tasksup.service"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$unit" ] || fail "no unit at $unit"
grep -qx 'Type=notify' "$unit" || fail "the unit is not Type=notify"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
program=${exec_start%% *}
[ "$program" = "$prefix/bin/tasksup" ] ||
  fail "ExecStart names $program, not $prefix/bin/tasksup"
[ -x "$program" ] || fail "$program is not an installed program"
case "$exec_start" in
  *" serve"*) ;;
  *) fail "ExecStart does not run serve: $exec_start" ;;
esac
"$program" serve --help >/dev/null || fail "$program serve --help failed"
# DESTDIR stages the same unit, still naming the prefix's program.
DESTDIR="$scratch/stage" cmake --install "$build" --prefix /opt/tasksup \
  >/dev/null
staged="$scratch/stage/opt/tasksup/lib/systemd/system/tasksup.service"
[ -f "$staged" ] || fail "no unit at $staged with DESTDIR"
grep -q '^ExecStart=/opt/tasksup/bin/tasksup serve' "$staged" ||
  fail "with DESTDIR, ExecStart does not name /opt/tasksup/bin/tasksup"
if command -v systemd-analyze >/dev/null 2>&1; then
  # verify looks for the binary where ExecStart names it: the scratch
  # prefix's. Its own complaints about the host (no running systemd in a
  # container) are not the unit's; only lines naming the unit fail the test.
  out=$(systemd-analyze verify --man=no "$unit" 2>&1 || true)
  if printf '%s\n' "$out" | grep -q 'tasksup.service'; then
    printf '%s\n' "$out" >&2
    fail "systemd-analyze verify complains about the unit"
  fi
fi
echo "ok: $unit"

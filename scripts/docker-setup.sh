#!/usr/bin/env bash
# Makes a Docker Engine and the local test image available for the docker
# runtime tests. Idempotent: with an engine answering and the image present it
# only reports that.
#
#  1. Installs docker.io and busybox-static through bootstrap.sh when missing.
#  2. If no engine answers on $DOCKER_HOST (unix://...) or /var/run/docker.sock,
#     starts `dockerd` in the background (log: $TASKSUP_DOCKERD_LOG), first with
#     the distribution defaults, then with fallbacks for sandboxes without
#     iptables, bridges or overlayfs, and waits (bounded) until it answers.
#  3. If the test image (scripts/docker-test-image) is missing, builds a root filesystem
#     from the static busybox binary and imports it. Nothing is ever pulled
#     from a registry.
#
# Needs root to start dockerd. Environment:
#   TASKSUP_DOCKER_IMAGE    image tag (default: the one line of
#                           scripts/docker-test-image, which the tests read too)
#   TASKSUP_DOCKERD_LOG     dockerd log file (default /var/log/tasksup-dockerd.log)
#   TASKSUP_DOCKERD_WAIT_S  seconds to wait for each dockerd attempt (default 60)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
image=${TASKSUP_DOCKER_IMAGE:-$(head -n 1 "$root/scripts/docker-test-image")}
log=${TASKSUP_DOCKERD_LOG:-/var/log/tasksup-dockerd.log}
wait_s=${TASKSUP_DOCKERD_WAIT_S:-60}

say() { echo "docker-setup: $*"; }
die() {
  echo "docker-setup: error: $*" >&2
  exit 1
}

TASKSUP_WITH_DOCKER=1 "$root/scripts/bootstrap.sh"
command -v docker >/dev/null || die "the docker CLI is not installed (package docker.io)"
command -v dockerd >/dev/null || die "dockerd is not installed (package docker.io)"

socket=/var/run/docker.sock
if [[ -n "${DOCKER_HOST:-}" ]]; then
  case "$DOCKER_HOST" in
    unix://*) socket=${DOCKER_HOST#unix://} ;;
    *) die "DOCKER_HOST=$DOCKER_HOST: only unix:// sockets are supported" ;;
  esac
fi
export DOCKER_HOST="unix://$socket"

engine_answers() {
  docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# Starts dockerd with the given extra flags and waits until it answers or
# exits. Returns 0 when the engine answers.
try_dockerd() {
  say "starting dockerd $* (log: $log)"
  mkdir -p "$(dirname "$log")"
  {
    echo "---- $(date -u +%FT%TZ) dockerd -H unix://$socket $*"
  } >>"$log"
  # setsid: the daemon must outlive this script and its terminal.
  setsid dockerd -H "unix://$socket" "$@" >>"$log" 2>&1 </dev/null &
  local pid=$!
  local waited=0
  while ((waited < wait_s * 2)); do
    if engine_answers; then
      say "engine answers on $socket (dockerd pid $pid)"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      say "dockerd $* exited; last log lines:"
      tail -n 5 "$log" | sed 's/^/    /'
      return 1
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
  say "dockerd $* did not answer within ${wait_s}s; stopping it"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  return 1
}

if engine_answers; then
  say "engine already answers on $socket"
else
  [[ $(id -u) == 0 ]] || die "no engine on $socket and not root: cannot start dockerd"
  [[ -e "$socket" ]] && rm -f "$socket" # stale socket from a dead daemon
  if try_dockerd; then
    :
  elif try_dockerd --iptables=false --ip-masq=false --bridge=none ||
    try_dockerd --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs; then
    say "the engine runs without a bridge network: containers need"
    say "  export TASKSUP_DOCKER_NETWORK=none"
  else
    die "could not start dockerd; see $log"
  fi
fi

if docker image inspect "$image" >/dev/null 2>&1; then
  say "image $image present"
  exit 0
fi

busybox=""
for candidate in /bin/busybox /usr/bin/busybox; do
  if [[ -x "$candidate" ]]; then
    busybox=$candidate
    break
  fi
done
[[ -n "$busybox" ]] || die "busybox not found (package busybox-static)"
ldd_out=$(LC_ALL=C ldd "$busybox" 2>&1 || true)
case "$ldd_out" in
  *"not a dynamic executable"* | *"statically linked"*) ;;
  *) die "$busybox is not statically linked (install busybox-static)" ;;
esac

say "building $image from $busybox"
rootfs=$(mktemp -d /tmp/tasksup-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,tmp,etc,proc,sys,dev,workspace}
chmod 1777 "$rootfs/tmp"
cp "$busybox" "$rootfs/bin/busybox"
# One symlink per applet, at the path busybox reports for it.
"$busybox" --list-full | while read -r applet; do
  [[ -e "$rootfs/$applet" ]] || ln -s /bin/busybox "$rootfs/$applet"
done
echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
echo 'root:x:0:' >"$rootfs/etc/group"
tar -C "$rootfs" -c . |
  docker import --change 'CMD ["/bin/sh"]' - "$image" >/dev/null
say "imported $image"

#!/usr/bin/env bash
# Builds and tests Sophon on Debian 13 (trixie: LibTorch 2.6, Python 3.13, gRPC 1.51,
# Abseil 20240722, GoogleTest 1.16, CMake 3.31) in a chroot made from Debian's archive,
# beside whatever Debian the machine runs. Needs root (debootstrap, mounts, chroot).
#
# Usage: tools/debian13.sh [test|setup|shell|run CMD...]
#   test   (default) setup, then tools/test.sh inside the chroot: the build goes to
#          build-debian13/ of this checkout (BUILD_DIR overrides), every test through ctest
#   setup  makes the chroot if there is none (debootstrap --variant=minbase trixie, about a
#          minute), then installs what tools/install-deps.sh names that it lacks
#   shell  an interactive shell in the chroot, this checkout at /src
#   run    runs CMD in the chroot, in /src (BUILD_DIR=build-debian13 unless set)
# Environment:
#   DEBIAN13_ROOT=DIR  where the chroot lives (default /var/cache/sophon/debian13); one that is
#                      there already is reused, a missing one is made
#   DEBIAN13_MIRROR=URL  Debian archive (default: the first deb.debian.org-style URI of this
#                      machine's apt sources, else http://deb.debian.org/debian)
#   BUILD_DIR, JOBS, BUILD_TYPE, CTEST_ARGS  passed on to tools/test.sh
# The checkout is bind-mounted at /src inside a private mount namespace (unshare), so nothing
# stays mounted when the script ends, whatever way it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
root=${DEBIAN13_ROOT:-/var/cache/sophon/debian13}
cmd=${1:-test}
[[ $# -eq 0 ]] || shift

die() { echo "debian13: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, mount and chroot); run it with sudo"

mirror() {
  if [[ -n ${DEBIAN13_MIRROR:-} ]]; then echo "$DEBIAN13_MIRROR"; return; fi
  local uri
  uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null |
    grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ' || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

make_root() {
  [[ -f $root/etc/sophon-debian13 ]] && return 0
  local start=$SECONDS m
  m=$(mirror)
  if ! command -v debootstrap >/dev/null; then
    echo "debian13: installing debootstrap" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
  fi
  echo "debian13: debootstrap --variant=minbase trixie $root from $m" >&2
  rm -rf "$root.tmp"
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase trixie "$root.tmp" "$m" >"$root.tmp.log" 2>&1 ||
    { tail -20 "$root.tmp.log" >&2; die "debootstrap failed (whole log: $root.tmp.log)"; }
  # contrib and non-free: Debian's CUDA build of LibTorch and the CUDA toolkit.
  echo "deb $m trixie main contrib non-free non-free-firmware" >"$root.tmp/etc/apt/sources.list"
  # A throw-away build root: dpkg need not fsync every file it unpacks.
  echo "force-unsafe-io" >"$root.tmp/etc/dpkg/dpkg.cfg.d/sophon-unsafe-io"
  echo "made by tools/debian13.sh" >"$root.tmp/etc/sophon-debian13"
  rm -rf "$root"
  mv "$root.tmp" "$root"
  rm -f "$root.tmp.log"
  echo "debian13: chroot made in $((SECONDS - start)) s" >&2
}

# in_root SCRIPT: runs bash -c SCRIPT in the chroot, in /src, with /proc, /sys, /dev and the
# checkout mounted in a mount namespace of its own.
in_root() {
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  mkdir -p "$root/src"
  local env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    LANG=C.UTF-8 TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive)
  # build/ is the machine's own build: the chroot's goes to build-debian13/.
  env+=("BUILD_DIR=${BUILD_DIR:-build-debian13}")
  local v
  for v in JOBS BUILD_TYPE CTEST_ARGS; do
    [[ -z ${!v:-} ]] || env+=("$v=${!v}")
  done
  unshare --mount --propagation private -- bash -euo pipefail -c '
    root=$1 src=$2; shift 2
    # The root a mount point of its own: `ip netns exec` makes / a slave mount.
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys" || mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=755 run "$root/run"
    mkdir -p "$root/run/netns"
    mount --bind "$src" "$root/src"
    exec chroot "$root" /usr/bin/env -i "$@"
  ' in_root "$root" "$src" "${env[@]}" bash -c "cd /src && $1"
}

setup() {
  make_root
  local start=$SECONDS
  in_root "tools/install-deps.sh"
  echo "debian13: dependencies checked in $((SECONDS - start)) s" >&2
}

case $cmd in
  setup) setup ;;
  test)
    setup
    start=$SECONDS
    in_root "tools/test.sh"
    echo "debian13: build and tests took $((SECONDS - start)) s" >&2
    ;;
  shell) make_root; in_root "exec bash -i" ;;
  run) make_root; in_root "$*" ;;
  *) die "unknown command '$cmd' (test, setup, shell or run CMD...)" ;;
esac

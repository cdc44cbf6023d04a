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
#   cuda   the CUDA compile-and-link check, after `test`: Debian 13's CUDA build of LibTorch
#          (libtorch-cuda-dev 2.6, CUDA 12.4, NCCL) in an overlay on the chroot, and the
#          LibTorch programs and tests compiled and linked against it in an overlay on
#          build-debian13/ (what does not include LibTorch is reused, not rebuilt). Running
#          them needs a GPU: this checks that they build, use libtorch_cuda and have NCCL.
#   cuda-run CMD  runs CMD in that CUDA overlay (BUILD_DIR as for run)
# Environment:
#   DEBIAN13_ROOT=DIR  where the chroot lives (default /var/cache/sophon/debian13); one that is
#                      there already is reused, a missing one is made
#   DEBIAN13_MIRROR=URL  Debian archive (default: the first .../debian URI of this machine's
#                      apt sources; with none there, the script stops and says so)
#   BUILD_DIR, JOBS, BUILD_TYPE, CTEST_ARGS, CMAKE_ARGS  passed on to tools/test.sh
# The CUDA layer lives beside the chroot, in DEBIAN13_ROOT.cuda/ (made once, about 2.5 GB
# fetched; made again when the chroot's packages change); the build's overlay is emptied at
# each check, so the CPU build in build-debian13/ is never touched.
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
  [[ -n $uri ]] ||
    die "no Debian archive in this machine's apt sources (/etc/apt/sources.list and" \
      "/etc/apt/sources.list.d/: a 'deb URL/debian ...' line or 'URIs: URL/debian');" \
      "give one with DEBIAN13_MIRROR=URL"
  echo "$uri"
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
# checkout mounted in a mount namespace of its own. With LAYER=DIR set, the chroot is the
# overlay of DIR/upper on it, and with LAYER_BUILD=DIR too, the build folder is the overlay
# of LAYER_BUILD on this checkout's build folder (both discarded with the namespace except
# for what the upper folders keep).
in_root() {
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  mkdir -p "$root/src"
  local env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    LANG=C.UTF-8 TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive)
  # build/ is the machine's own build: the chroot's goes to build-debian13/.
  env+=("BUILD_DIR=${BUILD_DIR:-build-debian13}")
  local v
  for v in JOBS BUILD_TYPE CTEST_ARGS CMAKE_ARGS; do
    [[ -z ${!v:-} ]] || env+=("$v=${!v}")
  done
  unshare --mount --propagation private -- bash -euo pipefail -c '
    root=$1 src=$2 layer=$3 layer_build=$4 build=$5; shift 5
    if [[ -n $layer ]]; then
      mkdir -p "$layer/upper" "$layer/work" "$layer/merged"
      mount -t overlay overlay -o "lowerdir=$root,upperdir=$layer/upper,workdir=$layer/work" \
        "$layer/merged"
      root=$layer/merged
    else
      # The root a mount point of its own: `ip netns exec` makes / a slave mount.
      mount --bind "$root" "$root"
    fi
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys" || mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs -o mode=755 run "$root/run"
    mkdir -p "$root/run/netns"
    mount --bind "$src" "$root/src"
    if [[ -n $layer_build ]]; then
      mkdir -p "$layer_build/upper" "$layer_build/work"
      mount -t overlay overlay \
        -o "lowerdir=$src/$build,upperdir=$layer_build/upper,workdir=$layer_build/work" \
        "$root/src/$build"
    fi
    exec chroot "$root" /usr/bin/env -i "$@"
  ' in_root "$root" "$src" "${LAYER:-}" "${LAYER_BUILD:-}" "${BUILD_DIR:-build-debian13}" \
    "${env[@]}" bash -c "cd /src && $1"
}

# The CUDA layer: Debian 13's CUDA LibTorch and CUDA toolkit over the chroot, made once and
# made again when the chroot's package list changes. Debian's nvidia-cudnn is a downloader
# that fetches cuDNN from NVIDIA when it is configured (which fails offline), so a stand-in
# package of that name takes its place, and a stub libcudnn.so.9 (every cudnn function that
# libtorch_cuda.so imports, each empty) lets the linker check every other symbol; nothing in
# this layer is meant to run.
cuda_layer=${DEBIAN13_ROOT:-/var/cache/sophon/debian13}.cuda
# libgloo-cuda-dev: the headers of the Gloo that the CUDA LibTorch links (libgloo-dev's
# conflict with it, and apt takes them away); libnccl-dev: nccl.h, which c10d's NCCL
# declarations include.
cuda_packages="libtorch-cuda-dev nvidia-cuda-toolkit libgloo-cuda-dev libnccl-dev"
make_cuda_layer() {
  local stamp
  stamp=$( (cat "$root/var/lib/dpkg/status"; echo "$cuda_packages") | md5sum | cut -d' ' -f1)
  if [[ -f $cuda_layer/upper/etc/sophon-debian13-cuda ]] &&
     [[ $(cat "$cuda_layer/upper/etc/sophon-debian13-cuda") == "$stamp" ]]; then
    return 0
  fi
  local start=$SECONDS
  echo "debian13: making the CUDA layer in $cuda_layer ($cuda_packages)" >&2
  rm -rf "$cuda_layer"
  mkdir -p "$cuda_layer"
  LAYER=$cuda_layer LAYER_BUILD= in_root '
    apt-get update -qq
    mkdir -p /tmp/standin/DEBIAN
    cat >/tmp/standin/DEBIAN/control <<EOC
Package: nvidia-cudnn
Version: 9.0.0.312-0+sophon.standin
Architecture: amd64
Maintainer: Sophon <sophon@localhost>
Description: stand-in for the cuDNN downloader (tools/debian13.sh cuda)
 Installs nothing: the CUDA compile-and-link check needs no cuDNN.
EOC
    dpkg-deb --build /tmp/standin /tmp/nvidia-cudnn-standin.deb >/dev/null
    dpkg -i /tmp/nvidia-cudnn-standin.deb >/dev/null
    apt-mark hold nvidia-cudnn >/dev/null
    apt-get install -y -qq --no-install-recommends '"$cuda_packages"' >/dev/null
    apt-get clean
    lib=/usr/lib/x86_64-linux-gnu
    nm -D --undefined-only "$lib/libtorch_cuda.so" | awk "{print \$NF}" | sed "s/@.*//" |
      grep "^cudnn" | sort -u | sed "s/.*/void &(void) {}/" >/tmp/cudnn_stub.c
    [[ -s /tmp/cudnn_stub.c ]] || { echo "debian13: libtorch_cuda.so imports no cudnn function" >&2; exit 1; }
    gcc -shared -fPIC -Wl,-soname,libcudnn.so.9 -o "$lib/libcudnn.so.9" /tmp/cudnn_stub.c
    echo "debian13: stub libcudnn.so.9 with $(wc -l </tmp/cudnn_stub.c) functions" >&2
  '
  echo "$stamp" >"$cuda_layer/upper/etc/sophon-debian13-cuda"
  echo "debian13: CUDA layer made in $((SECONDS - start)) s" >&2
}

# The LibTorch targets: sophon_model, sophon_torch and whatever links them.
cuda_check() {
  local build=${BUILD_DIR:-build-debian13}
  [[ -f $src/$build/CMakeCache.txt ]] ||
    die "no $build/ to reuse: run tools/debian13.sh test first (the CUDA check rebuilds only what includes LibTorch)"
  make_cuda_layer
  rm -rf "$cuda_layer/build"
  mkdir -p "$cuda_layer/build"
  local start=$SECONDS
  LAYER=$cuda_layer LAYER_BUILD=$cuda_layer/build in_root "tools/cuda-link-check.sh $build"
  echo "debian13: CUDA compile-and-link check took $((SECONDS - start)) s" >&2
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
  cuda) make_root; cuda_check ;;
  cuda-run) make_root; make_cuda_layer; LAYER=$cuda_layer in_root "$*" ;;
  *) die "unknown command '$cmd' (test, setup, shell, run CMD..., cuda or cuda-run CMD...)" ;;
esac

#!/usr/bin/env bash
# tools/bench/packs.sh — cold-storage epochs from files and from packs of G = 1, 8, 32, 64
# samples per group, with the storage node's sample cache off and on. Needs root.
#
# The storage node runs in tools/netlink's server namespace (1 Gbit/s link, one core per side)
# inside a blkio cgroup (v1) that throttles its reads of the dataset's disk to --iops reads/s and
# --bps bytes/s: a cold HDD or network volume, on a machine whose own disk is too fast to show
# the effect. Training is sophon-train --mode=nooff with an emulated GPU (--device=emulate).
# Each configuration runs two passes of one epoch against the same server; before each pass the
# page cache is dropped (sync; echo 3 > /proc/sys/vm/drop_caches), so pass 1 is cold everywhere
# and pass 2 is cold except for the server's own cache (--cache-bytes, noevict).
#
#   tools/bench/packs.sh
#   DATA=DIR GROUP_SIZES=1,32 IOPS=100 BPS=104857600 CACHE_FRACTION=0.5 MAX_BATCHES=8 tools/bench/packs.sh
#
# Prints a Markdown table: per configuration and pass the epoch time, the data stall (the time the
# training loop waited for batches) and the server's cache hits.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${BUILD_DIR:-build}")
data=$(realpath "${DATA:-build/bench-photos-openimages-1000}")
groups=${GROUP_SIZES:-1,8,32,64}
iops=${IOPS:-100}
bps=${BPS:-104857600}
cache_fraction=${CACHE_FRACTION:-0.5}
max_batches=${MAX_BATCHES:-8}
batch=${BATCH:-64}
window=${WINDOW:-8}
arch=${ARCH:-alexnet}
out=$(realpath -m "${OUT:-build/bench-packs}")
py=/usr/bin/python3
[[ $(id -u) -eq 0 ]] || { echo "bench/packs: needs root (netns, cgroups, drop_caches)" >&2; exit 1; }
[[ -d /sys/fs/cgroup/blkio ]] || { echo "bench/packs: needs the cgroup v1 blkio controller" >&2; exit 1; }
for bin in sophon-server sophon-train sophon-pack; do
  [[ -x $build/$bin ]] || tools/build.sh --target sophon-server sophon-train sophon-pack
done
mkdir -p "$out"
device=$(stat -c '%d' "$data")
dev="$((device >> 8)):$((device & 255))"
# The whole disk, not a partition: throttling applies to the block device the reads reach.
disk=$(lsblk -no PKNAME "/dev/block/$dev" 2>/dev/null || true)
[[ -n $disk ]] && dev=$(cat "/sys/class/block/$disk/dev")
cg=/sys/fs/cgroup/blkio/sophon-bench-packs-$$
mkdir "$cg"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo "$dev $iops" >"$cg/blkio.throttle.read_iops_device"
echo "$dev $bps" >"$cg/blkio.throttle.read_bps_device"
# The server joins the cgroup before it starts.
cat >"$out/server.sh" <<WRAP
#!/usr/bin/env bash
echo \$\$ > $cg/cgroup.procs
exec $build/sophon-server "\$@"
WRAP
# Two passes, the page cache dropped before each.
cat >"$out/train.sh" <<WRAP
#!/usr/bin/env bash
set -e
json=\$1; shift
for pass in 1 2; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  $build/sophon-train "\$@" --report-json="\$json.\$pass"
done
WRAP
chmod +x "$out/server.sh" "$out/train.sh"
bytes=$(du -sb "$data" | cut -f1)
cache_bytes=$($py -c "print(int($bytes * $cache_fraction))")
sources=("files:$data:0")
for g in ${groups//,/ }; do
  pack="$out/pack-g$g"
  if [[ ! -f $pack/sophon-pack.idx ]]; then
    rm -rf "$pack"
    "$build/sophon-pack" --data="$data" --out="$pack" --group-size="$g" --progress=false >/dev/null
  fi
  sources+=("pack G=$g:$pack:$window")
done
# Packs read in the full-shuffle order: every sample costs its group's read.
sources+=("pack G=32, full shuffle:$out/pack-g32:0")
images=$([[ $max_batches -gt 0 ]] && echo "$(( max_batches * batch )) images" || echo "the whole epoch")
echo "throttle: $iops reads/s, $((bps / 1048576)) MiB/s on $dev; $images of $data per pass; cache $((cache_bytes / 1048576)) MiB (noevict) when on"
echo
echo "| source | order | cache | pass | epoch s | data stall s | images/s | cache hits (both passes, server log) |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for entry in "${sources[@]}"; do
  IFS=: read -r label dir win <<<"$entry"
  [[ -d $dir ]] || continue
  for cache in 0 "$cache_bytes"; do
    tag=$(echo "$label-$cache" | tr -c 'A-Za-z0-9\n' '_')
    log="$out/$tag.log"
    order=$([[ $win -gt 0 ]] && echo "window $win" || echo "full shuffle")
    tools/netlink run --rate=1gbit --measure=0 --server-bin="$out/server.sh" \
      --train-bin="$out/train.sh" --server-log="$out/$tag.server.log" -- \
      --data="$dir" --prep-workers=1 --cache-bytes="$cache" --stats-interval=1s \
      --inflight-budget-bytes=134217728 --max-stream-inflight-bytes=67108864 -- \
      "$out/$tag.json" --mode=nooff --device=emulate --gpu-type=v100 --arch="$arch" \
      --epochs=1 --batch-size="$batch" --max-batches="$max_batches" --workers=1 \
      --shuffle-window="$win" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
    hits=$( (grep -o 'cache hits [0-9]*% of [0-9]* reads' "$out/$tag.server.log" || true) | awk '{h += $3 * $5 / 100; r += $5} END {printf "%d / %d", h, r}')
    for pass in 1 2; do
      $py - "$out/$tag.json.$pass" "$label" "$order" "$([[ $cache -gt 0 ]] && echo on || echo off)" "$pass" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["epochs"][0]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | {r['wall_seconds']:.1f} | "
      f"{r['data_wait_seconds']:.1f} | {r['images_per_second']:.0f} |", end="")
PY
      echo " ${hits} |"
    done
  done
done

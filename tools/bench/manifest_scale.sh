#!/usr/bin/env bash
# What a large manifest costs, old and new side by side: for each build folder given, starts
# its sophon-server on DATA, waits until it listens, connects its sophon-bench-manifest to it
# REPEAT times (a fresh process each time, as a training job would), and prints the server's
# start-up time and resident memory, and the client's connect time, memory growth and TCP bytes
# received (the manifest on the wire, with HTTP/2 framing).
#
# Usage: tools/bench/manifest_scale.sh DATA BUILD_DIR [BUILD_DIR...]
#   DATA       an ImageFolder tree; for millions of samples make one of symbolic links:
#              tools/make-dataset --out DATA --n 10000000 --classes 1000 --source synthetic \
#                --profile imagenet --symlinks 16 --jobs 2
#   BUILD_DIR  a build folder holding sophon-server and sophon-bench-manifest (build/ for the
#              code of this checkout; another worktree's build/ for another commit)
# Environment: REPEAT (client connects per server, default 3), SERVER_FLAGS (more flags for
# every server, e.g. "--follow-symlinks=all"), OUT (folder for the logs and results.jsonl,
# default a new folder under /tmp).
#
# One JSON line per build folder goes to OUT/results.jsonl; the table goes to stdout.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
data=$1
shift
repeat=${REPEAT:-3}
out=${OUT:-$(mktemp -d /tmp/sophon-manifest-scale.XXXXXX)}
mkdir -p "$out"
: >"$out/results.jsonl"

server_pid=
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

status_kib() {  # status_kib PID FIELD: a VmRSS/VmHWM value of /proc/PID/status, in KiB
  awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

for dir in "$@"; do
  name=$(basename "$(cd "$dir/.." && pwd)")/$(basename "$dir")
  for bin in sophon-server sophon-bench-manifest; do
    [[ -x $dir/$bin ]] || { echo "manifest_scale: $dir/$bin is missing" >&2; exit 1; }
  done
  log="$out/server-$(echo "$name" | tr '/' '_').log"
  start_ns=$(date +%s%N)
  # shellcheck disable=SC2086
  "$dir/sophon-server" --data="$data" --port=0 --stats-interval=0 ${SERVER_FLAGS:-} \
    >"$log" 2>&1 &
  server_pid=$!
  # The server prints "listening on HOST:PORT" once its manifest is ready and it serves.
  until grep -q '^listening on ' "$log"; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "manifest_scale: $dir/sophon-server exited; its log:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.05
  done
  ready_ns=$(date +%s%N)
  address=$(sed -n 's/^listening on //p' "$log" | head -1)
  startup_rss=$(status_kib "$server_pid" VmRSS)
  startup_hwm=$(status_kib "$server_pid" VmHWM)
  clients=()
  for ((i = 0; i < repeat; i++)); do
    clients+=("$("$dir/sophon-bench-manifest" --server="$address")")
  done
  served_rss=$(status_kib "$server_pid" VmRSS)
  served_hwm=$(status_kib "$server_pid" VmHWM)
  cleanup
  server_pid=
  printf '%s\n' "${clients[@]}" | python3 -c '
import json, statistics, sys
name, startup_s, rss, hwm, served_rss, served_hwm = sys.argv[1:7]
runs = [json.loads(line) for line in sys.stdin if line.strip()]
med = lambda k: statistics.median(r[k] for r in runs)
print(json.dumps({
    "build": name, "samples": runs[0]["samples"], "fingerprint": runs[0]["fingerprint"],
    "server_startup_seconds": float(startup_s),
    "server_rss_after_startup_bytes": int(rss) * 1024,
    "server_peak_rss_after_startup_bytes": int(hwm) * 1024,
    "server_rss_after_clients_bytes": int(served_rss) * 1024,
    "server_peak_rss_bytes": int(served_hwm) * 1024,
    "client_connect_seconds_median": med("connect_seconds"),
    "client_rss_growth_bytes_median": med("rss_growth_bytes"),
    "client_peak_rss_bytes_median": med("peak_rss_bytes"),
    "client_tcp_bytes_received_median": med("tcp_bytes_received"),
    "client_runs": runs}))
' "$name" "$(awk -v a="$start_ns" -v b="$ready_ns" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')" \
    "$startup_rss" "$startup_hwm" "$served_rss" "$served_hwm" >>"$out/results.jsonl"
done

python3 - "$out/results.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
mb = lambda b: f"{b / 1e6:,.0f} MB"
print(f"{'build':<28} {'samples':>10} {'server start':>12} {'server RSS':>10} {'server peak':>11} "
      f"{'connect':>8} {'client RSS +':>12} {'client peak':>11} {'wire':>9}")
for r in rows:
    print(f"{r['build']:<28} {r['samples']:>10,} {r['server_startup_seconds']:>11.1f}s "
          f"{mb(r['server_rss_after_clients_bytes']):>10} {mb(r['server_peak_rss_bytes']):>11} "
          f"{r['client_connect_seconds_median']:>7.2f}s {mb(r['client_rss_growth_bytes_median']):>12} "
          f"{mb(r['client_peak_rss_bytes_median']):>11} {mb(r['client_tcp_bytes_received_median']):>9}")
print(f"(results: {sys.argv[1]}; client figures are medians of the runs)")
EOF

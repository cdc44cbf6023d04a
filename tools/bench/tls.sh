#!/usr/bin/env bash
# TLS against plaintext in one run: the same sophon-server (same dataset, same
# --prep-workers) serves sophon-train first in plaintext, then over TLS (with
# mutual TLS and a bearer token, the most expensive set-up), for each mode,
# alternating for ROUNDS rounds so that load from elsewhere hits both. Prints
# per run: samples/s (the report's epoch figure), server and client CPU
# milliseconds per sample (whole processes, during the client's run), and at
# the end the medians and the ratios TLS / plaintext.
#
# Usage: tools/bench/tls.sh
# Environment:
#   DATA=DIR          ImageFolder dataset (default $BUILD_DIR/bench-data-openimages, the one
#                     tools/bench/modes uses; made with tools/make-dataset when absent)
#   MODES="nooff alloff"  sophon-train modes: nooff moves the JPEG files (RAW), alloff
#                     float32 tensors (600 KB per sample at 224): bytes are what TLS costs
#   PREP_WORKERS=2    server prep workers;  WORKERS=2  client prep threads
#   BATCH_SIZE=32  BATCHES=60 (measured batches per run)  WARMUP=4 (unmeasured batches)
#                     client CPU includes sophon-train's start-up: keep runs long enough
#   ROUNDS=2          alternating plaintext/TLS rounds per mode
#   BUILD_DIR=build   where sophon-server and sophon-train are (built if missing)
# The training side is an emulated GPU (no model runs), so the data path is measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
data=${DATA:-$build/bench-data-openimages}
modes=${MODES:-nooff alloff}
prep_workers=${PREP_WORKERS:-2}
workers=${WORKERS:-2}
batch_size=${BATCH_SIZE:-32}
batches=${BATCHES:-60}
warmup=${WARMUP:-4}
rounds=${ROUNDS:-2}

for tool in openssl python3; do
  command -v "$tool" >/dev/null || { echo "tls.sh: needs $tool (tools/install-deps.sh)" >&2; exit 1; }
done
if [[ ! -x "$build/sophon-server" || ! -x "$build/sophon-train" ]]; then
  BUILD_DIR=$build tools/build.sh --target sophon-server sophon-train >/dev/null
fi
if [[ ! -d "$data" ]]; then
  tools/make-dataset --source=photos --profile=openimages --n=2000 --classes=10 \
    --out="$data"
fi

work=$(mktemp -d /tmp/sophon-bench-tls.XXXXXX)
server_pid=
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# A CA, a server certificate for 127.0.0.1, a client certificate, a token.
(
  cd "$work"
  key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
  key ca.key
  openssl req -x509 -new -key ca.key -out ca.pem -days 1 -subj "/CN=bench CA"
  for who in server client; do
    key $who.key
    openssl req -new -key $who.key -out $who.csr -subj "/CN=$who"
    if [[ $who == server ]]; then ext="subjectAltName=IP:127.0.0.1"; else ext="extendedKeyUsage=clientAuth"; fi
    openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -set_serial "$RANDOM" -days 1 \
      -out $who.pem -extfile <(echo "$ext")
  done
  openssl rand -hex 32 > token
) >"$work/openssl.log" 2>&1 || { cat "$work/openssl.log" >&2; exit 1; }

server_flags_plaintext=()
server_flags_tls=(--tls-cert="$work/server.pem" --tls-key="$work/server.key"
  --tls-client-ca="$work/ca.pem" --auth-token-file="$work/token")
client_flags_plaintext=()
client_flags_tls=(--tls-ca="$work/ca.pem" --tls-cert="$work/client.pem"
  --tls-key="$work/client.key" --auth-token-file="$work/token")

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# Warm the page cache so that the first run does not pay for the disk.
cat "$data"/*/* >/dev/null

# run TRANSPORT MODE: one server, one client run; appends a line to $work/results.
run() {
  local transport=$1 mode=$2
  local -n sflags=server_flags_$transport
  local -n cflags=client_flags_$transport
  "$build/sophon-server" --data="$data" --port=0 --prep-workers="$prep_workers" \
    --stats-interval=0 "${sflags[@]}" >"$work/server.log" 2>&1 &
  server_pid=$!
  local address=
  for _ in $(seq 100); do
    address=$(grep -o 'listening on [0-9.:]*' "$work/server.log" | cut -d' ' -f3 || true)
    [[ -n "$address" ]] && break
    sleep 0.1
  done
  [[ -n "$address" ]] || { cat "$work/server.log" >&2; exit 1; }
  local before
  before=$(cpu_ticks "$server_pid")
  /usr/bin/time -f '%U %S' -o "$work/client.time" "$build/sophon-train" --server="$address" \
    "${cflags[@]}" --mode="$mode" --device=emulate --arch=resnet18 --batch-size="$batch_size" \
    --workers="$workers" --max-batches="$batches" --warmup-batches="$warmup" --progress=false \
    --report-json="$work/report.json" --log-level=warn >"$work/client.log" 2>&1 ||
    { cat "$work/client.log" >&2; exit 1; }
  local after
  after=$(cpu_ticks "$server_pid")
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  python3 - "$work/report.json" "$work/client.time" "$((after - before))" "$hz" "$transport" \
    "$mode" "$batch_size" "$warmup" >>"$work/results" <<'EOF'
import json, sys
report, timefile, ticks, hz, transport, mode, batch, warmup = sys.argv[1:]
r = json.load(open(report))
epoch = r["epochs"][0]
# CPU covers the warm-up batches too: divide by every sample fetched.
samples = epoch["images"] + int(warmup) * int(batch)
user, system = (float(x) for x in open(timefile).read().split()[-2:])
print(mode, transport, f'{epoch["images_per_second"]:.1f}',
      f"{1000 * int(ticks) / int(hz) / samples:.3f}", f"{1000 * (user + system) / samples:.3f}",
      f'{epoch["bytes_per_image"] / 1e3:.1f}')
EOF
  tail -1 "$work/results" | awk '{printf "  %-7s %-9s %8s samples/s  server %6s ms/sample  client %6s ms/sample  (%s KB/sample)\n", $1, $2, $3, $4, $5, $6}'
}

echo "tls.sh: $data, --prep-workers=$prep_workers, --workers=$workers, batch $batch_size," \
  "$batches batches (+$warmup warm-up) per run, $rounds rounds; TLS = mutual TLS + bearer token"
for mode in $modes; do
  for ((r = 1; r <= rounds; r++)); do
    run plaintext "$mode"
    run tls "$mode"
  done
done

python3 - "$work/results" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print("\nmedians (ratio = TLS / plaintext):")
print(f"{'mode':8} {'transport':10} {'samples/s':>10} {'server ms/sample':>17} {'client ms/sample':>17}")
for mode in dict.fromkeys(r[0] for r in rows):
    med = {}
    for t in ("plaintext", "tls"):
        sel = [r for r in rows if r[0] == mode and r[1] == t]
        med[t] = [statistics.median(float(r[i]) for r in sel) for i in (2, 3, 4)]
        print(f"{mode:8} {t:10} {med[t][0]:10.1f} {med[t][1]:17.3f} {med[t][2]:17.3f}")
    p, s = med["plaintext"], med["tls"]
    print(f"{mode:8} {'ratio':10} {s[0] / p[0]:10.3f} {s[1] / p[1]:17.3f} {s[2] / p[2]:17.3f}")
EOF

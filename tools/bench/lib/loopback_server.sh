# Sourced by the loopback benchmark scripts: starts sophon-server on 127.0.0.1 (port 0).
#
#   start_loopback_server BUILD DATA PREP_WORKERS LOG
#
# Sets `server` (its PID, for the caller's trap to kill) and `address` (HOST:PORT, read from
# its "listening on" line); exits naming LOG when it does not start within 10 s.
start_loopback_server() {
  local build=$1 data=$2 prep_workers=$3 log=$4
  "$build/sophon-server" --data="$data" --host=127.0.0.1 --port=0 --prep-workers="$prep_workers" \
    --stats-interval=0 >"$log" 2>&1 &
  server=$!
  address=""
  for _ in $(seq 100); do
    address=$(sed -n 's/^listening on //p' "$log" | head -1)
    [[ -n $address ]] && return 0
    sleep 0.1
  done
  echo "$(basename "$0"): sophon-server did not start (its log: $log)" >&2
  cat "$log" >&2
  exit 1
}

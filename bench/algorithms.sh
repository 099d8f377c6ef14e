#!/usr/bin/env bash
# quotabench per algorithm on the same workload: the two default rules
# (app_ip 10,000/h, app_user_iface 1,000/h) rewritten to each algorithm, a
# fresh quotad each time, closed loop at BENCH_CONNS connections for
# BENCH_DURATION. Prints one line per algorithm and writes
# bench-out/algorithms.txt. Usage: bash bench/algorithms.sh
set -euo pipefail
cd "$(dirname "$0")/.."
QUOTAD_BIN=${QUOTAD_BIN:-./bin/quotad}
QUOTABENCH_BIN=${QUOTABENCH_BIN:-./bin/quotabench}
DURATION=${BENCH_DURATION:-15s}
CONNS=${BENCH_CONNS:-64}
LISTEN=${BENCH_LISTEN:-127.0.0.1:18085}
mkdir -p bench-out
out=bench-out/algorithms.txt
: > "$out"
source bench/redis-db.sh
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  bench_db_cleanup
}
trap cleanup EXIT

for algo in fixed_window sliding_window token_bucket sliding_log min_interval; do
  rules=$(mktemp)
  cat > "$rules" <<YAML
rules:
  - {name: app_ip_hourly, dimensions: [app_id, ip], limit: 10000, window: 1h, algorithm: $algo}
  - {name: app_user_iface_hourly, dimensions: [app_id, user_id, interface_id], limit: 1000, window: 1h, algorithm: $algo}
YAML
  prefix="benchalgo:$algo:$RANDOM:"
  QUOTA_LISTEN=$LISTEN QUOTA_GRPC_LISTEN=off QUOTA_REDIS_DB=$BENCH_QUOTAD_REDIS_DB QUOTA_RULES=$rules QUOTA_REDIS_KEY_PREFIX=$prefix QUOTA_ANALYTICS=off \
    "$QUOTAD_BIN" serve > "bench-out/quotad-$algo.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    curl -fs "http://$LISTEN/healthz" > /dev/null 2>&1 && break
    sleep 0.1
  done
  "$QUOTABENCH_BIN" -url "http://$LISTEN" -c "$CONNS" -d "$DURATION" -apps 1000 -users 100000 -ifaces 50 -ips 100000 \
    -progress=false -json "bench-out/algo-$algo.json" > /dev/null
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  rm -f "$rules"
  python3 - "$algo" "bench-out/algo-$algo.json" <<'PY' | tee -a "$out"
import json, sys
a, j = sys.argv[1], json.load(open(sys.argv[2]))
print(f"{a:15s} {j['rps']:9.1f} req/s  p50 {j['p50_ms']:6.2f} ms  p99 {j['p99_ms']:6.2f} ms  p99.9 {j['p999_ms']:6.2f} ms  errors {j['errors']}")
PY
done

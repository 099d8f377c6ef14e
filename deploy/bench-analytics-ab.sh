#!/usr/bin/env bash
# deploy/bench-analytics-ab.sh — what analytics costs the check path: quotad
# with QUOTA_ANALYTICS=off, then on, ROUNDS times interleaved (so both see
# the same machine), each driven by quotabench -c 64 for D. Per run it prints
# quotabench's summary and the CPU ticks (1/100 s) quotad used during it:
# ticks*10000/requests = CPU microseconds per check, a measure that the other
# load on a shared machine disturbs far less than req/s. The redis/mysql
# ticks are of the whole servers (other users included).
# Usage (after make build): ROUNDS=3 D=30s bash deploy/bench-analytics-ab.sh
# AB_KEYS replaces quotabench's key flags (default: the uniform keys of make
# bench), e.g. AB_KEYS="-dist zipf -identities 1000000" for a skewed load.
set -uo pipefail
cd "$(dirname "$0")/.."
source deploy/bench-redis-db.sh
trap bench_db_cleanup EXIT
D=${D:-20s}; ROUNDS=${ROUNDS:-3}
RP=$(pgrep -x redis-server | head -1); MP=$(pgrep -x mariadbd | head -1)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
for r in $(seq 1 $ROUNDS); do
 for mode in off on; do
  env QUOTA_REDIS_DB=$BENCH_QUOTAD_REDIS_DB QUOTA_LISTEN=${AB_LISTEN:-127.0.0.1:18090} QUOTA_REDIS_KEY_PREFIX=ab$RANDOM: QUOTA_ANALYTICS=$mode bin/quotad > "${TMPDIR:-/tmp}/ab-quotad.log" 2>&1 &
  QP=$!
  until curl -sf ${AB_LISTEN:-127.0.0.1:18090}/readyz >/dev/null; do sleep 0.2; done
  q0=$(cpu $QP); r0=$(cpu $RP); m0=$(cpu $MP); l0=$(cut -d' ' -f1 /proc/loadavg)
  out=$(bin/quotabench -url http://${AB_LISTEN:-127.0.0.1:18090} -c 64 -d $D ${AB_KEYS:--apps 1000 -users 100000 -ifaces 50 -ips 100000} -json "${TMPDIR:-/tmp}/ab.json" 2>&1)
  q1=$(cpu $QP); r1=$(cpu $RP); m1=$(cpu $MP)
  kill -TERM $QP; wait $QP 2>/dev/null
  echo "$out" | grep -E "^\s+(requests|latency)" | tr -s ' ' | tr '\n' ' '
  n=$(echo "$out" | awk '$1 == "requests" {print $2; exit}')
  echo " | round $r analytics=$mode load=$l0 quotad_cpu_us_per_check=$(( (q1-q0) * 10000 / (n > 0 ? n : 1) )) redis_ticks=$((r1-r0)) mysql_ticks=$((m1-m0))"
 done
done

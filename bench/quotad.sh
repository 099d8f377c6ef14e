#!/usr/bin/env bash
# bench/quotad.sh — end-to-end throughput benchmark of quotad (what `make bench` runs).
#
# Starts quotad on a spare port, waits for GET /readyz, drives POST /v1/check
# with quotabench, stops quotad, measures raw Redis INCR throughput with
# redis-benchmark as the baseline, and reports both and their ratio.
#
# Usage: bench/quotad.sh [QUOTAD_BIN [QUOTABENCH_BIN [DURATION [CONNECTIONS]]]]
# Arguments win over the environment:
#   QUOTAD_BIN         quotad binary                  (default ./bin/quotad)
#   QUOTABENCH_BIN     quotabench binary              (default ./bin/quotabench)
#   BENCH_DURATION     quotabench -d                  (default 20s)
#   BENCH_CONNECTIONS  quotabench -c, redis-benchmark -c (default 64)
# Environment only:
#   BENCH_OUT          output directory               (default bench-out)
#   BENCH_LISTEN       quotad's QUOTA_LISTEN          (default 127.0.0.1:18080)
#   BENCH_GRPC_LISTEN  quotad's QUOTA_GRPC_LISTEN     (default off)
#   BENCH_TOKEN        sent by quotabench as a bearer token, if set
#   BENCH_CLIENT       quotabench -client: raw (its default) or nethttp, if set
#   BENCH_MAX_ERROR_PCT  fail when more than this % of requests erred (default 1)
#   REDIS_HOST, REDIS_PORT  Redis for redis-benchmark (default 127.0.0.1:6379)
#   BENCH_REDIS_DB     database redis-benchmark writes its INCR keys to (default
#                      15); flushed afterwards if it was empty before, else only
#                      its counter:* keys are deleted
#   READY_TIMEOUT      seconds to wait for /readyz    (default 30)
# quotad gets QUOTA_LISTEN=$BENCH_LISTEN, QUOTA_REDIS_KEY_PREFIX=bench: and
# QUOTA_REDIS_DB=$BENCH_QUOTAD_REDIS_DB (14; bench/redis-db.sh);
# every other setting is its default (or what the environment already says).
#
# Writes $BENCH_OUT/quotabench.json, quotabench.txt, quotad.log,
# redis-benchmark.txt and summary.txt.
set -euo pipefail

QUOTAD_BIN=${1:-${QUOTAD_BIN:-./bin/quotad}}
QUOTABENCH_BIN=${2:-${QUOTABENCH_BIN:-./bin/quotabench}}
DURATION=${3:-${BENCH_DURATION:-20s}}
CONNECTIONS=${4:-${BENCH_CONNECTIONS:-64}}
OUT_DIR=${BENCH_OUT:-bench-out}
LISTEN=${BENCH_LISTEN:-127.0.0.1:18080}
MAX_ERROR_PCT=${BENCH_MAX_ERROR_PCT:-1}
REDIS_HOST=${REDIS_HOST:-127.0.0.1}
REDIS_PORT=${REDIS_PORT:-6379}
REDIS_DB=${BENCH_REDIS_DB:-15}
READY_TIMEOUT=${READY_TIMEOUT:-30}

die() {
	echo "bench: $*" >&2
	exit 1
}

[[ -x $QUOTAD_BIN ]] || die "quotad binary $QUOTAD_BIN not found or not executable (build it, or set QUOTAD_BIN)"
[[ -x $QUOTABENCH_BIN ]] || die "quotabench binary $QUOTABENCH_BIN not found or not executable (build it, or set QUOTABENCH_BIN)"
command -v redis-benchmark >/dev/null 2>&1 || die "redis-benchmark not found (Debian package redis-tools)"
command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (Debian package redis-tools)"
[[ $CONNECTIONS =~ ^[1-9][0-9]*$ ]] || die "connections must be a positive integer, got '$CONNECTIONS'"
[[ $READY_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "READY_TIMEOUT must be a positive integer, got '$READY_TIMEOUT'"
LISTEN_HOST=${LISTEN%:*}
LISTEN_PORT=${LISTEN##*:}
[[ -n $LISTEN_HOST && $LISTEN_PORT =~ ^[0-9]+$ ]] || die "BENCH_LISTEN must be host:port, got '$LISTEN'"
BASE_URL="http://$LISTEN"

mkdir -p "$OUT_DIR"
QUOTAD_LOG="$OUT_DIR/quotad.log"

# http_status PATH prints the status code of GET $BASE_URL$PATH, 000 if none.
http_status() {
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$BASE_URL$1" || true
	else
		# No curl: speak HTTP/1.0 over bash's /dev/tcp, in a subshell so a
		# refused connection cannot end the script.
		local line
		line=$(
			exec 3<>"/dev/tcp/$LISTEN_HOST/$LISTEN_PORT" || exit 0
			printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$LISTEN" >&3
			IFS= read -r -t 2 status_line <&3 || true
			printf '%s' "${status_line:-}"
		) 2>/dev/null || true
		line=${line#HTTP/* }
		printf '%s' "${line:0:3}"
	fi
}

port_in_use() {
	(exec 3<>"/dev/tcp/$LISTEN_HOST/$LISTEN_PORT") 2>/dev/null
}

# shellcheck source=bench/redis-db.sh
source "$(dirname "$0")/redis-db.sh"
# shellcheck source=bench/stop-pid.sh
source "$(dirname "$0")/stop-pid.sh"
QUOTAD_PID=""
stop_quotad_on_exit

show_log() {
	echo "---- quotad log ($QUOTAD_LOG) ----" >&2
	tail -n 100 "$QUOTAD_LOG" >&2 || true
	echo "---- end of quotad log ----" >&2
}

if port_in_use; then
	die "something already listens on $LISTEN (set BENCH_LISTEN to another address)"
fi

echo "bench: starting $QUOTAD_BIN on $LISTEN"
QUOTA_LISTEN=$LISTEN QUOTA_GRPC_LISTEN=${BENCH_GRPC_LISTEN:-off} QUOTA_REDIS_DB=$BENCH_QUOTAD_REDIS_DB QUOTA_REDIS_KEY_PREFIX=bench: "$QUOTAD_BIN" >"$QUOTAD_LOG" 2>&1 &
QUOTAD_PID=$!

deadline=$((SECONDS + READY_TIMEOUT))
until [[ $(http_status /readyz) == 200 ]]; do
	if ! kill -0 "$QUOTAD_PID" 2>/dev/null; then
		rc=0
		wait "$QUOTAD_PID" || rc=$?
		QUOTAD_PID=""
		show_log
		die "quotad exited (status $rc) before $BASE_URL/readyz answered 200"
	fi
	if ((SECONDS >= deadline)); then
		show_log
		die "$BASE_URL/readyz did not answer 200 within ${READY_TIMEOUT}s"
	fi
	sleep 0.2
done
echo "bench: quotad is ready"

bench_args=(-url "$BASE_URL" -c "$CONNECTIONS" -d "$DURATION"
	-apps 1000 -users 100000 -ifaces 50 -ips 100000
	-json "$OUT_DIR/quotabench.json")
if [[ -n ${BENCH_TOKEN:-} ]]; then
	bench_args+=(-token "$BENCH_TOKEN")
fi
if [[ -n ${BENCH_CLIENT:-} ]]; then
	bench_args+=(-client "$BENCH_CLIENT")
fi
echo "bench: $QUOTABENCH_BIN ${bench_args[*]}"
"$QUOTABENCH_BIN" "${bench_args[@]}" | tee "$OUT_DIR/quotabench.txt"

# Redis gets the machine to itself for its baseline.
stop_quotad

# json_number FIELD reads a number from quotabench's JSON summary.
json_number() {
	local v
	v=$(grep -o "\"$1\": *[-0-9.eE+]*" "$OUT_DIR/quotabench.json" | head -n 1 | sed 's/^[^:]*: *//')
	[[ -n $v ]] || die "no \"$1\" in $OUT_DIR/quotabench.json"
	printf '%s' "$v"
}
quotad_rps=$(json_number rps)
requests=$(json_number requests)
errors=$(json_number errors)
p99_ms=$(json_number p99_ms)

# redis-benchmark's INCR keys (counter:__rand_int__, up to a million of them)
# are not left behind: a database that was empty before is flushed, otherwise
# just those keys are deleted.
redis_cli() {
	redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" -n "$REDIS_DB" "$@"
}
scan_counter_keys() {
	local cursor=0
	while :; do
		{
			read -r cursor
			cat
		} < <(redis_cli --raw SCAN "$cursor" MATCH 'counter:[0-9]*' COUNT 10000)
		[[ $cursor =~ ^[1-9][0-9]*$ ]] || break
	done
}
cleanup_redis() {
	if [[ $redis_db_size_before == 0 ]]; then
		[[ $(redis_cli FLUSHDB ASYNC) == OK ]]
	else
		scan_counter_keys | awk 'NF { print "UNLINK " $0 }' | redis_cli --pipe >/dev/null
	fi
}

redis_db_size_before=$(redis_cli DBSIZE 2>&1) && [[ $redis_db_size_before =~ ^[0-9]+$ ]] ||
	die "cannot use Redis db $REDIS_DB at $REDIS_HOST:$REDIS_PORT: $redis_db_size_before"
echo "bench: redis-benchmark -h $REDIS_HOST -p $REDIS_PORT --dbnum $REDIS_DB -c $CONNECTIONS -t incr -r 1000000 -n 2000000 -q"
redis-benchmark -h "$REDIS_HOST" -p "$REDIS_PORT" --dbnum "$REDIS_DB" -c "$CONNECTIONS" \
	-t incr -r 1000000 -n 2000000 -q | tr '\r' '\n' >"$OUT_DIR/redis-benchmark.txt"
cleanup_redis || echo "bench: warning: could not delete redis-benchmark's counter:* keys from db $REDIS_DB" >&2
# -q prints progress lines ("INCR: rps=…") and then "INCR: 123456.79 requests per second, p50=…".
redis_rps=$(grep '^INCR:' "$OUT_DIR/redis-benchmark.txt" | grep 'requests per second' | tail -n 1 | awk '{print $2}')
[[ $redis_rps =~ ^[0-9.]+$ ]] || die "could not read INCR requests per second from $OUT_DIR/redis-benchmark.txt"

ratio=$(awk -v q="$quotad_rps" -v r="$redis_rps" 'BEGIN { if (r > 0) printf "%.2f", q / r; else print "n/a" }')
error_pct=$(awk -v e="$errors" -v n="$requests" 'BEGIN { if (n > 0) printf "%.2f", 100 * e / n; else print "100.00" }')

{
	echo "quotad benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc 2>/dev/null || echo '?') cores"
	echo "quotad POST /v1/check: $(printf '%.2f' "$quotad_rps") req/s  (-c $CONNECTIONS -d $DURATION, p99 $p99_ms ms, errors $errors of $requests = $error_pct%)"
	echo "redis INCR:            $(printf '%.2f' "$redis_rps") req/s  (redis-benchmark -c $CONNECTIONS -r 1000000 -n 2000000)"
	echo "ratio quotad/redis:    $ratio"
} | tee "$OUT_DIR/summary.txt"

if awk -v p="$error_pct" -v m="$MAX_ERROR_PCT" 'BEGIN { exit !(p > m) }'; then
	die "$error_pct% of the requests to quotad failed (more than BENCH_MAX_ERROR_PCT=$MAX_ERROR_PCT%): see $OUT_DIR/quotabench.txt and $QUOTAD_LOG"
fi

#!/usr/bin/env bash
# bench/grpc.sh — make bench-grpc: quotad's Envoy rate limit service
# (ShouldRateLimit over gRPC, the platform's two descriptors) against its own
# POST /v1/check, same keys, same quotad, taking turns (bench/grpcbench):
# gRPC one call at a time on each of 64 connections ("grpc") and 64 calls
# multiplexed on 4 connections as an Envoy ("grpc-mux").
# quotad runs with its defaults, deploy/rules.yaml and
# QUOTA_ENVOY_CONFIG=deploy/envoy/ratelimit.yaml (the same two limits).
# Environment:
#   QUOTAD_BIN         quotad binary                  (default ./bin/quotad)
#   GRPCBENCH_BIN      grpcbench binary               (default ./bin/grpcbench)
#   BENCH_OUT          output directory               (default bench-out)
#   BENCH_LISTEN       quotad's QUOTA_LISTEN          (default 127.0.0.1:18090)
#   BENCH_GRPC_LISTEN  quotad's QUOTA_GRPC_LISTEN     (default 127.0.0.1:18091)
#   BENCH_QUOTAD_GOMAXPROCS  GOMAXPROCS of quotad only (default: Go's, the machine's
#                      cores); GOMAXPROCS itself would also bind the load generator
#   GRPCBENCH_ARGS     extra grpcbench flags (e.g. "-rounds 5 -phase 10s", "-closed=false
#                      -entries grpc,http", "-mux-conns 2", "-timeline FILE", or
#                      grpc-go's client: "-grpc-client grpc-go -grpc-conns 4")
# Writes $BENCH_OUT/grpcbench.txt, grpcbench.json and quotad-grpc.log.
set -euo pipefail

QUOTAD_BIN=${QUOTAD_BIN:-./bin/quotad}
GRPCBENCH_BIN=${GRPCBENCH_BIN:-./bin/grpcbench}
OUT_DIR=${BENCH_OUT:-bench-out}
LISTEN=${BENCH_LISTEN:-127.0.0.1:18090}
GRPC_LISTEN=${BENCH_GRPC_LISTEN:-127.0.0.1:18091}
READY_TIMEOUT=${READY_TIMEOUT:-30}
QUOTAD_ENV=()
if [[ -n ${BENCH_QUOTAD_GOMAXPROCS:-} ]]; then
	QUOTAD_ENV+=("GOMAXPROCS=$BENCH_QUOTAD_GOMAXPROCS")
fi

die() {
	echo "bench: $*" >&2
	exit 1
}
[[ -x $QUOTAD_BIN ]] || die "quotad binary $QUOTAD_BIN not found (make build)"
[[ -x $GRPCBENCH_BIN ]] || die "grpcbench binary $GRPCBENCH_BIN not found (make bench-grpc builds it)"
[[ -z ${BENCH_QUOTAD_GOMAXPROCS:-} || $BENCH_QUOTAD_GOMAXPROCS =~ ^[1-9][0-9]*$ ]] ||
	die "BENCH_QUOTAD_GOMAXPROCS=$BENCH_QUOTAD_GOMAXPROCS: want a positive integer"
mkdir -p "$OUT_DIR"
QUOTAD_LOG="$OUT_DIR/quotad-grpc.log"

# shellcheck source=bench/redis-db.sh
source "$(dirname "$0")/redis-db.sh"
# shellcheck source=bench/stop-pid.sh
source "$(dirname "$0")/stop-pid.sh"
QUOTAD_PID=""
stop_quotad_on_exit

for addr in "$LISTEN" "$GRPC_LISTEN"; do
	if (exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}") 2>/dev/null; then
		die "something already listens on $addr (set BENCH_LISTEN / BENCH_GRPC_LISTEN)"
	fi
done

echo "bench: starting $QUOTAD_BIN on $LISTEN (HTTP) and $GRPC_LISTEN (gRPC)${QUOTAD_ENV[*]:+ with ${QUOTAD_ENV[*]}}"
env "${QUOTAD_ENV[@]}" QUOTA_LISTEN=$LISTEN QUOTA_GRPC_LISTEN=$GRPC_LISTEN QUOTA_ENVOY_CONFIG=deploy/envoy/ratelimit.yaml \
	QUOTA_REDIS_DB=$BENCH_QUOTAD_REDIS_DB QUOTA_REDIS_KEY_PREFIX=benchgrpc: "$QUOTAD_BIN" >"$QUOTAD_LOG" 2>&1 &
QUOTAD_PID=$!
deadline=$((SECONDS + READY_TIMEOUT))
until curl -sf -o /dev/null "http://$LISTEN/readyz"; do
	if ! kill -0 "$QUOTAD_PID" 2>/dev/null; then
		QUOTAD_PID=""
		tail -n 50 "$QUOTAD_LOG" >&2
		die "quotad exited before /readyz answered 200"
	fi
	((SECONDS < deadline)) || die "/readyz did not answer 200 within ${READY_TIMEOUT}s"
	sleep 0.2
done

# shellcheck disable=SC2086 # GRPCBENCH_ARGS is a list of flags
"$GRPCBENCH_BIN" -url "http://$LISTEN" -grpc "$GRPC_LISTEN" -server-pid "$QUOTAD_PID" -json "$OUT_DIR/grpcbench.json" ${GRPCBENCH_ARGS:-} |
	tee "$OUT_DIR/grpcbench.txt"
echo "bench: figures in $OUT_DIR/grpcbench.txt and grpcbench.json (measured on this machine as it is loaded)"

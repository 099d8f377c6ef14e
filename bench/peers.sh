#!/usr/bin/env bash
# bench/peers.sh — make bench-peers: quotad beside envoyproxy/ratelimit (built
# from the pinned commit when its source is here: skipped with a message
# otherwise), plain and with its local over-limit cache, on one private Redis
# and the same limits (deploy/envoy/ratelimit.yaml; quotad: its defaults,
# deploy/rules.yaml, the same two limits). Three workloads, each server in
# turn, the order rotated every round, all in one run:
#   http   ordinary traffic over HTTP (wrk -t2 -c64; quotad POST /v1/check,
#          envoy ratelimit POST /json), keys uniform over 1,000 apps,
#          100,000 users and IPs, 50 interfaces;
#   grpc   the same over gRPC ShouldRateLimit (bench/grpcbench, 64
#          connections, one call at a time on each);
#   flood  HTTP, 90 % of the calls from 10 identities past their limits
#          (each its own app and IP: the app's IP limit still has room,
#          so quotad's denial cache reads that limit's count, one GET);
#   flood-shared  the same from 10 users of one app behind one IP, past
#          both limits (quotad's denial cache answers without Redis:
#          limiter/denials.go).
# Beside them, on http and grpc, the floor: servers that answer every
# check at once, with no Redis and no rules, on the transports quotad
# uses (bench/cmd/nullhttp on fasthttp, bench/cmd/nullquotad's gRPC):
# what the load generator, the kernel and the server libraries cost by
# themselves on the shared cores, which no rate limiter on them passes.
# It prints checks/s, p99, the server's CPU per check and the shared
# Redis' CPU per check during the server's turn (µs, /proc) of each,
# medians of the rounds. The machine's cores are shared by the load
# generator, the servers and Redis: compare within a run only.
# Environment:
#   PEERS_PHASE   seconds of one turn (10)      PEERS_ROUNDS  rounds (3)
#   PEERS_RATELIMIT_GIT  git dir holding envoyproxy/ratelimit
#                        (/work/.mirror/envoyproxy+ratelimit/repo)
#   PEERS_RATELIMIT_COMMIT  (b8d893f)    PEERS_LOCAL_CACHE_BYTES  (1048576)
#   QUOTAD_BIN (./bin/quotad)  GRPCBENCH_BIN (./bin/grpcbench)  BENCH_OUT (bench-out)
#   PEERS_QUOTAD_OLD  another quotad binary, run beside as quotad-old (its own
#                     key prefix): old against new in the same rounds
#   PEERS_ENVOY=off   leave envoy ratelimit out
#   PEERS_FLOOR=off   leave the floor out   NULLHTTP_BIN, NULLQUOTAD_BIN (./bin/...)
set -euo pipefail

PHASE=${PEERS_PHASE:-10}
ROUNDS=${PEERS_ROUNDS:-3}
RL_GIT=${PEERS_RATELIMIT_GIT:-/work/.mirror/envoyproxy+ratelimit/repo}
RL_COMMIT=${PEERS_RATELIMIT_COMMIT:-b8d893f}
RL_CACHE=${PEERS_LOCAL_CACHE_BYTES:-1048576}
QUOTAD_BIN=${QUOTAD_BIN:-./bin/quotad}
GRPCBENCH_BIN=${GRPCBENCH_BIN:-./bin/grpcbench}
NULLHTTP_BIN=${NULLHTTP_BIN:-./bin/nullhttp}
NULLQUOTAD_BIN=${NULLQUOTAD_BIN:-./bin/nullquotad}
OUT_DIR=${BENCH_OUT:-bench-out}/peers
mkdir -p "$OUT_DIR"

die() {
	echo "bench-peers: $*" >&2
	exit 1
}
command -v wrk >/dev/null || die "wrk not found (apt-get install wrk)"
command -v redis-server >/dev/null || die "redis-server not found"
[[ -x $QUOTAD_BIN && -x $GRPCBENCH_BIN ]] || die "$QUOTAD_BIN or $GRPCBENCH_BIN missing (make bench-peers builds them)"
# Beside quotad's binary, as an absolute path: it is built in another directory.
RL_BIN=$(cd "$(dirname "$QUOTAD_BIN")" && pwd)/ratelimit-$RL_COMMIT

if [[ ! -x $RL_BIN ]]; then
	if git --git-dir="$RL_GIT" cat-file -e "$RL_COMMIT^{commit}" 2>/dev/null; then
		src=$(mktemp -d)
		git --git-dir="$RL_GIT" archive "$RL_COMMIT" | tar -x -C "$src"
		echo "bench-peers: building envoyproxy/ratelimit $RL_COMMIT"
		if ! (cd "$src" && go build -o "$RL_BIN" ./src/service_cmd); then
			echo "bench-peers: envoyproxy/ratelimit $RL_COMMIT did not build: quotad alone"
		fi
		rm -rf "$src"
	else
		echo "bench-peers: no envoyproxy/ratelimit $RL_COMMIT in $RL_GIT (set PEERS_RATELIMIT_GIT): quotad alone"
	fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
wait_http() { # url pid name
	for _ in $(seq 150); do
		curl -s -o /dev/null "$1" && return 0
		kill -0 "$2" 2>/dev/null || die "$3 exited at start (logs in $OUT_DIR)"
		sleep 0.2
	done
	die "$3 did not answer on $1"
}

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$OUT_DIR/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

declare -A HTTP GRPC PID
QH=$(free_port) QG=$(free_port)
QUOTA_LISTEN=127.0.0.1:$QH QUOTA_GRPC_LISTEN=127.0.0.1:$QG QUOTA_REDIS_ADDRS=127.0.0.1:$REDIS_PORT \
	QUOTA_ENVOY_CONFIG=deploy/envoy/ratelimit.yaml QUOTA_REDIS_KEY_PREFIX=peers: \
	"$QUOTAD_BIN" >"$OUT_DIR/quotad.log" 2>&1 &
PID[quotad]=$! HTTP[quotad]=http://127.0.0.1:$QH GRPC[quotad]=127.0.0.1:$QG
PIDS+=("${PID[quotad]}")
wait_http "${HTTP[quotad]}/readyz" "${PID[quotad]}" quotad
SERVERS=(quotad)

if [[ -n ${PEERS_QUOTAD_OLD:-} ]]; then
	OH=$(free_port) OG=$(free_port)
	QUOTA_LISTEN=127.0.0.1:$OH QUOTA_GRPC_LISTEN=127.0.0.1:$OG QUOTA_REDIS_ADDRS=127.0.0.1:$REDIS_PORT \
		QUOTA_ENVOY_CONFIG=deploy/envoy/ratelimit.yaml QUOTA_REDIS_KEY_PREFIX=peersold: \
		"$PEERS_QUOTAD_OLD" >"$OUT_DIR/quotad-old.log" 2>&1 &
	PID[quotad-old]=$! HTTP[quotad-old]=http://127.0.0.1:$OH GRPC[quotad-old]=127.0.0.1:$OG
	PIDS+=("${PID[quotad-old]}")
	wait_http "${HTTP[quotad-old]}/readyz" "${PID[quotad-old]}" quotad-old
	SERVERS+=(quotad-old)
fi

if [[ -x $RL_BIN && ${PEERS_ENVOY:-on} != off ]]; then
	RUNTIME=$(mktemp -d)
	mkdir -p "$RUNTIME/ratelimit/config"
	cp deploy/envoy/ratelimit.yaml "$RUNTIME/ratelimit/config/ratelimit.yaml"
	for name in envoy envoy-cache; do
		hp=$(free_port) gp=$(free_port) dp=$(free_port)
		cache=0
		[[ $name == envoy-cache ]] && cache=$RL_CACHE
		env HOST=127.0.0.1 PORT="$hp" GRPC_HOST=127.0.0.1 GRPC_PORT="$gp" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dp" \
			USE_STATSD=false LOG_LEVEL=error REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$REDIS_PORT \
			RUNTIME_ROOT="$RUNTIME" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			LOCAL_CACHE_SIZE_IN_BYTES=$cache "$RL_BIN" >"$OUT_DIR/$name.log" 2>&1 &
		PID[$name]=$! HTTP[$name]=http://127.0.0.1:$hp GRPC[$name]=127.0.0.1:$gp
		PIDS+=("${PID[$name]}")
		wait_http "${HTTP[$name]}/healthcheck" "${PID[$name]}" "$name"
		SERVERS+=("$name")
	done
fi

if [[ ${PEERS_FLOOR:-on} != off && -x $NULLHTTP_BIN && -x $NULLQUOTAD_BIN ]]; then
	# One server for each transport; PID[floor] is the one the workload uses.
	fh=$(free_port) fg=$(free_port) fn=$(free_port)
	"$NULLHTTP_BIN" -server fast -listen "127.0.0.1:$fh" >"$OUT_DIR/floor-http.log" 2>&1 &
	FLOOR_HTTP_PID=$!
	PIDS+=("$FLOOR_HTTP_PID")
	QUOTA_LISTEN=127.0.0.1:$fn QUOTA_GRPC_LISTEN=127.0.0.1:$fg "$NULLQUOTAD_BIN" >"$OUT_DIR/floor-grpc.log" 2>&1 &
	FLOOR_GRPC_PID=$!
	PIDS+=("$FLOOR_GRPC_PID")
	HTTP[floor]=http://127.0.0.1:$fh GRPC[floor]=127.0.0.1:$fg
	for _ in $(seq 50); do curl -s -o /dev/null -X POST "${HTTP[floor]}/v1/check" && break; sleep 0.1; done
	SERVERS+=(floor)
fi

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
RESULTS=$OUT_DIR/rounds.txt
: >"$RESULTS"
echo "bench-peers: ${SERVERS[*]}; $ROUNDS rounds of ${PHASE}s turns (results per turn in $RESULTS)"
for round in $(seq "$ROUNDS"); do
	for work in http grpc flood flood-shared; do
		n=${#SERVERS[@]}
		k=$(((round - 1) % n))
		for i in $(seq 0 $((n - 1))); do
			srv=${SERVERS[$(((k + i) % n))]}
			if [[ $srv == floor ]]; then
				# A null server answers a flood as it answers anything.
				[[ $work == http || $work == grpc ]] || continue
				PID[floor]=$FLOOR_HTTP_PID
				[[ $work == grpc ]] && PID[floor]=$FLOOR_GRPC_PID
			fi
			api=quota
			[[ $srv == quotad* || $srv == floor ]] || api=envoy
			c0=$(cpu_ticks "${PID[$srv]}") r0=$(cpu_ticks "$REDIS_PID")
			if [[ $work == grpc ]]; then
				"$GRPCBENCH_BIN" -entries grpc -rounds 1 -phase "${PHASE}s" -rate 0 -c 64 -grpc-conns 64 \
					-grpc "${GRPC[$srv]}" -seed $((round * 100)) -json "$OUT_DIR/grpc.json" >"$OUT_DIR/last.txt"
				read -r cps p99 checks < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(r["checks_per_sec"], r["p99_ms"], r["checks"])' "$OUT_DIR/grpc.json")
			else
				flood=0 shared=0
				[[ $work == flood* ]] && flood=0.9
				[[ $work == flood-shared ]] && shared=1
				PEERS_API=$api PEERS_FLOOD=$flood PEERS_FLOOD_SHARED=$shared wrk -t2 -c64 -d"${PHASE}s" --latency -s bench/peers/check.lua "${HTTP[$srv]}" >"$OUT_DIR/last.txt"
				read -r cps p99 checks < <(awk '
					/Requests\/sec:/ {r=$2}
					/^ +99%/ {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000} p=v}
					/requests in/ {n=$1}
					END {print r, p, n}' "$OUT_DIR/last.txt")
			fi
			c1=$(cpu_ticks "${PID[$srv]}") r1=$(cpu_ticks "$REDIS_PID")
			read -r cpu rcpu < <(python3 -c "n = max($checks, 1) / 1e6; print(round(($c1-$c0)/$TICK/n, 1), round(($r1-$r0)/$TICK/n, 1))")
			echo "$round $work $srv $cps $p99 $cpu $rcpu" | tee -a "$RESULTS"
		done
	done
done

curl -s "${HTTP[quotad]}/metrics" | grep '^quota_deny_cache' || true
python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {}
for work in ("http", "grpc", "flood", "flood-shared"):
    for srv in ("quotad", "quotad-old", "envoy", "envoy-cache", "floor"):
        rs = [r for r in rows if r[1] == work and r[2] == srv]
        if rs:
            med[work, srv] = [statistics.median(float(r[i]) for r in rs) for i in (3, 4, 5, 6)]
names = {"http": "ordinary HTTP", "grpc": "ordinary gRPC", "flood": "flood, own app+IP each", "flood-shared": "flood, 10 users of one app+IP"}
print()
print("| workload | server | checks/s | p99 ms | server CPU µs/check | Redis CPU µs/check | quotad ×checks/s | quotad p99 ÷ | quotad CPU ÷ |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for work in ("http", "grpc", "flood", "flood-shared"):
    q = med.get((work, "quotad"))
    for srv in ("quotad", "quotad-old", "envoy", "envoy-cache", "floor"):
        m = med.get((work, srv))
        if not m:
            continue
        ratio = "" if srv == "quotad" or not q else f"{q[0]/m[0]:.2f}× | {q[1]/m[1]:.2f} | {q[2]/m[2]:.2f}"
        if srv == "quotad":
            ratio = "— | — | —"
        print(f"| {names[work]} | {srv} | {m[0]:,.0f} | {m[1]:.1f} | {m[2]:.1f} | {m[3]:.1f} | {ratio} |")
print()
print("Medians of the rounds of one run; ratios are quotad's against that server's (its checks/s ×, its p99 and CPU per check as fractions).")
for work in ("http", "grpc"):
    f, e, q = med.get((work, "floor")), med.get((work, "envoy")), med.get((work, "quotad"))
    if f and q:
        vs = f", {f[0]/e[0]:.2f}× envoy ratelimit's checks/s" if e else ""
        print(f"{names[work]}: the floor answers at {f[2]:.1f} µs CPU a check{vs}; quotad reaches {q[0]/f[0]:.0%} of its checks/s.")
EOF

#!/usr/bin/env bash
# bench/http-edge.sh — make bench-http-edge: what an HTTP server costs a
# check by itself. bench/cmd/nullhttp on net/http and on fasthttp answer
# POST /v1/check with a fixed answer; wrk sends make bench-peers' ordinary
# requests (bench/peers/check.lua, -t2 -c64) to each in turn, alternated,
# EDGE_ROUNDS rounds (3) of EDGE_PHASE seconds (10). Prints requests/s and
# the server's CPU per request (µs, /proc), medians of the rounds.
set -euo pipefail
ROUNDS=${EDGE_ROUNDS:-3}
PHASE=${EDGE_PHASE:-10}
BIN=${NULLHTTP_BIN:-./bin/nullhttp}
command -v wrk >/dev/null || { echo "bench-http-edge: wrk not found" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A PORT PID
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for srv in std fast; do
	PORT[$srv]=$(free_port)
	"$BIN" -server "$srv" -listen "127.0.0.1:${PORT[$srv]}" &
	PID[$srv]=$!
	PIDS+=("${PID[$srv]}")
done
for _ in $(seq 50); do curl -s -o /dev/null -X POST "http://127.0.0.1:${PORT[fast]}/v1/check" && curl -s -o /dev/null -X POST "http://127.0.0.1:${PORT[std]}/v1/check" && break; sleep 0.1; done
TICK=$(getconf CLK_TCK)
OUT=$(mktemp)
for round in $(seq "$ROUNDS"); do
	order=(std fast)
	((round % 2 == 0)) && order=(fast std)
	for srv in "${order[@]}"; do
		c0=$(awk '{print $14 + $15}' "/proc/${PID[$srv]}/stat")
		res=$(PEERS_API=quota wrk -t2 -c64 -d"${PHASE}s" -s bench/peers/check.lua "http://127.0.0.1:${PORT[$srv]}")
		c1=$(awk '{print $14 + $15}' "/proc/${PID[$srv]}/stat")
		rps=$(awk '/Requests\/sec:/ {print $2}' <<<"$res")
		n=$(awk '/requests in/ {print $1}' <<<"$res")
		cpu=$(python3 -c "print(round(($c1-$c0)/$TICK/max($n,1)*1e6, 1))")
		echo "$round $srv $rps $cpu" | tee -a "$OUT"
	done
done
python3 - "$OUT" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {s: [statistics.median(float(r[i]) for r in rows if r[1] == s) for i in (2, 3)] for s in ("std", "fast")}
print()
print("| server | requests/s | CPU µs/request |")
print("| --- | --- | --- |")
for s, name in (("std", "net/http"), ("fast", "fasthttp")):
    print(f"| {name} | {med[s][0]:,.0f} | {med[s][1]:.1f} |")
print(f"\nfasthttp/net/http: {med['fast'][0]/med['std'][0]:.2f}× requests/s, {med['fast'][1]/med['std'][1]:.2f}× CPU per request (medians of {len(rows)//2} alternated rounds)")
PY

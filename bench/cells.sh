#!/usr/bin/env bash
# bench/cells.sh — make bench-cells: new cells and what a cell costs Redis
# in each tier, measured from outside (issue 52, item 3). One private
# redis-server (redis.conf's listpack limits), two fresh shard databases,
# quotad with one rule (bench/rules-monthly.yaml: [app_id, user_id], a
# month), identities u<i> of app a<i % 97> (bench/monthly.sh's), sent as
# POST /v1/check/batch bodies of 500 new identities, 4 in flight
# (bench/cmd/quotabench-cells).
#
# Each round runs quotad with QUOTA_TIERING=off and =on, taking turns
# (ABBA: even rounds on first). A run, on an emptied Redis and fresh shard
# databases:
#   1. fills 20,000 cells (used_memory H20), then 80,000 more (the fill
#      whose batches/s are reported; H100);
#   2. on only: one `quotactl migrate` with every cell's target warm
#      (QUOTA_HOT_THRESHOLD=1e9, QUOTA_COLD_THRESHOLD=0: W100), quotad
#      restarted, one with every target cold (both thresholds 1e9: C100);
#   3. on only: the same from an emptied Redis with 20,000 cells (W20, C20).
# Per cell = slope (X100 - X20) / 80,000 of INFO used_memory less the
# clients' buffers, read when it has settled, quotad stopped after a
# cycle, Redis' slow log off (mem below, CELLS_REDIS_ARGS); its "norm"
# figure counts Redis' key table at 48 B a key (mem). A cold cell's Redis
# is its tag's header (its cold filter); the hot keys are gone (the
# cycle's own keys are the same at 20,000 and 100,000 cells and cancel).
#
# Then RATE_ROUNDS rate rounds (7), off and on taking turns (ABBA), each
# on an emptied Redis and fresh databases: 20,000 cells, then
# RATE_CELLS (160,000) more, timed. A memory round's timed fill is 160
# batches, a second or two, which a shared two-core machine's moments
# swing by a third either way; the rate rounds time twice as many batches
# and seven pairs of them, so their median on/off says more.
#
# Prints one table: batches/s off and on per round and the median of the
# rounds' on/off ratios, quotad's and Redis' CPU µs a new cell of that
# fill; bytes per cell hot (off, on), warm and cold (medians over the
# rounds); then the rate rounds' batches/s and their median on/off.
# CELLS_BIN=path runs another quotad for both; CELLS_BIN_OLD=path adds an
# "on-old" variant to each round (old against new).
#
# Knobs: ROUNDS (3), RATE_ROUNDS (7; 0: none), RATE_CELLS (160000),
# CELLS_OUT (bench-out/cells), CELLS_PORT (16397), CELLS_LISTEN
# (127.0.0.1:18096), CELLS_C (4 batches in flight), CELLS_BIN (bin/quotad),
# CELLS_BIN_OLD (unset), CELLS_REDIS_ARGS (more redis-server arguments,
# after the ones above: "--slowlog-log-slower-than 10000" puts Redis'
# default slow log back, whose entries hold the cycles' long argument
# lists: up to 128 of them, a constant that the 100,000-cell cycle fills
# with more bytes than the 20,000-cell one). ~2 minutes a round.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}; OUT=${CELLS_OUT:-bench-out/cells}
RATE_ROUNDS=${RATE_ROUNDS:-7}; RATE_CELLS=${RATE_CELLS:-160000}
PORT=${CELLS_PORT:-16397}; LISTEN=${CELLS_LISTEN:-127.0.0.1:18096}; C=${CELLS_C:-4}
NEW=${CELLS_BIN:-bin/quotad}; OLD=${CELLS_BIN_OLD:-}
TOKEN=bench-cells-admin-token-0123456789
DBS=(quota_bc_0 quota_bc_1)
mkdir -p "$OUT"
work=$(mktemp -d)
QP=; RP=
stopq() { [[ -n $QP ]] && kill "$QP" 2>/dev/null && wait "$QP" 2>/dev/null; QP=; }
cleanup() {
	stopq || true
	[[ -n $RP ]] && kill "$RP" 2>/dev/null && wait "$RP" 2>/dev/null
	for d in "${DBS[@]}"; do mysql -uroot -e "DROP DATABASE IF EXISTS $d" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/fill" ./bench/cmd/quotabench-cells
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
	--hash-max-listpack-entries 128 --hash-max-listpack-value 64 --slowlog-log-slower-than -1 \
	--logfile "$work/redis.log" ${CELLS_REDIS_ARGS:-} &
RP=$!
until redis-cli -p "$PORT" PING >/dev/null 2>&1; do sleep 0.1; done
rcli() { redis-cli -p "$PORT" "$@"; }
shards=$(printf 'quota:quota@tcp(127.0.0.1:3306)/%s,' "${DBS[@]}"); shards=${shards%,}

# fresh: an empty Redis and empty shard databases.
fresh() {
	rcli FLUSHALL SYNC >/dev/null
	for d in "${DBS[@]}"; do
		until mysql -uroot -e "DROP DATABASE IF EXISTS $d; CREATE DATABASE $d CHARACTER SET utf8mb4" 2>"$work/mysql.err"; do
			grep -q "Too many connections" "$work/mysql.err" || { cat "$work/mysql.err" >&2; exit 1; }
			sleep 2
		done
	done
}
# startq BIN VAR=value...: quotad on the private Redis and the shards.
startq() {
	local bin=$1; shift
	env QUOTA_REDIS_ADDRS=127.0.0.1:$PORT QUOTA_MYSQL_SHARDS="$shards" QUOTA_LISTEN=$LISTEN QUOTA_GRPC_LISTEN=off \
		QUOTA_RULES=bench/rules-monthly.yaml QUOTA_RULES_STORE=file QUOTA_ADMIN_TOKEN=$TOKEN QUOTA_ANALYTICS=off \
		QUOTA_SCHEMA_ON_START=apply QUOTA_FAIL_MODE=closed QUOTA_REDIS_TIMEOUT=5s "$@" \
		nice -n 10 "$bin" serve >>"$work/quotad.log" 2>&1 &
	QP=$!
	until curl -sf "$LISTEN/readyz" >/dev/null; do
		kill -0 "$QP" 2>/dev/null || { tail -20 "$work/quotad.log" >&2; exit 1; }
		sleep 0.1
	done
}
# mem: INFO used_memory less the clients' buffers (mem_clients_normal),
# once it has settled (the same twice, 0.5 s apart), as "raw norm": norm
# counts Redis' key tables at 48 B a key (a dictEntry, an robj and one
# 8-byte slot; 32 an expire: entry and slot) instead of at the size they
# happen to have: a table grows by doubling and shrinks only when under
# 10 % full, so after a cycle deleted the hot keys its size depends on
# when Redis' cron looked (up to ~1.5 B a cell of noise in the slope).
mem() {
	local a b
	a=$(memraw)
	for _ in $(seq 60); do
		sleep 0.5
		b=$(memraw)
		[[ $a == "$b" ]] && break
		a=$b
	done
	echo "$b"
}
memraw() {
	{ rcli INFO memory; rcli INFO keyspace; rcli MEMORY STATS; } | tr -d '\r' | awk -F'[:,=]' '
		/^used_memory:/ { u = $2 } /^mem_clients_normal:/ { c = $2 }
		/^db0:/ { k = $3; e = $5 }
		prev == "overhead.hashtable.main" { hm = $1 } prev == "overhead.hashtable.expires" { he = $1 }
		{ prev = $0 }
		END { printf "%d:%d\n", u - c, u - c - hm - he + k * 48 + e * 32 }'
}
fill() { nice -n 10 "$work/fill" -url "http://$LISTEN" -from "$1" -to "$2" -c "$C"; }
cycle() {
	local r
	r=$(curl -sf -X POST -H "Authorization: Bearer $TOKEN" "$LISTEN/v1/admin/migrate")
	jq -c '{moved, failures}' <<<"$r" >>"$work/cycles.txt"
	[[ $(jq '.failures // 0' <<<"$r") == 0 ]] || { echo "cycle failed: $r" >&2; exit 1; }
}
warmq() { startq "$1" QUOTA_TIERING=on QUOTA_HOT_THRESHOLD=1e9 QUOTA_COLD_THRESHOLD=0; }
coldq() { startq "$1" QUOTA_TIERING=on QUOTA_HOT_THRESHOLD=1e9 QUOTA_COLD_THRESHOLD=1e9; }

# cpu: quotad's and Redis' CPU seconds so far ("quotad redis").
cpu() {
	local tck
	tck=$(getconf CLK_TCK)
	awk -v t="$tck" '{ printf "%.3f ", ($14 + $15) / t }' "/proc/$QP/stat"
	rcli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.3f\n", s }'
}

# run NAME BIN TIERING: one run; appends its figures to $OUT/runs.txt.
run() {
	local name=$1 bin=$2 tiering=$3 h20 h100 w20 w100 c20 c100 rate c0 c1
	fresh
	startq "$bin" QUOTA_TIERING="$tiering"
	fill 0 20000 >/dev/null
	h20=$(mem)
	c0=$(cpu)
	rate=$(fill 20000 100000 | sed -n 's/.*batches_per_s=\([0-9.]*\).*/\1/p')
	c1=$(cpu)
	h100=$(mem)
	stopq
	w20=0:0; w100=0:0; c20=0:0; c100=0:0
	if [[ $tiering == on ]]; then
		warmq "$bin"; cycle; stopq; w100=$(mem)
		coldq "$bin"; cycle; stopq; c100=$(mem)
		fresh
		startq "$bin" QUOTA_TIERING=on; fill 0 20000 >/dev/null; stopq
		warmq "$bin"; cycle; stopq; w20=$(mem)
		coldq "$bin"; cycle; stopq; c20=$(mem)
	fi
	echo "round=$round variant=$name batches_per_s=$rate cpu=$(awk -v a="$c0" -v b="$c1" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.2f:%.2f", (y[1] - x[1]) * 1e6 / 80000, (y[2] - x[2]) * 1e6 / 80000 }') h20=$h20 h100=$h100 w20=$w20 w100=$w100 c20=$c20 c100=$c100" | tee -a "$OUT/runs.txt"
}

: >"$OUT/runs.txt"
variants=("off $NEW off" "on $NEW on")
[[ -n $OLD ]] && variants+=("on-old $OLD on")
# rounds FN N: N rounds of FN over the variants, in reverse order every
# second round (ABBA); FN reads $round.
rounds() {
	local fn=$1 n=$2 order i v
	for round in $(seq "$n"); do
		order=("${variants[@]}")
		if ((round % 2 == 0)); then
			order=(); for ((i = ${#variants[@]} - 1; i >= 0; i--)); do order+=("${variants[$i]}"); done
		fi
		for v in "${order[@]}"; do
			# shellcheck disable=SC2086
			"$fn" $v
		done
	done
}
rounds run "$ROUNDS"
cp "$work/cycles.txt" "$OUT/cycles.txt" 2>/dev/null || true

# rate NAME BIN TIERING: one rate run; appends its batches/s to $OUT/rates.txt.
rate() {
	local name=$1 bin=$2 tiering=$3 r
	fresh
	startq "$bin" QUOTA_TIERING="$tiering"
	fill 0 20000 >/dev/null
	r=$(fill 20000 $((20000 + RATE_CELLS)) | sed -n 's/.*batches_per_s=\([0-9.]*\).*/\1/p')
	stopq
	echo "round=$round variant=$name batches_per_s=$r" | tee -a "$OUT/rates.txt"
}
: >"$OUT/rates.txt"
rounds rate "$RATE_ROUNDS"

{
	echo "bench-cells $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), ROUNDS=$ROUNDS, 97 apps, batches of 500, $C in flight"
	awk '
	function f(name,   i) { for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2); return "" }
	function part(v, k,   x) { split(v, x, ":"); return x[k] }
	# slope(a, b, k): bytes a cell from 20,000 to 100,000 cells, of the norm (k = 2) or raw (k = 1) figure
	function slope(a, b, k) { return (part(f(b), k) - part(f(a), k)) / 80000 }
	function median(a, n,   i, j, t, b) {
		for (i = 1; i <= n; i++) b[i] = a[i]
		for (i = 2; i <= n; i++) for (j = i; j > 1 && b[j-1] > b[j]; j--) { t = b[j]; b[j] = b[j-1]; b[j-1] = t }
		return n % 2 ? b[(n+1)/2] : (b[n/2] + b[n/2+1]) / 2
	}
	function list(a, n, fmt,   i, s) { s = ""; for (i = 1; i <= n; i++) s = s (i > 1 ? " " : "") sprintf(fmt, a[i]); return s }
	{
		r = f("round"); v = f("variant"); if (r > R) R = r
		seen[v] = 1
		rate[v, r] = f("batches_per_s"); qc[v, r] = part(f("cpu"), 1); rc[v, r] = part(f("cpu"), 2)
		hot[v, r] = slope("h20", "h100", 2); hotraw[v, r] = slope("h20", "h100", 1)
		warm[v, r] = slope("w20", "w100", 2); warmraw[v, r] = slope("w20", "w100", 1)
		cold[v, r] = slope("c20", "c100", 2); coldraw[v, r] = slope("c20", "c100", 1)
	}
	END {
		printf "| variant | batches/s (rounds) | on/off (rounds) | median on/off | quotad / Redis CPU µs a new cell | hot B/cell | warm B/cell (rounds; raw used_memory) | cold B/cell, header + filter (rounds; raw) |\n"
		printf "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
		for (v in seen) order[++nv] = v
		for (i = 2; i <= nv; i++) for (j = i; j > 1 && order[j-1] > order[j]; j--) { t = order[j]; order[j] = order[j-1]; order[j-1] = t }
		for (k = 1; k <= nv; k++) {
			v = order[k]
			for (r = 1; r <= R; r++) {
				a[r] = rate[v, r]; h[r] = hot[v, r]; w[r] = warm[v, r]; c[r] = cold[v, r]; q[r] = (rate["off", r] > 0 ? rate[v, r] / rate["off", r] : 0)
				wr[r] = warmraw[v, r]; cr[r] = coldraw[v, r]; qq[r] = qc[v, r]; rr[r] = rc[v, r]
			}
			if (v == "off") {
				printf "| off | %s | – | – | %.1f / %.1f | %.2f | – | – |\n", list(a, R, "%.1f"), median(qq, R), median(rr, R), median(h, R)
			} else {
				printf "| %s | %s | %s | **%.3f** | %.1f / %.1f | %.2f | **%.2f** (%s; %.2f) | **%.2f** (%s; %.2f) |\n", v, list(a, R, "%.1f"), list(q, R, "%.3f"), median(q, R),
					median(qq, R), median(rr, R), median(h, R), median(w, R), list(w, R, "%.2f"), median(wr, R), median(c, R), list(c, R, "%.2f"), median(cr, R)
			}
		}
	}' "$OUT/runs.txt"
	[[ -s $OUT/rates.txt ]] || exit 0
	echo
	awk -v cells="$RATE_CELLS" '
	function f(name,   i) { for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2); return "" }
	function median(a, n,   i, j, t, b) {
		for (i = 1; i <= n; i++) b[i] = a[i]
		for (i = 2; i <= n; i++) for (j = i; j > 1 && b[j-1] > b[j]; j--) { t = b[j]; b[j] = b[j-1]; b[j-1] = t }
		return n % 2 ? b[(n+1)/2] : (b[n/2] + b[n/2+1]) / 2
	}
	{ r = f("round"); v = f("variant"); if (r > R) R = r; seen[v] = 1; rate[v, r] = f("batches_per_s") }
	END {
		printf "| rate rounds (%d new cells after 20,000) | batches/s (rounds) | on/off (rounds) | median on/off |\n| --- | --- | --- | --- |\n", cells
		for (v in seen) order[++nv] = v
		for (i = 2; i <= nv; i++) for (j = i; j > 1 && order[j-1] > order[j]; j--) { t = order[j]; order[j] = order[j-1]; order[j-1] = t }
		for (k = 1; k <= nv; k++) {
			v = order[k]; s = ""; q = ""
			for (r = 1; r <= R; r++) {
				a[r] = rate[v, r]; x[r] = rate["off", r] > 0 ? rate[v, r] / rate["off", r] : 0
				s = s (r > 1 ? " " : "") sprintf("%.1f", a[r]); q = q (r > 1 ? " " : "") sprintf("%.3f", x[r])
			}
			if (v == "off") printf "| off | %s | – | – |\n", s
			else printf "| %s | %s | %s | **%.3f** |\n", v, s, q, median(x, R)
		}
	}' "$OUT/rates.txt"
} | tee "$OUT/summary.txt"

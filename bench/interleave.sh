#!/usr/bin/env bash
# bench/interleave.sh — two long-lived quotads (variant A and variant
# B, each with its own closed-loop quotabench) take turns on the machine in
# short slots: the pair not in its slot is frozen (SIGSTOP, quotabench
# first), so only one runs at a time. Slots go A B B A A B B A ..., and
# each slot is measured after a settle time, from quotad's own count of
# answered checks (/metrics, POST /v1/check) and /proc CPU ticks.
#
# Why: bench/ab.sh compares fresh quotads minutes apart, and on a
# shared 2-vCPU machine the drift between those minutes (other tenants)
# is larger than the few per cent being measured. Here the two sides of
# a pair are seconds apart, and every quotad stays warm for the whole run.
#
# What it does to the variant that defers work: a frozen quotad does
# nothing, so its flushes, rollups and paced work run in its own slots
# (its wall-clock timers fire late, on resume). Two biases, both against
# an analytics-on variant: it gets more flushes per call (a ticker's tick
# missed while frozen fires on resume), and it serves only part of each
# wall-clock minute, so its (app, interface, minute) rows hold fewer calls
# and it writes more of them per call. And one in its favour: MariaDB's
# background work (page flushing, purge) after an analytics slot can fall in the
# next slot. Each slot line prints mysql_us, MariaDB's CPU per check in
# it, so that leak shows in an analytics-off slot.
#
# Each slot prints a line ("slot ... pair P [variant] ..."), and each
# ABBA block of four slots a line per variant in ab.sh's format
# (block index as round, the measured parts of its two slots summed as
# the window), so
#   bash bench/ab-stats.sh LOG
# gives each block's change, and the mean's 95 % confidence interval. A
# block, not a pair, is the unit: in a block each variant has one slot in
# each phase of the minute (the slots start at about the same seconds of
# every minute when 60 is a multiple of 2*SLOT), so whatever follows the clock
# (a fixed window's keys, Redis' expiry cycle) falls on both alike.
#
# Knobs (environment):
#   IL_VARIANTS  "A;B", each a space-separated VAR=value list for quotad
#                (default "QUOTA_ANALYTICS=off;QUOTA_ANALYTICS=on"); the
#                first is the baseline
#   PAIRS        pairs of slots, even: whole blocks (default 32); SLOT: seconds a slot runs
#                (default 30); SETTLE: seconds after resume before its
#                measurement starts (default 3)
#   WARMUP       seconds both run at first, alternating, before slot 1 (default 240)
#   IL_KEYS      quotabench key flags (default make bench's uniform keys)
#   IL_OUT       folder for the quotads' logs (default bench-out/interleave)
# Usage (after make schema and make build), under the benchmark lock:
#   flock /tmp/quota-bench.lock bash bench/interleave.sh > LOG
#   bash bench/ab-stats.sh LOG
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/redis-db.sh
source bench/measure.sh
PAIRS=${PAIRS:-32}; SLOT=${SLOT:-30}; SETTLE=${SETTLE:-3}; WARMUP=${WARMUP:-240}
for n in PAIRS SLOT SETTLE WARMUP; do
	[[ ${!n} =~ ^[0-9]+$ ]] || { echo "$n must be a whole number (got '${!n}')" >&2; exit 2; }
done
((PAIRS % 2 == 0)) || { echo "PAIRS must be even (whole ABBA blocks), got $PAIRS" >&2; exit 2; }
((SETTLE < SLOT)) || { echo "SETTLE ($SETTLE) must be less than SLOT ($SLOT)" >&2; exit 2; }
KEYS=${IL_KEYS:--apps 1000 -users 100000 -ifaces 50 -ips 100000}
OUT=${IL_OUT:-bench-out/interleave}
mkdir -p "$OUT"
IFS=';' read -r -a variants <<< "${IL_VARIANTS:-QUOTA_ANALYTICS=off;QUOTA_ANALYTICS=on}"
((${#variants[@]} == 2)) || { echo "IL_VARIANTS must name two variants, A;B" >&2; exit 2; }
ports=(18090 18091)
RP=$(pgrep -x redis-server | head -1); MP=$(pgrep -x mariadbd | head -1)
QP=(); BP=()
cleanup() {
	for p in "${BP[@]}" "${QP[@]}"; do kill -CONT "$p" 2>/dev/null; done
	for p in "${BP[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${QP[@]}"; do kill -TERM "$p" 2>/dev/null; done
	wait 2>/dev/null
	bench_db_cleanup
}
trap cleanup EXIT
# checks quotad has answered (every status code), and how many of them
# without a decision (the store unavailable: QUOTA_FAIL_MODE=open)
checks() {
	curl -sf "127.0.0.1:${ports[$1]}/metrics" |
		awk '/^quota_http_requests_total\{/ && /route="\/v1\/check"/ {n += $NF}
			$1 == "quota_unenforced_checks_total" {u = $2} END {printf "%d %d", n, u}'
}
# figures CHECKS SECONDS MACHINE QUOTAD QUOTABENCH REDIS MARIADB ALL STOLEN
# UNENFORCED (the five to STOLEN in ticks): the name=value fields
# ab-stats.sh reads, and more
figures() {
	echo "requests=$1 seconds=$2 req_per_s=$(awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", n / s }') machine_us_per_check=$(per "$3" "$1") quotad_us=$(per "$4" "$1") quotabench_us=$(per "$5" "$1") redis_us=$(per "$6" "$1") mysql_us=$(per "$7" "$1") busy_pct=$(pct "$3" "$8") steal_pct=$(pct "$9" "$8") unenforced=${10}"
}
# vadd "A1 A2 ..." "B1 B2 ...": the sum, figure by figure
vadd() { awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x); split(b, y); for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? " " : ""), x[i] + y[i] }'; }
# quotabench first, and quotad a moment later, once its checks in flight
# are answered: a check frozen while waiting for Redis times out on resume
# (its deadline passed while frozen) and opens the breaker for 100 ms
freeze() { kill -STOP "${BP[$1]}"; sleep 0.3; kill -STOP "${QP[$1]}"; }
thaw() { kill -CONT "${QP[$1]}"; kill -CONT "${BP[$1]}"; }

total=$((WARMUP + 2 * PAIRS * SLOT + 600))
for i in 0 1; do
	vars=()
	read -r -a vars <<< "${variants[i]}"
	env QUOTA_REDIS_DB="$BENCH_QUOTAD_REDIS_DB" QUOTA_LISTEN="127.0.0.1:${ports[i]}" QUOTA_GRPC_LISTEN=off \
		QUOTA_REDIS_KEY_PREFIX="il$i$RANDOM:" "${vars[@]}" bin/quotad >"$OUT/quotad$i.log" 2>&1 &
	QP[i]=$!
	until curl -sf "127.0.0.1:${ports[i]}/readyz" >/dev/null; do
		kill -0 "${QP[i]}" 2>/dev/null || { echo "quotad (${variants[i]}) exited:" >&2; cat "$OUT/quotad$i.log" >&2; exit 1; }
		sleep 0.2
	done
	# shellcheck disable=SC2086 # KEYS is a list of flags
	bin/quotabench -url "http://127.0.0.1:${ports[i]}" -c 64 -d "${total}s" $KEYS -progress=false >"$OUT/bench$i.log" 2>&1 &
	BP[i]=$!
	freeze "$i"
done
# Warm both up (heaps, connections, the first flushes), in turns.
for ((w = 0; w < WARMUP; w += 2 * SLOT)); do
	for i in 0 1; do thaw "$i"; sleep "$SLOT"; freeze "$i"; done
done
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) PAIRS=$PAIRS SLOT=$SLOT SETTLE=$SETTLE keys: $KEYS" >&2
zero="0 0 0 0 0 0 0 0 0 0"
for p in $(seq 1 "$PAIRS"); do
	order="0 1"; if ((p % 2 == 0)); then order="1 0"; fi
	if ((p % 2 == 1)); then sum=("$zero" "$zero"); fi
	for i in $order; do
		thaw "$i"
		sleep "$SETTLE"
		read -r c0 u0 < <(checks "$i"); t0=$(date +%s.%N)
		q0=$(cpu "${QP[i]}"); g0=$(cpu "${BP[i]}"); r0=$(cpu "$RP"); m0=$(cpu "$MP")
		read -r b0 a0 s0 < <(machine)
		sleep $((SLOT - SETTLE))
		read -r c1 u1 < <(checks "$i"); t1=$(date +%s.%N)
		q1=$(cpu "${QP[i]}"); g1=$(cpu "${BP[i]}"); r1=$(cpu "$RP"); m1=$(cpu "$MP")
		read -r b1 a1 s1 < <(machine)
		freeze "$i"
		secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
		slot="$((c1 - c0)) $secs $((b1 - b0)) $((q1 - q0)) $((g1 - g0)) $((r1 - r0)) $((m1 - m0)) $((a1 - a0)) $((s1 - s0)) $((u1 - u0))"
		# shellcheck disable=SC2086 # slot is a list of figures
		echo "slot $(date -u +%T) pair $p [${variants[i]}] $(figures $slot)"
		sum[i]=$(vadd "${sum[i]}" "$slot")
	done
	if ((p % 2 == 0)); then
		for i in 0 1; do
			# shellcheck disable=SC2086
			echo "block $(date -u +%T) round $((p / 2)) [${variants[i]}] | window ${SETTLE}-${SLOT}s: $(figures ${sum[i]})"
		done
	fi
done
for i in 0 1; do
	thaw "$i"
	echo "# quotad ${variants[i]}: $(grep -c 'analytics rollup' "$OUT/quotad$i.log") rollups logged, flush errors $(curl -sf "127.0.0.1:${ports[i]}/metrics" | metric quota_analytics_flush_errors_total)" >&2
done

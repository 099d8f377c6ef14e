#!/usr/bin/env bash
# bench/ab.sh — compare quotad under a few settings on one machine:
# for each round, for each variant, a fresh quotad started with the
# variant's environment and driven by quotabench for D, so every variant sees
# the same machine (variants interleaved, not run one after the other).
#
# Per run it prints quotabench's summary (req/s, latency percentiles, late
# sends in open loop), the three seconds of the run with the highest p99
# (p99 ms @ second, from quotabench's timeline: a flush shows there), and the CPU ticks (1/100 s) used during it: quotad's as
# microseconds per check (ticks*10000/requests, a measure that other load on
# a shared machine disturbs far less than req/s), and redis-server's and
# mariadbd's as ticks (whole servers, other users included), and Redis'
# own microseconds per EVALSHA (INFO commandstats, reset before the run;
# the Redis is shared, so other users' scripts count too) and how busy the
# whole machine was (every core, /proc/stat) and its busy CPU per check
# (every process; at a fixed AB_RATE the lens least disturbed by noise,
# since the machine is not saturated); then, "to
# exit", quotad's CPU seconds over its whole life and the servers' ticks
# until it exited, which include work left when the load stopped (a paced
# analytics flush, the final flush on SIGTERM); and quotad's heap in use
# and resident memory as the load ends (its /metrics).
#
# Knobs (environment):
#   AB_VARIANTS  variants separated by ';', each a space-separated list of
#                VAR=value for quotad (default "QUOTA_ANALYTICS=off;QUOTA_ANALYTICS=on");
#                BIN=path in a variant runs that quotad binary instead of
#                bin/quotad (old against new: build the old one elsewhere)
#   AB_RATE      requests per second, open loop (default 0: closed loop, -c 64)
#   AB_KEYS      quotabench key flags (default make bench's uniform keys)
#   ROUNDS       rounds (default 3); D: duration of each run (default 20s)
#   AB_LISTEN    quotad's address (default 127.0.0.1:18090)
#   AB_WINDOW    W0:W1 (seconds into each run): also print the req/s and the CPU per check of
#                the machine, quotad, Redis and MariaDB between those two
#                moments, over the requests quotabench's timeline counts in
#                them. The steady state, without start-up or the final
#                flush (which at shutdown also saves every day's distinct-user
#                registers, a once-a-day cost): make W1-W0 a multiple of the
#                flush interval (15 s) so the window holds whole flushes;
#                quotad's share is also split out as its system (kernel)
#                µs per check and its minor page faults per 1,000 checks
#   AB_OUT       folder for each run's quotabench JSON, its per-second
#                timeline included (default bench-out/ab)
#   AB_MYSQL     1: also print MariaDB's statements (Com_select, _insert,
#                _update, _delete, _replace, _insert_select) and rows written
#                (Handler_write, _update, _delete: MariaDB has no
#                Innodb_rows_*; internal temporary tables count too) per 1,000 checks,
#                from the load's start until quotad exited (its final
#                flushes included), from SHOW GLOBAL STATUS (mysql -uroot
#                over the socket; the whole server, other users included)
#   AB_BEFORE    a command run (bash -c) before each quotad starts, with the
#                variant's settings in its environment (make bench-plans
#                seeds the apps' plans with it)
#   AB_ORDER     "alternate": even rounds run the variants in reverse order
#                (ABBA), so that a drift of the machine over a round, or a
#                run's leftovers (MariaDB's page flushing after an analytics
#                run), falls on each variant alike; default: same order
# Each run also prints steal_pct (the share of the machine's ticks that
# the hypervisor gave to others, /proc/stat's steal, counted in busy) and
# rollups (each analytics rollup quotad logged, the cron job at every tenth
# minute, as start-end seconds into the run, "!" if it failed or was
# cancelled at shutdown: a window holding one pays for it).
# Usage (after make schema, which builds and applies sql/), under the
# benchmark lock of a shared machine:
#   flock /tmp/quota-bench.lock bash bench/ab.sh
#   AB_RATE=4630 ROUNDS=2 bash bench/ab.sh          # the platform's peak
#   AB_VARIANTS="GOGC=100;GOGC=400" bash bench/ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/redis-db.sh
source bench/measure.sh
trap bench_db_cleanup EXIT
D=${D:-20s}; ROUNDS=${ROUNDS:-3}; RATE=${AB_RATE:-0}
LISTEN=${AB_LISTEN:-127.0.0.1:18090}
WINDOW=${AB_WINDOW:-}
if [[ -n $WINDOW ]]; then
	IFS=: read -r W0 W1 <<< "$WINDOW"
	[[ $W0 =~ ^[0-9]+$ && $W1 =~ ^[0-9]+$ ]] && ((W0 < W1)) || { echo "AB_WINDOW must be W0:W1, whole seconds, W0 < W1 (got '$WINDOW')" >&2; exit 2; }
	command -v jq >/dev/null || { echo "AB_WINDOW needs jq" >&2; exit 2; }
fi
KEYS=${AB_KEYS:--apps 1000 -users 100000 -ifaces 50 -ips 100000}
IFS=';' read -r -a variants <<< "${AB_VARIANTS:-QUOTA_ANALYTICS=off;QUOTA_ANALYTICS=on}"
RP=$(pgrep -x redis-server | head -1); MP=$(pgrep -x mariadbd | head -1)
# ticks of quotad, redis-server and mariadbd, then machine's three figures
sample() { echo "$(cpu "$QP") $(cpu "$RP") $(cpu "$MP") $(machine)"; }
# MariaDB's statements and rows written so far (AB_MYSQL=1)
mysql_counts() {
	mysql -uroot -N -e "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select','Com_insert','Com_update','Com_delete','Com_replace','Com_insert_select','Handler_write','Handler_update','Handler_delete')" |
		awk '$1 ~ /^Com_/ {s += $2} $1 ~ /^Handler_/ {w += $2} END {print s + 0, w + 0}'
}
# quotad's system ticks and minor page faults (/proc/PID/stat fields 15 and 10)
kernel_side() { awk '{print $15, $10}' "/proc/$1/stat"; }
load=(-c 64)
if [[ $RATE != 0 ]]; then load=(-rate "$RATE"); fi
log=${TMPDIR:-/tmp}/ab-quotad.$$.log
OUT=${AB_OUT:-bench-out/ab}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
	order=$(seq 1 ${#variants[@]})
	if [[ ${AB_ORDER:-} == alternate ]] && ((r % 2 == 0)); then order=$(seq ${#variants[@]} -1 1); fi
	for i in $order; do
		v=${variants[i - 1]}; json="$OUT/round$r-variant$i.json"
		bin=bin/quotad vars=()
		for w in $v; do
			if [[ $w == BIN=* ]]; then bin=${w#BIN=}; else vars+=("$w"); fi
		done
		if [[ -n ${AB_BEFORE:-} ]]; then
			env QUOTA_REDIS_DB="$BENCH_QUOTAD_REDIS_DB" "${vars[@]}" bash -c "$AB_BEFORE" || exit 1
		fi
		/usr/bin/time -f '%U %S' -o "$log.time" env QUOTA_REDIS_DB="$BENCH_QUOTAD_REDIS_DB" QUOTA_LISTEN="$LISTEN" QUOTA_GRPC_LISTEN=off \
			QUOTA_REDIS_KEY_PREFIX="ab$RANDOM:" "${vars[@]}" "$bin" >"$log" 2>&1 &
		TP=$!
		until curl -sf "$LISTEN/readyz" >/dev/null; do
			kill -0 $TP 2>/dev/null || { echo "quotad ($v) exited:" >&2; cat "$log" >&2; exit 1; }
			sleep 0.2
		done
		QP=$(pgrep -P $TP -x "$(basename "$bin")")
		l0=$(cut -d' ' -f1 /proc/loadavg)
		redis-cli -h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}" CONFIG RESETSTAT >/dev/null
		read -r q0 r0 m0 b0 t0 s0 < <(sample)
		if [[ ${AB_MYSQL:-} == 1 ]]; then read -r st0 rw0 < <(mysql_counts); fi
		start=$(date +%s.%N)
		# shellcheck disable=SC2086 # KEYS is a list of flags
		bin/quotabench -url "http://$LISTEN" "${load[@]}" -d "$D" $KEYS -progress=false -json "$json" >"$log.bench" 2>&1 &
		BP=$!
		win=""
		if [[ -n $WINDOW ]]; then
			sleep "$W0"
			read -r wq0 wr0 wm0 wb0 wt0 ws0 < <(sample)
			read -r wk0 wf0 < <(kernel_side "$QP")
			sleep $((W1 - W0))
			read -r wq1 wr1 wm1 wb1 wt1 ws1 < <(sample)
			read -r wk1 wf1 < <(kernel_side "$QP")
		fi
		wait "$BP"
		mysql_fig=""
		out=$(cat "$log.bench")
		if [[ -n $WINDOW ]]; then
			wn=$(jq "[.timeline[] | select(.second > $W0 and .second <= $W1) | .requests] | add // 0" "$json")
			win=" | window ${W0}-${W1}s: requests=$wn req_per_s=$(awk -v n="$wn" -v s=$((W1 - W0)) 'BEGIN { printf "%.1f", n / s }') machine_us_per_check=$(per $((wb1 - wb0)) "$wn") quotad_us=$(per $((wq1 - wq0)) "$wn") quotad_sys_us=$(per $((wk1 - wk0)) "$wn") quotad_faults_per_1000=$(awk -v f=$((wf1 - wf0)) -v n="$wn" 'BEGIN { printf "%.1f", (n > 0 ? f * 1000 / n : 0) }') redis_us=$(per $((wr1 - wr0)) "$wn") mysql_us=$(per $((wm1 - wm0)) "$wn") steal_pct=$(pct $((ws1 - ws0)) $((wt1 - wt0)))"
		fi
		read -r q1 r1 m1 b1 t1 s1 < <(sample)
		# Redis' own time per script call (nested commands included).
		evalsha=$(redis-cli -h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}" INFO commandstats |
			awk -F'[=,]' '/^cmdstat_evalsha:/ {print $6}')
		# A flush that failed (no schema: run `make schema`) would make analytics look free.
		metrics=$(curl -sf "$LISTEN/metrics")
		flush_errors=$(metric quota_analytics_flush_errors_total <<< "$metrics")
		# quotad's garbage collections so far (its whole life): a tiny heap
		# collected many times a second costs CPU that a larger one does not.
		gc_cycles=$(metric go_gc_duration_seconds_count <<< "$metrics")
		# quotad's memory as the load ends: heap in use and resident.
		heap_mb=$(metric go_memstats_heap_inuse_bytes 1048576 <<< "$metrics")
		rss_mb=$(metric process_resident_memory_bytes 1048576 <<< "$metrics")
		kill -TERM "$QP"; wait "$TP" 2>/dev/null
		# Until quotad exited: what its final flushes wrote counts too.
		if [[ ${AB_MYSQL:-} == 1 ]]; then read -r st1 rw1 < <(mysql_counts); fi
		# Each rollup as start-end, in seconds into the run (its log line is
		# written at its end and says how long it took), "!" if it failed
		# (shutdown cancels one still running).
		rollups=$(jq -r --argjson t0 "$start" 'select(.msg | startswith("analytics rollup")) |
			((.time | sub("\\.[0-9]+"; "") | sub("Z$"; "") | strptime("%Y-%m-%dT%H:%M:%S") | mktime) - $t0) as $at |
			"\($at - (.seconds // 0) | floor)-\($at | floor)s\(if .level == "ERROR" then "!" else "" end)"' "$log" 2>/dev/null | paste -sd, -)
		# Each run starts on an empty database: millions of keys left by the
		# runs before make Redis' GETs and SETs slower (a bigger dict, more
		# cache misses), which would favour whichever variant runs first.
		if [[ $bench_db_size_before == 0 ]]; then bench_db_cli FLUSHDB >/dev/null; fi
		# quotad's whole life, its final flush included, and the servers'
		# ticks until it exited: a flush still running when the load stopped
		# (a paced one) is counted here, not in the per-check figure.
		r2=$(cpu "$RP"); m2=$(cpu "$MP")
		read -r b2 _ < <(machine)
		qlife=$(awk '{printf "%.2f", $1 + $2}' "$log.time")
		n=$(echo "$out" | awk '$1 == "requests" {print $2; exit}')
		if [[ ${AB_MYSQL:-} == 1 ]]; then
			mysql_fig=" mysql_stmts_per_1000=$(awk -v d=$((st1 - st0)) -v n="$n" 'BEGIN { printf "%.2f", (n > 0 ? d * 1000 / n : 0) }') mysql_rows_written_per_1000=$(awk -v d=$((rw1 - rw0)) -v n="$n" 'BEGIN { printf "%.2f", (n > 0 ? d * 1000 / n : 0) }')"
		fi
		echo "$out" | grep -E "^\s+(requests|latency|late)" | tr -s ' ' | tr '\n' ' '
		worst=$(jq -r '[.timeline[]?] | sort_by(-.p99_ms) | .[:3] | map("\(.p99_ms)@\(.second)s") | join(" ")' "$json" 2>/dev/null)
		echo " | worst seconds: $worst | round $r [$v] load=$l0 quotad_cpu_us_per_check=$(((q1 - q0) * 10000 / (n > 0 ? n : 1))) redis_ticks=$((r1 - r0)) evalsha_us=${evalsha:-?} machine_busy_pct=$(((b1 - b0) * 100 / (t1 > t0 ? t1 - t0 : 1))) machine_us_per_check=$(((b1 - b0) * 10000 / (n > 0 ? n : 1))) mysql_ticks=$((m1 - m0)) steal_pct=$(pct $((s1 - s0)) $((t1 - t0))) rollups=${rollups:-none} gc_cycles=${gc_cycles:-?} heap_inuse_mb=${heap_mb:-?} rss_mb=${rss_mb:-?} flush_errors=${flush_errors:-?}$mysql_fig | to exit: quotad_cpu_s=$qlife redis_ticks=$((r2 - r0)) mysql_ticks=$((m2 - m0)) machine_us_per_check=$(((b2 - b0) * 10000 / (n > 0 ? n : 1)))$win"
	done
done
rm -f "$log" "$log.time" "$log.bench"

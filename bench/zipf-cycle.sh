#!/usr/bin/env bash
# bench/zipf-cycle.sh — issue 4's Zipf migration benchmark (what `make
# bench-zipf-cycle` runs; BENCHMARKS.md's git history, "Issue 4's Zipf run" and after).
#
# Sets up, on this machine:
#   - a private redis-server on 127.0.0.1:$ZIPF_REDIS_PORT (--save ""
#     --appendonly no --hash-max-listpack-entries 128
#     --hash-max-listpack-value 64), its files in a temporary directory;
#   - fresh databases quota_zipf_0 / quota_zipf_1 on the local MariaDB
#     (mysql -uroot; dropped first if they exist), granted to user quota,
#     schema applied by `quotad migrate-schema`;
#   - quotad on 127.0.0.1:$ZIPF_LISTEN_PORT with QUOTA_TIERING=on
#     QUOTA_ANALYTICS=off QUOTA_COLD_THRESHOLD=5 QUOTA_MIGRATE_MIN_WINDOW=0,
#     rules deploy/rules.yaml,
#     on that Redis and those databases;
# then runs open-loop quotabench phases with the same seed (-dist zipf
# -zipf-s 1.1 -identities $ZIPF_IDENTITIES -rate $ZIPF_RATE):
#   fill     every cell new, placed hot               ($ZIPF_FILL)
#   before   replay, all hot: the "before" latency     ($ZIPF_BEFORE)
#   again    the same replay once more, still before the cycle: how much
#            two identical phases differ, against which "after" is read
#                                                      ($ZIPF_AGAIN; 0 skips it)
#   (Redis used_memory, quotactl tiers; one `quotactl migrate`; quotactl tiers
#    polled until nothing is moving; used_memory and quotactl tiers again)
#   after    replay right after the cycle              ($ZIPF_AFTER)
#   settled  replay again, tiers settled               ($ZIPF_SETTLED)
# and prints a summary. On exit (also on failure or Ctrl-C) quotad and the
# private redis-server are stopped and the quota_zipf_* databases dropped
# (and their grants revoked).
#
# Usage (after make services build):
#   bash bench/zipf-cycle.sh
#   ZIPF_IDENTITIES=1000000 ZIPF_FILL=90s ZIPF_BEFORE=45s ZIPF_AFTER=60s \
#     ZIPF_SETTLED=45s make bench-zipf-cycle
#   QUOTA_COALESCE=32 make bench-zipf-cycle        # an A/B knob for quotad
# On a shared machine run it under the benchmarks' lock:
#   flock /tmp/quota-bench.lock make bench-zipf-cycle
# It takes no lock itself.
#
# Knobs (environment):
#   ZIPF_IDENTITIES   quotabench -identities              (default 10000000)
#   ZIPF_RATE         quotabench -rate, req/s             (default 1500)
#   ZIPF_FILL, ZIPF_BEFORE, ZIPF_AFTER, ZIPF_SETTLED
#   ZIPF_AGAIN        phase durations (quotabench -d)     (4m, 2m, 2m, 1m, 2m)
#   ZIPF_REDIS_PORT   private redis-server's port         (default 16391)
#   ZIPF_LISTEN_PORT  quotad's port on 127.0.0.1          (default 18091)
#   MYSQL_PORT        the local MariaDB's TCP port        (default 3306)
#   BENCH_OUT         output directory                    (default bench-out/zipf-cycle)
#   QUOTAD_BIN, QUOTABENCH_BIN, QUOTACTL_BIN
#                     binaries (default bin/quotad, bin/quotabench, bin/quotactl)
#   READY_TIMEOUT     seconds to wait for /readyz         (default 30)
#   QUOTA_PPROF_LISTEN set (e.g. 127.0.0.1:6062): quotad serves pprof there and
#                     each phase saves a CPU profile, $BENCH_OUT/PHASE.cpu.pprof,
#                     of ZIPF_PROFILE_SECONDS (default 30) from 10 s into it
#   ZIPF_MYSQL_NICE   set (-20..19, e.g. 19): every thread of the local mariadbd
#                     (or mysqld) runs at that nice value during the run, and
#                     at the end every thread gets the nice value the server's
#                     main thread had before (0 on a stock install); with 19 the database
#                     only gets the CPU the rest leave idle, which stands in for
#                     a database on its own hosts, as in production, when
#                     asking whether the hot path itself slows after the cycle
#   QUOTA_COLD_THRESHOLD  default 5 here (a run of minutes gives every cell a
#                     call in the hour, so quotad's default 1 sends nothing cold)
#   QUOTA_ADMIN_TOKEN quotad's admin token, also used by quotactl (default: a
#                     fixed token of this script's)
# Every other QUOTA_* variable (QUOTA_COALESCE, QUOTA_PROMOTE_INTERVAL,
# QUOTA_WARM_BUCKETS_PER_TAG, GOGC, …) is passed through to quotad from the
# caller's environment; the summary lists them (and GOGC, GOMEMLIMIT,
# GOMAXPROCS). The script sets QUOTA_LISTEN, QUOTA_REDIS_ADDRS,
# QUOTA_REDIS_DB=0, QUOTA_MYSQL_SHARDS, QUOTA_RULES, QUOTA_TIERING and
# QUOTA_ANALYTICS, and clears QUOTA_REDIS_PASSWORD and QUOTA_CHECK_TOKEN.
#
# Output, in $BENCH_OUT: fill.json, before.json, after.json, settled.json
# (quotabench -json) and the matching .txt, tiers-before.txt, migrate.txt,
# tiers-after.txt, quotad.log and summary.txt. summary.txt (also printed):
# per phase requests, req/s, errors, and per tier (hot/warm/cold, quotabench's
# tally by the slowest tier a check's answer names) the share of checks and
# p50/p99; the migrate output; Redis used_memory before/after the cycle and
# bytes per identity (used_memory after / ZIPF_IDENTITIES).
# Exit status 0, or 1 with one line on stderr (quotactl migrate failing is
# reported in the summary and makes the status 1 after the remaining phases).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

N=${ZIPF_IDENTITIES:-10000000}
RATE=${ZIPF_RATE:-1500}
FILL=${ZIPF_FILL:-4m}
BEFORE=${ZIPF_BEFORE:-2m}
AFTER=${ZIPF_AFTER:-2m}
SETTLED=${ZIPF_SETTLED:-1m}
AGAIN=${ZIPF_AGAIN:-2m}
REDIS_PORT=${ZIPF_REDIS_PORT:-16391}
LISTEN_PORT=${ZIPF_LISTEN_PORT:-18091}
MYSQL_PORT=${MYSQL_PORT:-3306}
OUT_DIR=${BENCH_OUT:-bench-out/zipf-cycle}
QUOTAD_BIN=${QUOTAD_BIN:-bin/quotad}
QUOTABENCH_BIN=${QUOTABENCH_BIN:-bin/quotabench}
QUOTACTL_BIN=${QUOTACTL_BIN:-bin/quotactl}
READY_TIMEOUT=${READY_TIMEOUT:-30}
PROFILE_SECONDS=${ZIPF_PROFILE_SECONDS:-30}
ADMIN_TOKEN=${QUOTA_ADMIN_TOKEN:-zipf-cycle-admin-token}
COLD_THRESHOLD=${QUOTA_COLD_THRESHOLD:-5}
MYSQL_NICE=${ZIPF_MYSQL_NICE:-}
DBS=(quota_zipf_0 quota_zipf_1)
BASE_URL="http://127.0.0.1:$LISTEN_PORT"

die() {
	echo "bench-zipf-cycle: $*" >&2
	exit 1
}
say() { echo "bench-zipf-cycle: $*"; }

for b in "$QUOTAD_BIN" "$QUOTABENCH_BIN" "$QUOTACTL_BIN"; do
	[[ -x $b ]] || die "$b not found or not executable (make build, or set QUOTAD_BIN / QUOTABENCH_BIN / QUOTACTL_BIN)"
done
for c in redis-server redis-cli mysql curl; do
	command -v "$c" >/dev/null 2>&1 || die "$c not found (Debian packages redis-server, redis-tools, mariadb-client, curl)"
done
if command -v jq >/dev/null 2>&1; then
	JSON_TOOL=jq
elif command -v python3 >/dev/null 2>&1; then
	JSON_TOOL=python3
else
	die "neither jq nor python3 found: one is needed to read quotabench's JSON (Debian package jq)"
fi
[[ $N =~ ^[1-9][0-9]*$ ]] || die "ZIPF_IDENTITIES must be a positive integer, got '$N'"
[[ $RATE =~ ^[0-9]+([.][0-9]+)?$ ]] || die "ZIPF_RATE must be a number of req/s, got '$RATE'"
for p in "$REDIS_PORT" "$LISTEN_PORT" "$MYSQL_PORT" "$READY_TIMEOUT"; do
	[[ $p =~ ^[1-9][0-9]*$ ]] || die "ports and READY_TIMEOUT must be positive integers, got '$p'"
done
if [[ -n $MYSQL_NICE ]]; then
	[[ $MYSQL_NICE =~ ^-?[0-9]+$ ]] && ((MYSQL_NICE >= -20 && MYSQL_NICE <= 19)) ||
		die "ZIPF_MYSQL_NICE must be a nice value from -20 to 19, got '$MYSQL_NICE'"
	MYSQL_PID=$(pgrep -x mariadbd || pgrep -x mysqld || true)
	MYSQL_PID=${MYSQL_PID%%$'\n'*}
	[[ -n $MYSQL_PID ]] || die "ZIPF_MYSQL_NICE is set but no local mariadbd or mysqld runs"
	MYSQL_NICE_WAS=$(ps -o ni= -p "$MYSQL_PID" | tr -d ' ')
fi
((${#ADMIN_TOKEN} >= 16)) || die "QUOTA_ADMIN_TOKEN must be at least 16 characters (quotad refuses shorter ones)"

# port_in_use PORT: something accepts connections on 127.0.0.1:PORT.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_in_use "$REDIS_PORT" && die "127.0.0.1:$REDIS_PORT is taken (a leftover redis-server? set ZIPF_REDIS_PORT)"
port_in_use "$LISTEN_PORT" && die "127.0.0.1:$LISTEN_PORT is taken (set ZIPF_LISTEN_PORT)"

mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/{fill,before,after,settled}.{json,txt} "$OUT_DIR"/{tiers-before,migrate,tiers-after,summary}.txt
QUOTAD_LOG="$OUT_DIR/quotad.log"
TMP=$(mktemp -d -t bench-zipf-cycle.XXXXXX)

rcli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
root_sql() { mysql -uroot --batch --skip-column-names -e "$1"; }

# ---------------------------------------------------------------- clean-up

QUOTAD_PID=""
REDIS_PID=""
BENCH_PID=""
DBS_CREATED=""
MYSQL_RENICED=""

# renice_mysql N: every thread of the database server at nice N (a thread
# it starts later inherits its creator's).
renice_mysql() {
	local t
	for t in /proc/"$MYSQL_PID"/task/*; do
		renice -n "$1" -p "${t##*/}" >/dev/null 2>&1 || true
	done
}

# shellcheck source=bench/stop-pid.sh
source "$(dirname "$0")/stop-pid.sh"

cleanup() {
	local rc=$?
	set +e
	if [[ -n $BENCH_PID ]]; then
		stop_pid "$BENCH_PID" quotabench 5
		BENCH_PID=""
	fi
	if [[ -n $QUOTAD_PID ]]; then
		stop_pid "$QUOTAD_PID" quotad 15
		QUOTAD_PID=""
	fi
	if [[ -n $REDIS_PID ]]; then
		rcli shutdown nosave >/dev/null 2>&1
		stop_pid "$REDIS_PID" redis-server 10
		REDIS_PID=""
	fi
	if [[ -n $DBS_CREATED ]]; then
		local sql="" db host
		for db in "${DBS[@]}"; do
			sql+="DROP DATABASE IF EXISTS \`$db\`;"
		done
		root_sql "$sql" || echo "bench-zipf-cycle: could not drop ${DBS[*]}: drop them yourself (mysql -uroot)" >&2
		# The grants are the script's own; user quota keeps its `quota%` grant.
		for db in "${DBS[@]}"; do
			for host in 127.0.0.1 localhost; do
				root_sql "REVOKE ALL PRIVILEGES ON \`$db\`.* FROM 'quota'@'$host'" >/dev/null 2>&1
			done
		done
		DBS_CREATED=""
	fi
	if [[ -n $MYSQL_RENICED ]]; then
		renice_mysql "$MYSQL_NICE_WAS"
		MYSQL_RENICED=""
	fi
	rm -rf "$TMP"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- set-up

say "private redis-server on 127.0.0.1:$REDIS_PORT (files in $TMP)"
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
	--hash-max-listpack-entries 128 --hash-max-listpack-value 64 \
	--dir "$TMP" --logfile "$TMP/redis.log" >/dev/null 2>&1 &
REDIS_PID=$!
deadline=$((SECONDS + 20))
until [[ $(rcli ping 2>/dev/null) == PONG ]]; do
	if ! kill -0 "$REDIS_PID" 2>/dev/null; then
		tail -n 20 "$TMP/redis.log" >&2 || true
		die "redis-server exited before answering on 127.0.0.1:$REDIS_PORT"
	fi
	((SECONDS < deadline)) || die "redis-server did not answer PING on 127.0.0.1:$REDIS_PORT within 20 s"
	sleep 0.2
done

# used_memory: the private server's INFO memory used_memory, in bytes.
used_memory() {
	local v
	v=$(rcli info memory | tr -d '\r' | sed -n 's/^used_memory://p')
	[[ $v =~ ^[0-9]+$ ]] || die "could not read used_memory from redis-server on 127.0.0.1:$REDIS_PORT"
	printf '%s' "$v"
}
MEM_EMPTY=$(used_memory)

say "fresh databases ${DBS[*]} on the local MariaDB"
sql=""
for db in "${DBS[@]}"; do
	sql+="DROP DATABASE IF EXISTS \`$db\`;"
	sql+="CREATE DATABASE \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"
	for host in 127.0.0.1 localhost; do
		sql+="GRANT ALL PRIVILEGES ON \`$db\`.* TO 'quota'@'$host';"
	done
done
DBS_CREATED=1
root_sql "$sql" || die "could not create ${DBS[*]} as MariaDB root (mysql -uroot); make services sets up user quota"

SHARDS="quota:quota@tcp(127.0.0.1:$MYSQL_PORT)/${DBS[0]},quota:quota@tcp(127.0.0.1:$MYSQL_PORT)/${DBS[1]}"
quotad_env=(
	QUOTA_LISTEN="127.0.0.1:$LISTEN_PORT"
	QUOTA_GRPC_LISTEN=off
	QUOTA_REDIS_ADDRS="127.0.0.1:$REDIS_PORT"
	QUOTA_REDIS_DB=0
	QUOTA_REDIS_PASSWORD=
	QUOTA_CHECK_TOKEN=
	QUOTA_MYSQL_SHARDS="$SHARDS"
	QUOTA_RULES=deploy/rules.yaml
	QUOTA_ADMIN_TOKEN="$ADMIN_TOKEN"
	QUOTA_TIERING=on
	QUOTA_ANALYTICS=off
	QUOTA_COLD_THRESHOLD="$COLD_THRESHOLD"
	# The default rules are hourly, whose cells the cycle leaves hot by
	# default (their keys expire within the hour); this run measures what
	# moving them saves, so every window is tracked.
	QUOTA_MIGRATE_MIN_WINDOW=0
)
env "${quotad_env[@]}" "$QUOTAD_BIN" migrate-schema >"$TMP/schema.log" 2>&1 || {
	cat "$TMP/schema.log" >&2
	die "quotad migrate-schema failed on ${DBS[*]}"
}

say "quotad on $BASE_URL (QUOTA_TIERING=on QUOTA_ANALYTICS=off QUOTA_COLD_THRESHOLD=$COLD_THRESHOLD QUOTA_MIGRATE_MIN_WINDOW=0)"
env "${quotad_env[@]}" "$QUOTAD_BIN" serve >"$QUOTAD_LOG" 2>&1 &
QUOTAD_PID=$!

show_log() {
	echo "---- quotad log ($QUOTAD_LOG), last lines ----" >&2
	tail -n 40 "$QUOTAD_LOG" >&2 || true
	echo "---- end of quotad log ----" >&2
}
quotad_alive() {
	kill -0 "$QUOTAD_PID" 2>/dev/null && return 0
	local rc=0
	wait "$QUOTAD_PID" || rc=$?
	QUOTAD_PID=""
	show_log
	die "quotad exited (status $rc) $1"
}

deadline=$((SECONDS + READY_TIMEOUT))
until [[ $(curl -s -o /dev/null --max-time 2 -w '%{http_code}' "$BASE_URL/readyz" || true) == 200 ]]; do
	quotad_alive "before $BASE_URL/readyz answered 200"
	if ((SECONDS >= deadline)); then
		show_log
		die "$BASE_URL/readyz did not answer 200 within ${READY_TIMEOUT}s"
	fi
	sleep 0.2
done

# ---------------------------------------------------------------- phases

if [[ -n $MYSQL_NICE ]]; then
	MYSQL_RENICED=1
	renice_mysql "$MYSQL_NICE"
	[[ $(ps -o ni= -p "$MYSQL_PID" | tr -d ' ') == "$MYSQL_NICE" ]] || die "could not renice the database server (pid $MYSQL_PID) to $MYSQL_NICE"
	say "database server (pid $MYSQL_PID) at nice $MYSQL_NICE for the run (was $MYSQL_NICE_WAS)"
fi

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(loadavg)
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
declare -A PHASE_TIME

# phase NAME DURATION: one quotabench run, same seed every time.
phase() {
	local name=$1 d=$2 t0
	t0=$(date +%H:%M:%S)
	say "phase $name: $d at $RATE req/s over $N identities"
	# In the background so that a signal to this script is acted on at once
	# (bash runs traps only between foreground commands); cleanup stops it.
	"$QUOTABENCH_BIN" -url "$BASE_URL" -progress=false -identities "$N" -dist zipf -zipf-s 1.1 \
		-rate "$RATE" -d "$d" -json "$OUT_DIR/$name.json" >"$OUT_DIR/$name.txt" 2>&1 &
	BENCH_PID=$!
	local prof=""
	if [[ -n ${QUOTA_PPROF_LISTEN:-} ]]; then
		# A CPU profile of quotad over the phase's middle (ZIPF_PROFILE_SECONDS
		# from 10 s in), for reading "after" against "again".
		(sleep 10 && curl -s -o "$OUT_DIR/$name.cpu.pprof" \
			"http://$QUOTA_PPROF_LISTEN/debug/pprof/profile?seconds=$PROFILE_SECONDS") &
		prof=$!
	fi
	local rc=0
	wait "$BENCH_PID" || rc=$?
	[[ -z $prof ]] || wait "$prof" || say "phase $name: no CPU profile"
	BENCH_PID=""
	((rc == 0)) || die "quotabench failed in phase $name (exit status $rc; see $OUT_DIR/$name.txt)"
	PHASE_TIME[$name]="$t0–$(date +%H:%M:%S)"
	quotad_alive "during phase $name"
}

ctl() { "$QUOTACTL_BIN" --url "$BASE_URL" --token "$ADMIN_TOKEN" "$@"; }

phase fill "$FILL"
phase before "$BEFORE"
PHASES="fill before"
if [[ $AGAIN != 0 ]]; then
	phase again "$AGAIN"
	PHASES+=" again"
fi
PHASES+=" after settled"

MEM_BEFORE=$(used_memory)
ctl tiers >"$OUT_DIR/tiers-before.txt" || die "quotactl tiers failed"
say "quotactl migrate"
MIGRATE_RC=0
MIGRATE_T0=$(date +%H:%M:%S)
ctl migrate >"$OUT_DIR/migrate.txt" 2>&1 || MIGRATE_RC=$?
MIGRATE_TIME="$MIGRATE_T0–$(date +%H:%M:%S)"
LOAD_CYCLE=$(loadavg)
# Cells may still be moving (a cycle cut short, on-call moves): wait up to 60 s.
deadline=$((SECONDS + 60))
while :; do
	ctl tiers >"$OUT_DIR/tiers-after.txt" || die "quotactl tiers failed after the cycle"
	grep -q '^moving now' "$OUT_DIR/tiers-after.txt" || break
	((SECONDS < deadline)) || break
	sleep 1
done
MEM_AFTER=$(used_memory)
quotad_alive "during the migration cycle"

phase after "$AFTER"
phase settled "$SETTLED"
LOAD_END=$(loadavg)

# ---------------------------------------------------------------- summary

# json_rows FILE prints "R requests rps errors p50 p99" and one
# "T tier requests share% p50 p99" per tier, hot first (share of the
# checks the tally classed, as quotabench prints it).
json_rows() {
	if [[ $JSON_TOOL == jq ]]; then
		jq -r '
			"R \(.requests) \(.rps) \(.errors) \(.p50_ms) \(.p99_ms)",
			((.tiers // {}) as $t | ([$t[].requests] | add // 0) as $n
			 | ("hot", "warm", "cold") as $k | select($t[$k] != null)
			 | "T \($k) \($t[$k].requests) \(100 * $t[$k].requests / $n) \($t[$k].p50_ms) \($t[$k].p99_ms)")' "$1"
	else
		python3 - "$1" <<-'EOF'
			import json, sys
			r = json.load(open(sys.argv[1]))
			print("R", r["requests"], r["rps"], r["errors"], r["p50_ms"], r["p99_ms"])
			t = r.get("tiers") or {}
			n = sum(v["requests"] for v in t.values())
			for k in ("hot", "warm", "cold"):
			    if k in t:
			        print("T", k, t[k]["requests"], 100 * t[k]["requests"] / n, t[k]["p50_ms"], t[k]["p99_ms"])
		EOF
	fi
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
if [[ $commit != '?' ]] && ! git diff --quiet HEAD -- 2>/dev/null; then
	commit+=" (work tree modified)"
fi
# What the caller's environment gave quotad (secrets and what the script sets left out).
passed=$(env | grep -E '^(QUOTA_|GOGC=|GOMEMLIMIT=|GOMAXPROCS=)' |
	grep -v -E '^QUOTA_(LISTEN|REDIS_ADDRS|REDIS_DB|REDIS_PASSWORD|MYSQL_SHARDS|RULES|ADMIN_TOKEN|CHECK_TOKEN|TOKEN|URL|TIERING|ANALYTICS|COLD_THRESHOLD)=' |
	sort | tr '\n' ' ' || true)

{
	echo "zipf cycle benchmark, $STARTED, $(nproc 2>/dev/null || echo '?') cores, commit $commit"
	echo "quotabench -identities $N -dist zipf -zipf-s 1.1 -rate $RATE; fill $FILL, before $BEFORE, again $AGAIN, after $AFTER, settled $SETTLED"
	echo "quotad: QUOTA_TIERING=on QUOTA_ANALYTICS=off QUOTA_COLD_THRESHOLD=$COLD_THRESHOLD QUOTA_MIGRATE_MIN_WINDOW=0; from the environment: ${passed:-nothing}"
	[[ -z $MYSQL_NICE ]] || echo "database server at nice $MYSQL_NICE during the run (ZIPF_MYSQL_NICE; it was $MYSQL_NICE_WAS)"
	echo "load average: $LOAD_START at the start, $LOAD_CYCLE after the cycle, $LOAD_END at the end"
	echo
	printf '%-8s %-17s %9s %9s %7s %9s  %-5s %18s %9s %9s\n' \
		phase time requests 'req/s' errors 'p99 ms' tier 'share' 'p50 ms' 'p99 ms'
	for name in $PHASES; do
		json_rows "$OUT_DIR/$name.json" | awk -v name="$name" -v time="${PHASE_TIME[$name]}" '
			$1 == "R" { req = $2; rps = $3; err = $4; p99 = $6; next }
			$1 == "T" {
				if (!shown) { printf "%-8s %-17s %9d %9.1f %7d %9.3f  ", name, time, req, rps, err, p99; shown = 1 }
				else printf "%-8s %-17s %9s %9s %7s %9s  ", "", "", "", "", "", ""
				printf "%-5s %9d (%6.2f%%) %9.3f %9.3f\n", $2, $3, $4, $5, $6
			}
			END { if (!shown) printf "%-8s %-17s %9d %9.1f %7d %9.3f  (no tier tally)\n", name, time, req, rps, err, p99 }'
	done
	echo
	echo "quotactl migrate ($MIGRATE_TIME, exit status $MIGRATE_RC):"
	sed 's/^/  /' "$OUT_DIR/migrate.txt"
	echo "quotactl tiers before the cycle:"
	sed 's/^/  /' "$OUT_DIR/tiers-before.txt"
	echo "quotactl tiers after the cycle:"
	sed 's/^/  /' "$OUT_DIR/tiers-after.txt"
	awk -v e="$MEM_EMPTY" -v b="$MEM_BEFORE" -v a="$MEM_AFTER" -v n="$N" 'BEGIN {
		printf "Redis used_memory: empty server %d B; before the cycle %d B, after %d B\n", e, b, a
		printf "Redis bytes per identity (used_memory / %d): before %.2f, after %.2f (net of the empty server: %.2f, %.2f)\n", n, b / n, a / n, (b - e) / n, (a - e) / n
	}'
} | tee "$OUT_DIR/summary.txt"

say "raw JSONs and summary.txt in $OUT_DIR"
((MIGRATE_RC == 0)) || die "quotactl migrate failed (exit status $MIGRATE_RC): see $OUT_DIR/migrate.txt"

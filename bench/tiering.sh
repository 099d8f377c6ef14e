#!/usr/bin/env bash
# bench/tiering.sh — what tiering costs the check path (make bench-tiering):
# quotad with QUOTA_TIERING=off against on, the same keys, alternated in
# one run (bench/ab.sh, AB_ORDER=alternate: ABBA rounds), for three
# loads: make bench's uniform keys, Zipf-skewed keys, and POST
# /v1/check/batch of 500 checks of (nearly always) new identities. Both run
# with QUOTA_ANALYTICS=off, so that MariaDB's statements are tiering's own;
# each run prints them per 1,000 checks (AB_MYSQL=1).
#
# Then, per load, the on/off ratio of req/s and of p99 in each round and
# their medians. Targets (issue 30): req/s on/off >= 0.9 and p99 on <=
# 1.25x off for both key spreads; batch fill on/off >= 0.9.
#
# Knobs: ROUNDS (default 3), D (run length, default 20s), TIERING_OUT
# (default bench-out/tiering). ~8 minutes at the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${TIERING_OUT:-bench-out/tiering}
mkdir -p "$OUT"
export ROUNDS=${ROUNDS:-3} D=${D:-20s} AB_ORDER=alternate AB_MYSQL=1
export AB_VARIANTS="QUOTA_TIERING=off QUOTA_ANALYTICS=off;QUOTA_TIERING=on QUOTA_ANALYTICS=off"
uniform="-apps 1000 -users 100000 -ifaces 50 -ips 100000"
declare -A loads=(
	[uniform]="$uniform"
	[skewed]="$uniform -dist zipf"
	[batch500]="$uniform -batch 500"
)
if [[ ${1:-} != --summary ]]; then # --summary: only summarise the logs of a run
	for name in uniform skewed batch500; do
		echo "== $name: ${loads[$name]}"
		AB_KEYS=${loads[$name]} AB_OUT="$OUT/$name" bash bench/ab.sh | tee "$OUT/$name.log"
	done
fi

# summary: per load, per round, on/off req/s and p99; then the medians.
summary() {
	awk '
	function field(name,   i) { for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2); return "" }
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	/ round [0-9]+ \[/ {
		match($0, / round [0-9]+ /); r = substr($0, RSTART + 7, RLENGTH - 8)
		on = index($0, "QUOTA_TIERING=on") > 0
		rps = ""; p99 = ""
		for (i = 1; i < NF; i++) {
			if ($i == "requests") { n = $(i+1) }
			if ($i ~ /^\([0-9.]+$/ && $(i+1) == "req/s)") rps = substr($i, 2)
			if ($i == "p99") p99 = $(i+1)
		}
		sub(/ms$/, "", p99)
		R[r, on] = rps; P[r, on] = p99 + 0; S[r, on] = field("mysql_stmts_per_1000"); W[r, on] = field("mysql_rows_written_per_1000")
		if (r > rounds) rounds = r
	}
	END {
		for (r = 1; r <= rounds; r++) {
			rr[r] = (R[r, 0] > 0 ? R[r, 1] / R[r, 0] : 0); pr[r] = (P[r, 0] > 0 ? P[r, 1] / P[r, 0] : 0)
			printf "  round %d: off %s req/s p99 %s ms (mysql %s stmts, %s rows per 1000) | on %s req/s p99 %s ms (mysql %s stmts, %s rows per 1000) | on/off req/s %.3f p99 %.2f\n",
				r, R[r, 0], P[r, 0], S[r, 0], W[r, 0], R[r, 1], P[r, 1], S[r, 1], W[r, 1], rr[r], pr[r]
		}
		printf "  median on/off: req/s %.3f, p99 %.2f\n", median(rr, rounds), median(pr, rounds)
	}' "$1"
}
{
	echo "bench-tiering $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), ROUNDS=$ROUNDS D=$D"
	for name in uniform skewed batch500; do
		echo "$name (${loads[$name]}):"
		summary "$OUT/$name.log"
	done
} | tee "$OUT/summary.txt"

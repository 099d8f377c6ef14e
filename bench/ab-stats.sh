#!/usr/bin/env bash
# bench/ab-stats.sh — the statistics of bench/ab.sh's output:
# for each round, every variant's req/s against the baseline variant's in
# the same round (a paired change, in per cent), and the change in µs of
# CPU per check of the machine, quotad, Redis and MariaDB; then, per
# variant, the mean, median and standard deviation of the round changes
# and the 95 % confidence interval of the mean change (Student's t, n−1
# degrees of freedom): what a claim like "within 5 %" must be read against.
# With AB_WINDOW the window's figures are used (the steady state), else
# the whole run's req/s and CPU per check (no per-server split then). A
# variant's round is marked R when a rollup ran during its window, finished
# or not (ab.sh's rollups field; the cron job at every tenth minute:
# a window that holds one pays for it).
#
# bench/interleave.sh prints its ABBA blocks in the same format
# (a block as a round), so this reads its logs too.
#
# Usage: bash bench/ab-stats.sh LOG... (several logs pool their
# rounds; a round is keyed by log and number). AB_BASE names the baseline
# variant as ab.sh printed it in brackets (default
# "QUOTA_ANALYTICS=off").
set -euo pipefail
(($# > 0)) || { echo "usage: $0 bench-ab-log..." >&2; exit 2; }
awk -v base="${AB_BASE:-QUOTA_ANALYTICS=off}" '
function field(name,   i) { # value of name=value on the current line, or ""
	for (i = 1; i <= NF; i++) if (index($i, name "=") == 1) return substr($i, length(name) + 2)
	return ""
}
function tq(df) { # Student t, 0.975 quantile
	if (df < 1) return 0
	if (df <= 30) return T[df]
	return df <= 40 ? 2.021 : df <= 60 ? 2.000 : 1.980
}
BEGIN {
	split("12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042", T, " ")
}
/ round [0-9]+ \[/ {
	match($0, / round [0-9]+ \[[^]]*\]/)
	s = substr($0, RSTART + 7, RLENGTH - 7)
	r = FILENAME ":" substr(s, 1, index(s, " ") - 1)
	v = substr(s, index(s, "[") + 1); v = substr(v, 1, length(v) - 1)
	ro = field("rollups"); held = 0
	w = index($0, "| window ")
	if (w && ro != "" && ro != "none") { # did a rollup fall in the window?
		match($0, /window [0-9]+-[0-9]+s/); split(substr($0, RSTART + 7, RLENGTH - 8), ww, "-")
		nro = split(ro, at, ",")
		for (i = 1; i <= nro; i++) { # "start-ends" (or an older "ends": its end only)
			sub(/s!?$/, "", at[i])
			p = index(substr(at[i], 2), "-") # the dash after the start (which may be negative)
			s0 = p ? substr(at[i], 1, p) : at[i]; s1 = p ? substr(at[i], p + 2) : at[i]
			if (s1 + 0 >= ww[1] + 0 && s0 + 0 < ww[2] + 0) held = 1
		}
	}
	if (w) {
		$0 = substr($0, w) # the window figures only
		rps = field("req_per_s"); mach = field("machine_us_per_check")
		q = field("quotad_us"); rd = field("redis_us"); my = field("mysql_us")
	} else {
		match($0, /\(([0-9.]+) req\/s\)/); rps = substr($0, RSTART + 1, RLENGTH - 8)
		mach = field("machine_us_per_check"); q = field("quotad_cpu_us_per_check"); rd = ""; my = ""
	}
	key = r SUBSEP v
	HELD[key] = held; RPS[key] = rps; MACH[key] = mach; Q[key] = q; RD[key] = rd; MY[key] = my
	if (!(r in seenRound)) { seenRound[r] = 1; rounds[++nr] = r }
	if (!(v in seenVar)) { seenVar[v] = 1; vars[++nv] = v }
}
END {
	if (nr == 0) { print "no ab.sh runs found" > "/dev/stderr"; exit 1 }
	if (!(base in seenVar)) { print "baseline variant [" base "] not found (set AB_BASE)" > "/dev/stderr"; exit 1 }
	printf "%-28s %-12s", "round", "base req/s"
	for (j = 1; j <= nv; j++) if (vars[j] != base) printf "  %-40s", "[" vars[j] "] req/s, change; d machine/quotad/redis/mysql us"
	printf "\n"
	for (i = 1; i <= nr; i++) {
		r = rounds[i]; b = r SUBSEP base
		if (!(b in RPS)) continue
		printf "%-28s %-12s", r, RPS[b]
		for (j = 1; j <= nv; j++) {
			v = vars[j]; if (v == base) continue
			k = r SUBSEP v
			if (!(k in RPS)) { printf "  %-40s", "-"; continue }
			c = (RPS[k] / RPS[b] - 1) * 100
			dm = MACH[k] - MACH[b]; n[v]++; C[v, n[v]] = c; DM[v, n[v]] = dm
			sq[v] += Q[k] - Q[b]; sr[v] += RD[k] - RD[b]; sm[v] += MY[k] - MY[b]
			printf "  %-40s", sprintf("%s, %+.1f %%; %+.1f/%+.1f/%+.1f/%+.1f%s", RPS[k], c, dm, Q[k] - Q[b], RD[k] - RD[b], MY[k] - MY[b], HELD[k] ? " R" : "")
			if (HELD[k]) nheld[v]++
		}
		printf "\n"
	}
	for (j = 1; j <= nv; j++) {
		v = vars[j]; m = n[v]; if (v == base || m == 0) continue
		mean = 0; dmean = 0
		for (i = 1; i <= m; i++) { mean += C[v, i]; dmean += DM[v, i]; x[i] = C[v, i] }
		mean /= m; dmean /= m
		ss = 0; dss = 0
		for (i = 1; i <= m; i++) { ss += (C[v, i] - mean) ^ 2; dss += (DM[v, i] - dmean) ^ 2 }
		sd = m > 1 ? sqrt(ss / (m - 1)) : 0; dsd = m > 1 ? sqrt(dss / (m - 1)) : 0
		for (i = 2; i <= m; i++) { t = x[i]; for (l = i - 1; l >= 1 && x[l] > t; l--) x[l + 1] = x[l]; x[l + 1] = t }
		med = m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
		h = tq(m - 1) * sd / sqrt(m); dh = tq(m - 1) * dsd / sqrt(m)
		printf "\n[%s] against [%s], %d rounds (%d with a rollup in the window, marked R):\n", v, base, m, nheld[v]
		printf "  req/s change: mean %+.1f %%, median %+.1f %%, sd %.1f points, 95 %% interval of the mean %+.1f to %+.1f %%\n", mean, med, sd, mean - h, mean + h
		printf "  machine CPU per check: mean %+.1f us (95 %% interval %+.1f to %+.1f); quotad %+.1f, Redis %+.1f, MariaDB %+.1f us\n", dmean, dmean - dh, dmean + dh, sq[v] / m, sr[v] / m, sm[v] / m
	}
}' "$@"

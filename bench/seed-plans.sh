#!/usr/bin/env bash
# bench/seed-plans.sh — bench/ab.sh's AB_BEFORE for make bench-plans: when
# the variant's QUOTA_RULES is bench/rules-plans.yaml, put apps app-0 …
# app-9999 on its three plans and the default (round robin) and override
# app_ip_hourly for 1,000 of them, in the appplans hash of the variant's
# QUOTA_REDIS_KEY_PREFIX and QUOTA_REDIS_DB. Otherwise it does nothing.
set -euo pipefail
[[ ${QUOTA_RULES:-} == bench/rules-plans.yaml ]] || exit 0
key="${QUOTA_REDIS_KEY_PREFIX:?}appplans"
cli=(redis-cli -h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}" -n "${QUOTA_REDIS_DB:-0}")
"${cli[@]}" DEL "$key" >/dev/null
awk -v key="$key" -v q="'" 'BEGIN {
	split("default pro partner enterprise", plan, " ")
	for (i = 0; i < 10000; i++) {
		p = plan[i % 4 + 1]
		if (p != "default") printf "HSET %s p:app-%d %s\n", key, i, p
		# redis-cli reads a single-quoted argument as it is.
		if (i % 10 == 0) printf "HSET %s o:app_ip_hourly:app-%d %s{\"limit\":%d}%s\n", key, i, q, 20000 + i, q
	}
	printf "HINCRBY %s seq 1\n", key
}' | "${cli[@]}" >/dev/null
echo "seed-plans: $("${cli[@]}" HLEN "$key") fields in $key" >&2

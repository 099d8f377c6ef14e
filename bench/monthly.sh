#!/usr/bin/env bash
# bench/monthly.sh — make bench-monthly: a monthly quota over N identities
# (default 1,000,000, over 97 apps), each calling once through
# POST /v1/check/batch (500 a batch), then one migration cycle (POST
# /v1/admin/migrate). Prints Redis bytes per identity after the calls and
# after the cycle (INFO used_memory of a private redis-server, slope over
# the identities), the cycle's cells moved per second, and the usage of a
# sample (GET /v1/apps/{app}/usage), each of which must show 1 used and
# limit - 1 left.
#
# The cycle runs minutes after the calls, where the daily one runs hours
# after them: a cell called once is averaged over the hours since its
# call, so with the default QUOTA_COLD_THRESHOLD (1 call an hour) it goes
# cold from its second hour on. The run sets QUOTA_COLD_THRESHOLD=2 to see
# what the daily cycle sees of identities called at least two hours before.
#
# Knobs: N (identities), APPS (97), PARALLEL (curl processes, 4).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}; APPS=${APPS:-97}; PARALLEL=${PARALLEL:-4}
PORT=${BENCH_REDIS_PORT:-16399}; LISTEN=${BENCH_LISTEN:-127.0.0.1:18095}
TOKEN=bench-monthly-admin-token-0123456789
DBS=(quota_bm_0 quota_bm_1)
work=$(mktemp -d)
cleanup() {
	[[ -n ${QP:-} ]] && kill "$QP" 2>/dev/null && wait "$QP" 2>/dev/null
	[[ -n ${RP:-} ]] && kill "$RP" 2>/dev/null && wait "$RP" 2>/dev/null
	for d in "${DBS[@]}"; do mysql -uroot -e "DROP DATABASE IF EXISTS $d" || true; done
	rm -rf "$work"
}
trap cleanup EXIT
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
	--hash-max-listpack-entries 128 --hash-max-listpack-value 64 --logfile "$work/redis.log" &
RP=$!
until redis-cli -p "$PORT" PING >/dev/null 2>&1; do sleep 0.1; done
for d in "${DBS[@]}"; do mysql -uroot -e "DROP DATABASE IF EXISTS $d; CREATE DATABASE $d CHARACTER SET utf8mb4"; done
shards=$(printf 'quota:quota@tcp(127.0.0.1:3306)/%s,' "${DBS[@]}"); shards=${shards%,}
env QUOTA_REDIS_ADDRS=127.0.0.1:$PORT QUOTA_MYSQL_SHARDS="$shards" QUOTA_LISTEN=$LISTEN QUOTA_GRPC_LISTEN=off \
	QUOTA_RULES=bench/rules-monthly.yaml QUOTA_RULES_STORE=file QUOTA_ADMIN_TOKEN=$TOKEN QUOTA_ANALYTICS=off \
	QUOTA_SCHEMA_ON_START=apply QUOTA_COLD_THRESHOLD=2 QUOTA_TIMEZONE=Asia/Shanghai \
	QUOTA_FAIL_MODE=closed QUOTA_REDIS_TIMEOUT=5s \
	bin/quotad serve >"$work/quotad.log" 2>&1 &
QP=$!
until curl -sf "$LISTEN/readyz" >/dev/null; do kill -0 "$QP" || { cat "$work/quotad.log"; exit 1; }; sleep 0.2; done
mem() { redis-cli -p "$PORT" INFO memory | awk -F: '/^used_memory:/ {print $2+0}'; }
m0=$(mem)
# One batch file per 500 identities: user u<i> of app a<i % APPS>.
awk -v n="$N" -v apps="$APPS" -v dir="$work" 'BEGIN {
	for (b = 0; b * 500 < n; b++) {
		f = sprintf("%s/b%06d.json", dir, b); printf "{\"checks\":[" > f
		for (i = b * 500; i < n && i < (b + 1) * 500; i++) printf "%s{\"app_id\":\"a%d\",\"user_id\":\"u%d\"}", (i > b * 500 ? "," : ""), i % apps, i >> f
		printf "]}" >> f; close(f)
	}
}'
t0=$(date +%s.%N)
# Fail closed, with a Redis timeout that a loaded machine does not reach:
# a batch is then counted whole or refused whole (never retried: a refused
# batch might still have been counted), and any refusal fails the run.
failed=$(ls "$work"/b*.json | xargs -P "$PARALLEL" -I{} sh -c 'curl -sf -o /dev/null -H "Content-Type: application/json" --data-binary @{} "$0/v1/check/batch" || echo F' "$LISTEN" | wc -l)
t1=$(date +%s.%N)
((failed == 0)) || { echo "$failed batches were refused: the identities are not all counted" >&2; exit 1; }
m1=$(mem)
c0=$(date +%s.%N)
cycle=$(curl -sf -X POST -H "Authorization: Bearer $TOKEN" "$LISTEN/v1/admin/migrate")
c1=$(date +%s.%N)
m2=$(mem)
echo "identities: $N over $APPS apps; calls took $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s"
echo "cycle: $cycle"
awk -v m0="$m0" -v m1="$m1" -v m2="$m2" -v n="$N" 'BEGIN {
	printf "redis bytes per identity: after the calls %.2f, after the cycle %.2f\n", (m1 - m0) / n, (m2 - m0) / n }'
moved=$(jq '[(.moved // {})[]] | add // 0' <<<"$cycle")
awk -v m="$moved" -v a="$c0" -v b="$c1" -v n="$N" 'BEGIN { printf "cycle: %d of %d cells moved in %.1f s, %.0f a second\n", m, n, b - a, m / (b - a) }'
bad=0; declare -A tiers=()
for i in $(shuf -i 0-$((N - 1)) -n 200); do
	r=$(curl -s -H "Authorization: Bearer $TOKEN" "$LISTEN/v1/apps/a$((i % APPS))/usage?user_id=u$i")
	[[ $(jq -r '"\(.limits[0].used) \(.limits[0].remaining)"' <<<"$r") == "1 999" ]] || { bad=$((bad + 1)); echo "sample u$i: $r"; }
	tiers[$(jq -r '.limits[0].tier' <<<"$r")]+=x
done
echo "usage of 200 sampled identities (counting nothing): $((200 - bad)) show 1 used, limit - 1 (999) left; tiers: $(for t in "${!tiers[@]}"; do printf '%s=%d ' "$t" "${#tiers[$t]}"; done)"
((bad == 0))

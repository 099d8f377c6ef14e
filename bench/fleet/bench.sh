#!/usr/bin/env bash
# bench/fleet/bench.sh — make bench-fleet: checks/s and p99 through the
# fleet's nginx with 1 and with 3 quotad instances on the Redis Cluster
# (bench/fleet/fleet.sh). On a machine of few cores every instance, nginx,
# the six redis-server and the load generator share them: this shows what
# the balancer and the extra instances cost, not how the fleet scales.
#
# Environment: BENCH_DURATION (20s), BENCH_CONNECTIONS (64), BENCH_OUT
# (bench-out/fleet); FLEET_DIR as fleet.sh. Starts the fleet when none runs
# and stops it afterwards only if it started it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FLEET=$ROOT/bench/fleet/fleet.sh
FLEET_DIR=${FLEET_DIR:-/tmp/quota-fleet}
DURATION=${BENCH_DURATION:-20s}
CONNECTIONS=${BENCH_CONNECTIONS:-64}
OUT=${BENCH_OUT:-$ROOT/bench-out/fleet}
mkdir -p "$OUT"
started=
if [[ ! -f $FLEET_DIR/fleet.env ]]; then
	bash "$FLEET" up
	started=1
fi
trap '[[ -n $started ]] && bash "$FLEET" down' EXIT
summary="$OUT/summary.txt"
: >"$summary"
for n in 1 3; do
	bash "$FLEET" lb "$n"
	echo "bench-fleet: $n quotad behind nginx, $DURATION, $CONNECTIONS connections"
	"$ROOT/bin/quotabench" -url http://127.0.0.1:18080 -d "$DURATION" -c "$CONNECTIONS" -progress=false \
		-json "$OUT/quotad-$n.json" | tee "$OUT/quotad-$n.txt"
	python3 - "$OUT/quotad-$n.json" "$n" >>"$summary" <<-'PY'
		import json, sys
		j = json.load(open(sys.argv[1]))
		print(f"{sys.argv[2]} quotad: {j['checks_per_sec']:.0f} checks/s, p50 {j['p50_ms']:.2f} ms, p99 {j['p99_ms']:.2f} ms, errors {j['errors']}, unenforced {j['unenforced']}")
	PY
done
bash "$FLEET" lb 3
echo "== $summary"
cat "$summary"

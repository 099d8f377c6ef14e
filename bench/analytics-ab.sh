#!/usr/bin/env bash
# bench/analytics-ab.sh — what analytics costs the check path: quotad
# with QUOTA_ANALYTICS=off, then on, ROUNDS times interleaved, through
# bench/ab.sh (see it for the output and the knobs: D, ROUNDS,
# AB_KEYS, AB_RATE, AB_LISTEN).
# Usage (after make build): ROUNDS=3 D=30s bash bench/analytics-ab.sh
#   AB_KEYS="-dist zipf -identities 1000000" for a skewed load;
#   AB_RATE=4630 for the platform's stated peak as a fixed rate (latency).
AB_VARIANTS="QUOTA_ANALYTICS=off;QUOTA_ANALYTICS=on" exec bash "$(dirname "$0")/ab.sh"

#!/usr/bin/env bash
# bench/plans.sh — make bench-plans: what plans cost a check. quotad with
# deploy/rules.yaml against the same two rules with three plans, 10,000
# apps assigned and 1,000 overridden (bench/rules-plans.yaml,
# bench/seed-plans.sh), under a load over those 10,000 apps; ROUNDS rounds
# alternated ABBA through bench/ab.sh (D, ROUNDS as there).
set -euo pipefail
cd "$(dirname "$0")/.."
export AB_KEYS="${AB_KEYS:--apps 10000 -users 100000 -ifaces 50 -ips 100000}"
export AB_VARIANTS="QUOTA_RULES=deploy/rules.yaml;QUOTA_RULES=bench/rules-plans.yaml QUOTA_REDIS_KEY_PREFIX=bplans:"
export AB_BEFORE="bash bench/seed-plans.sh"
export AB_ORDER=alternate
exec bash bench/ab.sh

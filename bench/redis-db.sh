# bench/redis-db.sh — sourced by the bench scripts: quotad under
# benchmark writes to its own Redis logical database (QUOTA_REDIS_DB), so the
# millions of counters a run leaves behind never sit among the keys of the
# tests (whose clean-up SCANs the whole of database 0), and are flushed after
# the run when that database was empty before it.
#   BENCH_QUOTAD_REDIS_DB  database quotad writes to (default 14)
#   REDIS_HOST, REDIS_PORT Redis (default 127.0.0.1:6379)
BENCH_QUOTAD_REDIS_DB=${BENCH_QUOTAD_REDIS_DB:-14}
bench_db_cli() { redis-cli -h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}" -n "$BENCH_QUOTAD_REDIS_DB" "$@"; }
bench_db_size_before=$(bench_db_cli DBSIZE 2>/dev/null || echo "?")
# Said at the start: a database that was not empty is never flushed here,
# so keys left by a run that was not cleaned up grow run after run, and
# each run works on a bigger keyspace than the one before (BENCHMARKS.md,
# "One queue for both HyperLogLogs").
if [[ $bench_db_size_before =~ ^[0-9]+$ && $bench_db_size_before != 0 ]]; then
	echo "bench: Redis db $BENCH_QUOTAD_REDIS_DB already holds $bench_db_size_before keys, which this run will not flush (redis-cli -n $BENCH_QUOTAD_REDIS_DB FLUSHDB if they are a benchmark's)" >&2
fi
# bench_db_cleanup flushes the database if the run found it empty.
bench_db_cleanup() {
	if [[ $bench_db_size_before == 0 ]]; then
		bench_db_cli FLUSHDB ASYNC >/dev/null || echo "bench: could not flush Redis db $BENCH_QUOTAD_REDIS_DB" >&2
	else
		echo "bench: Redis db $BENCH_QUOTAD_REDIS_DB held $bench_db_size_before keys before the run: left as it is" >&2
	fi
}

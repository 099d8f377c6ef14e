# shellcheck shell=bash
# bench/stop-pid.sh — sourced by the bench scripts.
# stop_pid PID NAME SECONDS: SIGTERM, wait up to SECONDS for the process to
# exit (quotad flushes analytics on SIGTERM), then SIGKILL; reaps it.
stop_pid() {
	local pid=$1 name=$2 secs=$3 i
	kill -0 "$pid" 2>/dev/null || {
		wait "$pid" 2>/dev/null || true
		return 0
	}
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "$(basename "$0"): $name (pid $pid) did not stop within ${secs}s of SIGTERM; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# stop_quotad stops the quotad a script started (QUOTAD_PID) and empties its
# Redis database (redis-db.sh's bench_db_cleanup). quotad flushes analytics
# on SIGTERM and gives its final flush 30 s.
stop_quotad() {
	[[ -n ${QUOTAD_PID:-} ]] || return 0
	stop_pid "$QUOTAD_PID" quotad 30
	QUOTAD_PID=""
	bench_db_cleanup
}

# stop_quotad_on_exit: stop_quotad however the script ends.
stop_quotad_on_exit() {
	trap stop_quotad EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

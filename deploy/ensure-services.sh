#!/usr/bin/env bash
# ensure-services.sh — make sure the local Redis and MariaDB that quotad and its
# tests use are installed, running and set up. Used by `make run` and `make test`.
#
# Idempotent: services that already answer are left alone (never stopped or
# restarted); a second run changes nothing. Debian/Ubuntu (apt-get); no systemd
# needed. Installing and starting need root (sudo is used when not root).
#
#   Redis:   127.0.0.1:${REDIS_PORT:-6379}; one this script starts runs with
#            deploy/redis.conf (append-only file in /var/lib/redis).
#   MariaDB: 127.0.0.1:${MYSQL_PORT:-3306}; one this script starts runs with
#            deploy/mariadb/quota.cnf; user quota/quota (hosts localhost,
#            127.0.0.1, ::1) with ALL on databases matching `quota%`;
#            databases quota_0 and quota_1 (utf8mb4).
#
# Prints one short line per service; on failure, one clear line on stderr and
# exit status 1.
set -euo pipefail

REDIS_PORT="${REDIS_PORT:-6379}"
MYSQL_PORT="${MYSQL_PORT:-3306}"
QUOTA_DATABASES=(quota_0 quota_1)
DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() {
	echo "$*" >&2
	exit 1
}

# as_root CMD...: run CMD as root (directly, or through sudo).
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "$1: needs root (run this script as root or install sudo)"
	fi
}

# apt_install SERVICE PKG...: install packages, output kept in a log shown on failure.
apt_install() {
	local svc="$1" log
	shift
	command -v apt-get >/dev/null 2>&1 || die "$svc: not installed and apt-get is missing; install $* yourself"
	log="$(mktemp -t ensure-services.XXXXXX)"
	if ! { as_root apt-get update && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"; } >"$log" 2>&1; then
		tail -n 20 "$log" >&2
		die "$svc: apt-get install $* failed (full log: $log)"
	fi
	rm -f "$log"
}

# ---------------------------------------------------------------- Redis

redis_pong() {
	[ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = "PONG" ]
}

ensure_redis() {
	if command -v redis-cli >/dev/null 2>&1 && redis_pong; then
		echo "redis: already running on 127.0.0.1:$REDIS_PORT"
		return
	fi
	local installed=""
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		apt_install redis redis-server redis-tools
		installed="installed and "
		# Some images let the package start its own server: take it if it answers.
		if redis_pong; then
			echo "redis: installed, running on 127.0.0.1:$REDIS_PORT"
			return
		fi
	fi

	local logdir=/var/log/redis datadir=/var/lib/redis logfile files=()
	if [ "$REDIS_PORT" = 6379 ]; then
		logfile="$logdir/ci.log"
	else
		# A server on another port keeps its own log and data files.
		logfile="$logdir/ci-$REDIS_PORT.log"
		files=(--appenddirname "appendonlydir-$REDIS_PORT" --dbfilename "dump-$REDIS_PORT.rdb")
	fi
	as_root mkdir -p "$logdir" "$datadir"
	# The production settings (deploy/redis.conf), with this machine's
	# address, port, directory and log file.
	as_root redis-server "$DEPLOY_DIR/redis.conf" --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" \
		--dir "$datadir" --logfile "$logfile" "${files[@]}" \
		|| die "redis: redis-server failed to start on 127.0.0.1:$REDIS_PORT (see $logfile)"

	local deadline=$((SECONDS + 20)) last
	while ((SECONDS < deadline)); do
		if redis_pong; then
			echo "redis: ${installed}started on 127.0.0.1:$REDIS_PORT"
			return
		fi
		sleep 0.5
	done
	last="$(as_root tail -n 1 "$logfile" 2>/dev/null | sed 's/^[0-9]*:[A-Z] [^*#]*[*#] //')" || true
	die "redis: no PONG from 127.0.0.1:$REDIS_PORT after 20 s${last:+: $last} (log: $logfile)"
}

# ---------------------------------------------------------------- MariaDB

# mysql_tcp_up: something speaking the MySQL protocol answers on the TCP port.
# mysqladmin ping exits 0 when the server answers, even with "access denied",
# and 1 when nothing answers.
mysql_tcp_up() {
	timeout 5 mysqladmin --protocol=tcp -h127.0.0.1 -P"$MYSQL_PORT" --connect-timeout=2 \
		-uquota_probe ping >/dev/null 2>&1
}

# mysql_socket_up: a local server answers on its unix socket.
mysql_socket_up() {
	timeout 5 mysqladmin --protocol=socket --connect-timeout=2 -uquota_probe ping >/dev/null 2>&1
}

# mysqld_option NAME DEFAULT: value of a [mysqld] option from the config files.
mysqld_option() {
	local v=""
	if command -v my_print_defaults >/dev/null 2>&1; then
		v="$(my_print_defaults --mysqld 2>/dev/null | sed -n "s/^--$1=//p" | tail -n 1)"
	fi
	echo "${v:-$2}"
}

quota_sql() { # quota_sql SQL: run SQL as quota over TCP, batch output.
	MYSQL_PWD=quota timeout 10 mysql --protocol=tcp -h127.0.0.1 -P"$MYSQL_PORT" -uquota \
		--connect-timeout=5 --batch --skip-column-names -e "$1"
}

# quota_ready: user quota logs in over TCP and through the socket, sees both
# databases and holds the `quota%` pattern grant. Checked before asking root,
# so the common case needs no root and changes nothing.
quota_ready() {
	local grants dbs db
	grants="$(quota_sql 'SHOW GRANTS' 2>/dev/null)" || return 1
	grep -q 'ALL PRIVILEGES ON `quota%`\.\*' <<<"$grants" || return 1
	MYSQL_PWD=quota timeout 10 mysql --protocol=socket -uquota --connect-timeout=5 \
		-e 'SELECT 1' >/dev/null 2>&1 || return 1
	dbs="$(quota_sql 'SHOW DATABASES' 2>/dev/null)" || return 1
	for db in "${QUOTA_DATABASES[@]}"; do
		grep -qx "$db" <<<"$dbs" || return 1
	done
}

setup_quota() {
	local sql="" host db
	for host in localhost 127.0.0.1 ::1; do
		sql+="CREATE USER IF NOT EXISTS 'quota'@'$host' IDENTIFIED BY 'quota';"
		sql+="ALTER USER 'quota'@'$host' IDENTIFIED BY 'quota';"
		sql+="GRANT ALL PRIVILEGES ON \`quota%\`.* TO 'quota'@'$host';"
	done
	for db in "${QUOTA_DATABASES[@]}"; do
		sql+="CREATE DATABASE IF NOT EXISTS \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;"
	done
	local out
	if ! out="$(as_root mysql -uroot --batch -e "$sql" 2>&1)"; then
		echo "$out" >&2
		die "mariadb: could not set up user quota as root through the unix socket (mysql -uroot); create it yourself: user quota/quota with GRANT ALL ON \`quota%\`.*, databases ${QUOTA_DATABASES[*]}"
	fi
}

ensure_mariadb() {
	local state
	if command -v mysqladmin >/dev/null 2>&1 && mysql_tcp_up; then
		state="already running"
	else
		local installed=""
		if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ] \
			|| ! command -v mysql >/dev/null 2>&1 || ! command -v mysqladmin >/dev/null 2>&1; then
			apt_install mariadb mariadb-server mariadb-client
			installed="installed and "
		fi
		if mysql_tcp_up; then
			state="${installed}running"
		else
			# A server that answers on its socket but not on TCP must not get a
			# second mariadbd on the same datadir.
			if mysql_socket_up; then
				die "mariadb: running but not listening on 127.0.0.1:$MYSQL_PORT (check port, bind-address and skip-networking in /etc/mysql)"
			fi
			local datadir logerr
			datadir="$(mysqld_option datadir /var/lib/mysql)"
			logerr="$(mysqld_option log-error "the *.err file in $datadir")"
			as_root install -d -o mysql -g mysql /run/mysqld
			if [ ! -d "$datadir/mysql" ]; then
				as_root mariadb-install-db --user=mysql --datadir="$datadir" >/dev/null 2>&1 \
					|| die "mariadb: mariadb-install-db --user=mysql --datadir=$datadir failed"
			fi
			# The production settings (deploy/mariadb/quota.cnf) on top of the
			# system's; mariadbd reads the file as its own user.
			local cnf="$DEPLOY_DIR/mariadb/quota.cnf" args=()
			if as_root runuser -u mysql -- test -r "$cnf" 2>/dev/null; then
				args=(-- "--defaults-extra-file=$cnf")
			else
				echo "mariadb: $cnf not readable by user mysql; starting with the system's settings only" >&2
				args=(--)
			fi
			[ "$MYSQL_PORT" = 3306 ] || args+=("--port=$MYSQL_PORT")
			as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd "${args[@]}" \
				|| die "mariadb: start-stop-daemon could not start /usr/sbin/mariadbd (see $logerr)"
			local deadline=$((SECONDS + 30)) up=""
			while ((SECONDS < deadline)); do
				if mysql_tcp_up; then
					up=1
					break
				fi
				sleep 0.5
			done
			[ -n "$up" ] || die "mariadb: not answering on 127.0.0.1:$MYSQL_PORT after 30 s (see $logerr)"
			state="${installed}started"
		fi
	fi

	local users="user quota, databases ${QUOTA_DATABASES[*]}"
	if quota_ready; then
		users+=" ready"
	else
		setup_quota
		quota_sql 'SELECT 1' >/dev/null 2>&1 \
			|| die "mariadb: user quota/quota still cannot log in over TCP 127.0.0.1:$MYSQL_PORT after setup"
		users+=" set up"
	fi
	echo "mariadb: $state on 127.0.0.1:$MYSQL_PORT; $users"
}

ensure_redis
ensure_mariadb

#!/usr/bin/env bash
# bench/fleet/fleet.sh — a production-shaped quota fleet on this one machine,
# for development, make test-fleet and make bench-fleet (not something an
# operator deploys: deploy/ holds that).
#
#   fleet.sh up              Redis Cluster (3 masters + 3 replicas, 7101-7106),
#                            two mariadbd (3317, 3318; one shard each), three
#                            quotad (HTTP 18081-18083, Envoy's gRPC 18181-18183)
#                            and nginx in front (18080);
#                            prints the addresses
#   fleet.sh down            stops exactly what `up` started (PIDs in the run dir)
#   fleet.sh status          what runs, per process
#   fleet.sh start-quotad N  / stop-quotad N: one quotad (1..3) of a running fleet
#   fleet.sh lb N            nginx balances over the first N quotads (reloaded)
#   fleet.sh revive          starts again the redis-server and mariadbd that died
#                            (a killed master rejoins as a replica)
#
# Everything comes from Debian packages (redis-server, redis-tools,
# mariadb-server, nginx), installed with apt-get when missing, and from this
# module (bin/quotad, built by make fleet).
#
# Environment:
#   FLEET_DIR        run dir (default /tmp/quota-fleet): data, logs, PIDs, fleet.env
#   FLEET_QUOTADS    how many quotad to start (1..3, default 3)
#   FLEET_NODE_TIMEOUT  cluster-node-timeout in ms (default 3000: a dead master
#                    is replaced within ~5 s; Redis' default, 15000, would take ~17 s)
#   QUOTA_*          passed through to every quotad (over the fleet's own settings),
#                    e.g. QUOTA_FAIL_MODE, QUOTA_REDIS_TIMEOUT, QUOTA_TIERING
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FLEET_DIR=${FLEET_DIR:-/tmp/quota-fleet}
FLEET_QUOTADS=${FLEET_QUOTADS:-3}
NODE_TIMEOUT=${FLEET_NODE_TIMEOUT:-3000}
REDIS_PORTS=(7101 7102 7103 7104 7105 7106)
MYSQL_PORTS=(3317 3318)
QUOTAD_PORTS=(18081 18082 18083)
LB_PORT=18080
ADMIN_TOKEN=${QUOTA_ADMIN_TOKEN:-fleet-admin-token}
PIDS="$FLEET_DIR/pids"

die() {
	echo "fleet: $*" >&2
	exit 1
}

need() { # need COMMAND PACKAGE: apt-get install PACKAGE when COMMAND is missing
	command -v "$1" >/dev/null 2>&1 && return
	[[ -x /usr/sbin/$1 ]] && return
	echo "fleet: $1 missing; apt-get install $2" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null ||
		die "apt-get install $2 failed"
}

# alive NAME: the process recorded as NAME runs (and is what we started:
# its command line still names the binary recorded beside the PID).
alive() {
	local f="$PIDS/$1" pid bin
	[[ -f $f ]] || return 1
	read -r pid bin <"$f"
	[[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$bin"
}

# start NAME LOG BINARY ARGS...: start in the background, record the PID.
start() {
	local name=$1 log=$2 bin=$3
	shift 3
	if alive "$name"; then
		echo "fleet: $name already running" >&2
		return
	fi
	"$bin" "$@" >>"$log" 2>&1 </dev/null &
	echo "$! $(basename "$bin")" >"$PIDS/$name"
}

# stop NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 10).
stop() {
	local name=$1 secs=${2:-10} pid bin i
	alive "$name" || {
		rm -f "$PIDS/$name"
		return 0
	}
	read -r pid bin <"$PIDS/$name"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		alive "$name" || break
		sleep 0.1
	done
	if alive "$name"; then
		echo "fleet: $name (pid $pid) still running ${secs}s after SIGTERM; SIGKILL" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$PIDS/$name"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 10; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "$what not ready within ${secs}s"
}

redis_addrs() {
	local p out=()
	for p in "${REDIS_PORTS[@]}"; do out+=("127.0.0.1:$p"); done
	(IFS=,; echo "${out[*]}")
}

mysql_dsn() { echo "quota:quota@tcp(127.0.0.1:$1)/quota_fleet_$2?timeout=2s"; }

up_redis() {
	local p d
	for p in "${REDIS_PORTS[@]}"; do
		d="$FLEET_DIR/redis-$p"
		mkdir -p "$d"
		start "redis-$p" "$d/redis.log" "$(command -v redis-server)" \
			--port "$p" --bind 127.0.0.1 --protected-mode no --dir "$d" \
			--cluster-enabled yes --cluster-config-file nodes.conf \
			--cluster-node-timeout "$NODE_TIMEOUT" \
			--cluster-require-full-coverage no \
			--save '' --appendonly no --maxmemory-policy noeviction
	done
	for p in "${REDIS_PORTS[@]}"; do
		wait_for 20 "redis-server :$p" redis-cli -p "$p" ping
	done
	if [[ $(redis-cli -p "${REDIS_PORTS[0]}" cluster info | tr -d '\r' | grep cluster_known_nodes) != "cluster_known_nodes:6" ]]; then
		local nodes=()
		for p in "${REDIS_PORTS[@]}"; do nodes+=("127.0.0.1:$p"); done
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$FLEET_DIR/cluster-create.log" 2>&1 ||
			die "redis-cli --cluster create failed: $(tail -5 "$FLEET_DIR/cluster-create.log")"
	fi
	for p in "${REDIS_PORTS[@]}"; do
		wait_for 30 "cluster state on :$p" bash -c "redis-cli -p $p cluster info | grep -q 'cluster_state:ok'"
	done
}

up_mariadb() {
	local i p d
	for i in "${!MYSQL_PORTS[@]}"; do
		p=${MYSQL_PORTS[$i]}
		d="$FLEET_DIR/mariadb-$p"
		if [[ ! -d $d/data/mysql ]]; then
			mkdir -p "$d"
			mariadb-install-db --no-defaults --datadir="$d/data" --auth-root-authentication-method=normal \
				--skip-test-db --user="$(id -un)" >"$d/install.log" 2>&1 || die "mariadb-install-db: $(tail -5 "$d/install.log")"
		fi
		start "mariadb-$p" "$d/mariadbd.log" "$(command -v mariadbd || echo /usr/sbin/mariadbd)" \
			--no-defaults --datadir="$d/data" --port="$p" --bind-address=127.0.0.1 \
			--socket="$d/sock" --pid-file="$d/mariadbd.pid" --user="$(id -un)" \
			--innodb-buffer-pool-size=64M --skip-log-bin --skip-name-resolve
		wait_for 60 "mariadbd :$p" mariadb --no-defaults -uroot --socket="$d/sock" -e 'SELECT 1'
		mariadb --no-defaults -uroot --socket="$d/sock" <<-SQL
			CREATE USER IF NOT EXISTS 'quota'@'%' IDENTIFIED BY 'quota';
			CREATE USER IF NOT EXISTS 'quota'@'localhost' IDENTIFIED BY 'quota';
			GRANT ALL PRIVILEGES ON *.* TO 'quota'@'%';
			GRANT ALL PRIVILEGES ON *.* TO 'quota'@'localhost';
			CREATE DATABASE IF NOT EXISTS quota_fleet_$i CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
		SQL
	done
}

quotad_env() {
	local shards
	shards="$(mysql_dsn "${MYSQL_PORTS[0]}" 0),$(mysql_dsn "${MYSQL_PORTS[1]}" 1)"
	# The fleet's settings first, then every QUOTA_* of the caller (a later
	# duplicate wins in env(1)).
	printf '%s\n' "QUOTA_REDIS_ADDRS=$(redis_addrs)" "QUOTA_MYSQL_SHARDS=$shards" \
		"QUOTA_REDIS_KEY_PREFIX=fleet:" "QUOTA_ADMIN_TOKEN=$ADMIN_TOKEN" \
		"QUOTA_RULES=$FLEET_DIR/rules.yaml"
	env | grep '^QUOTA_' | grep -v '^QUOTA_LISTEN=\|^QUOTA_GRPC_LISTEN=' || true
}

start_quotad() {
	local n=$1 p=${QUOTAD_PORTS[$(($1 - 1))]} d="$FLEET_DIR/quotad-$1"
	mkdir -p "$d"
	local -a envs
	mapfile -t envs < <(quotad_env)
	# Working directory: the module root, as `make run` (relative paths in
	# QUOTA_* settings work the same).
	(cd "$ROOT" && start "quotad-$n" "$d/quotad.log" /usr/bin/env "${envs[@]}" "QUOTA_LISTEN=127.0.0.1:$p" "QUOTA_GRPC_LISTEN=127.0.0.1:$((p + 100))" "$ROOT/bin/quotad" serve)
	# env execs quotad in place: the recorded PID is quotad's.
	echo "$(cut -d' ' -f1 "$PIDS/quotad-$n") quotad" >"$PIDS/quotad-$n"
	wait_for 60 "quotad $n (:$p)" curl -fsS "http://127.0.0.1:$p/healthz"
}

up_quotads() {
	[[ -x $ROOT/bin/quotad ]] || die "bin/quotad missing (make build)"
	[[ -f $FLEET_DIR/rules.yaml ]] || cp "$ROOT/deploy/rules.yaml" "$FLEET_DIR/rules.yaml"
	local -a envs
	mapfile -t envs < <(quotad_env)
	(cd "$ROOT" && env "${envs[@]}" "$ROOT/bin/quotad" migrate-schema) >"$FLEET_DIR/schema.log" 2>&1 ||
		die "quotad migrate-schema: $(tail -5 "$FLEET_DIR/schema.log")"
	local n
	for ((n = 1; n <= FLEET_QUOTADS; n++)); do start_quotad "$n"; done
}

# nginx_conf N: nginx.conf balancing over the first N quotads.
nginx_conf() {
	local d="$FLEET_DIR/nginx" p servers=""
	mkdir -p "$d/logs" "$d/tmp"
	for p in "${QUOTAD_PORTS[@]:0:$1}"; do
		servers+="        server 127.0.0.1:$p max_fails=0;"$'\n'
	done
	cat >"$d/nginx.conf" <<-EOF
		# Written by bench/fleet/fleet.sh; a private nginx (own prefix, own port).
		daemon off;
		worker_processes 1;
		pid $d/nginx.pid;
		error_log $d/logs/error.log warn;
		events { worker_connections 4096; }
		http {
		    access_log off;
		    client_body_temp_path $d/tmp/body;
		    proxy_temp_path $d/tmp/proxy;
		    fastcgi_temp_path $d/tmp/fastcgi;
		    uwsgi_temp_path $d/tmp/uwsgi;
		    scgi_temp_path $d/tmp/scgi;
		    upstream quotad {
		$servers        keepalive 64;
		    }
		    server {
		        listen 127.0.0.1:$LB_PORT;
		        location / {
		            proxy_pass http://quotad;
		            proxy_http_version 1.1;
		            proxy_set_header Connection "";
		            proxy_set_header X-Forwarded-For \$remote_addr;
		            # A quotad that is down or restarting: the next one answers.
		            proxy_next_upstream error timeout http_502 http_503;
		            proxy_connect_timeout 1s;
		        }
		    }
		}
	EOF
}

up_nginx() {
	local d="$FLEET_DIR/nginx"
	nginx_conf "$FLEET_QUOTADS"
	start nginx "$d/logs/stderr.log" "$(command -v nginx || echo /usr/sbin/nginx)" -p "$d" -c "$d/nginx.conf"
	wait_for 20 "nginx :$LB_PORT" curl -fsS "http://127.0.0.1:$LB_PORT/healthz"
}

write_env() {
	local shards
	shards="$(mysql_dsn "${MYSQL_PORTS[0]}" 0),$(mysql_dsn "${MYSQL_PORTS[1]}" 1)"
	{
		echo "FLEET_DIR=$FLEET_DIR"
		echo "FLEET_LB=http://127.0.0.1:$LB_PORT"
		echo "FLEET_QUOTADS=$(for p in "${QUOTAD_PORTS[@]:0:$FLEET_QUOTADS}"; do printf 'http://127.0.0.1:%s,' "$p"; done | sed 's/,$//')"
		echo "FLEET_REDIS_ADDRS=$(redis_addrs)"
		echo "FLEET_MYSQL_SHARDS=$shards"
		echo "FLEET_MYSQL_SOCKETS=$FLEET_DIR/mariadb-${MYSQL_PORTS[0]}/sock,$FLEET_DIR/mariadb-${MYSQL_PORTS[1]}/sock"
		echo "FLEET_ADMIN_TOKEN=$ADMIN_TOKEN"
		echo "FLEET_NODE_TIMEOUT_MS=$NODE_TIMEOUT"
	} >"$FLEET_DIR/fleet.env"
}

cmd_up() {
	need redis-server redis-server
	need redis-cli redis-tools
	need mariadbd mariadb-server
	need nginx nginx
	need curl curl
	[[ $FLEET_QUOTADS =~ ^[1-3]$ ]] || die "FLEET_QUOTADS must be 1, 2 or 3"
	mkdir -p "$PIDS"
	up_redis
	up_mariadb
	up_quotads
	up_nginx
	write_env
	echo "fleet up (run dir $FLEET_DIR; make fleet-down stops it):"
	echo "  balancer   http://127.0.0.1:$LB_PORT   (nginx)"
	for ((n = 1; n <= FLEET_QUOTADS; n++)); do
		echo "  quotad $n   http://127.0.0.1:${QUOTAD_PORTS[$((n - 1))]}"
	done
	redis-cli -p "${REDIS_PORTS[0]}" cluster nodes | awk '{split($2,a,"@"); printf "  redis      %s %s %s\n", a[1], ($3 ~ /master/ ? "master" : "replica"), $9}'
	for p in "${MYSQL_PORTS[@]}"; do echo "  mariadb    127.0.0.1:$p"; done
	echo "  admin token: $ADMIN_TOKEN   settings: $FLEET_DIR/fleet.env"
}

cmd_down() {
	[[ -d $PIDS ]] || {
		echo "fleet: nothing recorded in $PIDS"
		return 0
	}
	local f
	stop nginx 5
	for f in "$PIDS"/quotad-*; do [[ -e $f ]] && stop "$(basename "$f")" 15; done
	for f in "$PIDS"/mariadb-*; do [[ -e $f ]] && stop "$(basename "$f")" 30; done
	for f in "$PIDS"/redis-*; do [[ -e $f ]] && stop "$(basename "$f")" 5; done
	rm -rf "$FLEET_DIR"
	echo "fleet down ($FLEET_DIR removed)"
}

cmd_status() {
	local f name
	for f in "$PIDS"/*; do
		[[ -e $f ]] || continue
		name=$(basename "$f")
		if alive "$name"; then echo "$name: running (pid $(cut -d' ' -f1 "$f"))"; else echo "$name: not running"; fi
	done
}

cmd_revive() {
	up_redis
	up_mariadb
}

case ${1:-} in
up) cmd_up ;;
revive) cmd_revive ;;
lb)
	nginx_conf "${2:?how many quotads}"
	alive nginx || die "nginx not running"
	kill -HUP "$(cut -d' ' -f1 "$PIDS/nginx")"
	sleep 1
	;;
down) cmd_down ;;
status) cmd_status ;;
start-quotad) start_quotad "${2:?quotad number}" ;;
stop-quotad) stop "quotad-${2:?quotad number}" 15 ;;
*) die "usage: fleet.sh up | down | status | revive | lb N | start-quotad N | stop-quotad N" ;;
esac

#!/usr/bin/env bash
# ensure-tool.sh TOOL... — make sure the command-line tools some tests run
# are installed: chromium (the dashboard's browser test), promtool (the
# Prometheus rules' checks), systemd-analyze (the unit file's verification),
# docker-compose (the compose file's validation; no Docker engine needed),
# nginx (the forward-auth tests; each test starts its own on a private port),
# valgrind (make bench-scripts' instruction counts).
# Idempotent: prints the path of each tool and exits 0 when it is there;
# installs the Debian package with apt-get (as root, or through sudo) when it
# is not; exits 1 with one line on stderr when it cannot be installed.
set -euo pipefail

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}

# ensure NAME PKG... : NAME on PATH, else apt-get install PKG...
ensure() {
	local name="$1" log
	shift
	# command -v prints the path when the tool is there.
	command -v "$name" 2>/dev/null && return
	command -v apt-get >/dev/null 2>&1 || { echo "$name: not installed and apt-get is missing" >&2; exit 1; }
	# Test packages run in parallel and may each want a tool on a new
	# machine: two apt-gets at once fail on APT's lock. One install at a
	# time, and a tool another one installed meanwhile is taken as it is.
	exec 9>"${TMPDIR:-/tmp}/quota-ensure-tool.lock"
	flock -w 1200 9 || { echo "$name: waited 20 minutes for another ensure-tool.sh" >&2; exit 1; }
	command -v "$name" 2>/dev/null && return
	log="$(mktemp -t ensure-tool.XXXXXX)"
	# A package that ships a service (nginx, prometheus) must not start it:
	# policy-rc.d's exit 101 tells invoke-rc.d the start is forbidden.
	local policy=/usr/sbin/policy-rc.d added="" status=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null && as_root chmod 755 "$policy" && added=1
	fi
	{ as_root apt-get update && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; } >"$log" 2>&1 || status=$?
	if [ -n "$added" ]; then
		as_root rm -f "$policy"
	fi
	if [ "$status" -ne 0 ]; then
		tail -n 5 "$log" >&2
		echo "$name: apt-get install $* failed (log: $log)" >&2
		exit 1
	fi
	rm -f "$log"
	command -v "$name" >/dev/null 2>&1 || { echo "$name: still missing after apt-get install $*" >&2; exit 1; }
	command -v "$name"
}

[ $# -gt 0 ] || { echo "usage: ensure-tool.sh chromium|promtool|systemd-analyze|docker-compose|nginx|ip|iptables|valgrind..." >&2; exit 2; }
for tool in "$@"; do
	case "$tool" in
	chromium)
		if command -v chromium-browser >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
			command -v chromium-browser
		else
			ensure chromium chromium fonts-dejavu-core
		fi
		;;
	# Debian's prometheus package holds promtool. Without systemd as PID 1
	# its post-install script does not start the server.
	promtool) ensure promtool prometheus ;;
	systemd-analyze) ensure systemd-analyze systemd ;;
	docker-compose) ensure docker-compose docker-compose ;;
	nginx) ensure nginx nginx ;;
	# make bench-scripts: Redis instructions counted by callgrind.
	valgrind) ensure valgrind valgrind ;;
	# make test-partitions: namespaces (iproute2) and DROP rules in them.
	ip) ensure ip iproute2 ;;
	iptables) ensure iptables iptables ;;
	*)
		echo "ensure-tool.sh: unknown tool $tool" >&2
		exit 2
		;;
	esac
done

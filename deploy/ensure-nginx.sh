#!/usr/bin/env bash
# ensure-nginx.sh — make sure Debian's nginx binary (with its auth_request
# module) is installed, for the forward-auth tests of `make test`. It only
# installs: the tests start their own nginx on a private port and prefix and
# stop it by its PID. The package's own service is kept from starting while
# it installs (policy-rc.d), so nothing is left listening on port 80.
#
# Idempotent; prints one short line; on failure one clear line on stderr and
# exit status 1.
set -euo pipefail

die() {
	echo "$*" >&2
	exit 1
}

as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "nginx: needs root to install (run this script as root or install sudo)"
	fi
}

nginx_bin() {
	command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; }
}

if bin="$(nginx_bin)" && [ -n "$bin" ]; then
	echo "nginx: already installed ($bin)"
	exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "nginx: not installed and apt-get is missing; install nginx yourself"
log="$(mktemp -t ensure-nginx.XXXXXX)"
policy=/usr/sbin/policy-rc.d
added_policy=""
if [ ! -e "$policy" ]; then
	# exit 101: "action forbidden" — invoke-rc.d then does not start the service.
	printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
	as_root chmod 755 "$policy"
	added_policy=1
fi
status=0
{ as_root apt-get update && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx; } >"$log" 2>&1 || status=$?
if [ -n "$added_policy" ]; then
	as_root rm -f "$policy"
fi
if [ "$status" -ne 0 ]; then
	tail -n 20 "$log" >&2
	die "nginx: apt-get install nginx failed (full log: $log)"
fi
rm -f "$log"
bin="$(nginx_bin)" || die "nginx: installed but no nginx binary found"
echo "nginx: installed ($bin)"

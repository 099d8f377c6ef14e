#!/usr/bin/env bash
# chromium-test.sh — make sure headless Chromium (Debian package `chromium`)
# is installed for the dashboard's browser test (api/dashboard_analytics_test.go).
# Idempotent: prints the path of the browser and exits 0 when it is there;
# installs it with apt-get (as root, or through sudo) when it is not; exits 1
# with one line on stderr when it cannot be installed.
set -euo pipefail

for b in chromium chromium-browser; do
	if command -v "$b" >/dev/null 2>&1; then
		command -v "$b"
		exit 0
	fi
done
command -v apt-get >/dev/null 2>&1 || { echo "chromium: not installed and apt-get is missing" >&2; exit 1; }
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}
log="$(mktemp -t chromium-install.XXXXXX)"
if ! { as_root apt-get update && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core; } >"$log" 2>&1; then
	tail -n 5 "$log" >&2
	echo "chromium: apt-get install chromium failed (log: $log)" >&2
	exit 1
fi
rm -f "$log"
command -v chromium

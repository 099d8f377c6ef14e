// Package gateways has no code: its tests run quotad behind the gateways
// that call GET /v1/auth — a real nginx (auth_request, Debian's package,
// installed by internal/testsupport/testenv/ensure-tool.sh nginx) and a reverse proxy that follows
// Traefik's documented forwardAuth semantics — end to end.
package gateways

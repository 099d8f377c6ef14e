package testenv

import (
	"os/exec"
	"testing"
)

// Unavailable fails a test that cannot run on this machine (a tool or a
// browser missing) with the message, which should say how to get what is
// missing: a test never passes by not running (make test installs what its
// tests need first).
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Fatalf(format, args...)
}

// RequireTool returns the path of a command-line tool, or ends the test with
// Unavailable when it is not installed: `make test` (test-tools) and the
// make targets that need one install it first with ensure-tool.sh.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, "%s not installed: run `bash internal/testsupport/testenv/ensure-tool.sh %s` (make test does)", name, name)
	}
	return p
}

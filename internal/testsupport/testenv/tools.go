package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run as CI runs them (CI=true, .ci/run).
func CI() bool { return os.Getenv("CI") == "true" }

// Unavailable ends a test that cannot run on this machine (a tool or a
// browser missing): under CI=true it fails, since CI must never pass a test
// by not running it; elsewhere it skips with the message, which should say
// how to get what is missing.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatal(msg + " (CI=true: a test CI cannot run fails)")
	}
	t.Skip(msg)
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

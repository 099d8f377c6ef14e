package throttled_test

import (
	"testing"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/internal/testsupport/analyticsenv"
)

// The tests run Throttled as quotad does, wired by analytics.New.

var t0 = analyticsenv.T0

// env is the shared analytics test environment.
type env struct{ *analyticsenv.Env }

func newEnv(t *testing.T, shards int, mod func(*analytics.Options)) *env {
	t.Helper()
	return &env{analyticsenv.New(t, shards, mod)}
}

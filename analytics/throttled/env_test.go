package throttled_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// The tests run Throttled as quotad does, wired by analytics.New: env is
// analytics_test's environment (analytics/analytics_test.go).

// t0 is a Monday, 10:00:30 UTC.
var t0 = time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC)

type env struct {
	t      *testing.T
	dbs    []*sql.DB
	rdb    *redis.Client
	prefix string
	clk    *clock.Fake
	reg    *prometheus.Registry
	rec    *analytics.Analytics
}

func newEnv(t *testing.T, shards int, mod func(*analytics.Options)) *env {
	t.Helper()
	dbs := testenv.MySQLShards(t, shards)
	rdb, prefix := testenv.Redis(t)
	e := &env{t: t, dbs: dbs, rdb: rdb, prefix: prefix, clk: clock.NewFake(t0)}
	e.rec = e.open(mod)
	return e
}

// open makes a new Recorder on the same databases, Redis prefix and clock
// (as a restarted quotad would).
func (e *env) open(mod func(*analytics.Options)) *analytics.Analytics {
	e.t.Helper()
	e.reg = prometheus.NewRegistry()
	o := analytics.Options{DBs: e.dbs, Redis: e.rdb, KeyPrefix: e.prefix, Clock: e.clk, Registerer: e.reg}
	if mod != nil {
		mod(&o)
	}
	rec, err := analytics.New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// Package analyticsenv is analytics wired as quotad wires it (analytics.New)
// over the tests' Redis and fresh MySQL shards, with a fake clock: the
// environment the analytics packages' tests share. For tests only.
package analyticsenv

import (
	"testing"
	"time"

	"database/sql"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// T0 is a Monday, 10:00:30 UTC: where every Env's clock starts.
var T0 = time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC)

// Env is one analytics over its own databases and Redis prefix.
type Env struct {
	T      *testing.T
	DBs    []*sql.DB
	RDB    *redis.Client
	Prefix string
	Clk    *clock.Fake
	Reg    *prometheus.Registry // of the Analytics last opened
	Rec    *analytics.Analytics
}

// New opens analytics over shards fresh databases; mod, when set, changes
// its options first.
func New(t *testing.T, shards int, mod func(*analytics.Options)) *Env {
	t.Helper()
	dbs := testenv.MySQLShards(t, shards)
	rdb, prefix := testenv.Redis(t)
	e := &Env{T: t, DBs: dbs, RDB: rdb, Prefix: prefix, Clk: clock.NewFake(T0)}
	e.Rec = e.Open(mod)
	return e
}

// Open makes a new Analytics on the same databases, Redis prefix and clock
// (as a restarted quotad would), with a registry of its own (Reg).
func (e *Env) Open(mod func(*analytics.Options)) *analytics.Analytics {
	e.T.Helper()
	e.Reg = prometheus.NewRegistry()
	o := analytics.Options{DBs: e.DBs, Redis: e.RDB, KeyPrefix: e.Prefix, Clock: e.Clk, Registerer: e.Reg}
	if mod != nil {
		mod(&o)
	}
	rec, err := analytics.New(o)
	if err != nil {
		e.T.Fatal(err)
	}
	return rec
}

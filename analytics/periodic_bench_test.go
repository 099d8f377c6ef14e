package analytics

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testenv"
)

// BenchmarkRecordAndPeriodicFlush is BenchmarkRecordAndFlush with Run's
// flushes (the minute in progress held, the interface-level users sent once
// a minute), so the adds wait in memory as they do in quotad. ns/op, B/op
// and allocs/op are per recorded call, flushes included.
func BenchmarkRecordAndPeriodicFlush(b *testing.B) {
	const flushEvery = 200_000
	dbs := testenv.MySQLShards(b, 2)
	rdb, prefix := testenv.Redis(b)
	clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC))
	r, err := New(Options{DBs: dbs, Redis: rdb, KeyPrefix: prefix, Clock: clk, HoldOpenMinute: true})
	if err != nil {
		b.Fatal(err)
	}
	load := newUniformLoad()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		app, iface, user := load.Next()
		r.Recorder.Record(app, iface, user, true)
		if (i+1)%flushEvery == 0 {
			clk.Advance(15 * time.Second)
			if err := r.Flusher.flush(ctx, false, nil, r.Flusher.periodicHold()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := r.Flusher.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

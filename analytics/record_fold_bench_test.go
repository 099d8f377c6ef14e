package analytics

import (
	"database/sql"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/benchload"
)

// BenchmarkRecordAndFold is analytics' in-memory work per call with the
// uniform keys of `make bench` (1,000 apps × 100,000 users × 50 interfaces:
// nearly every call a new row): Record, and every 200,000 calls (a 15 s
// flush at ~13,000 checks/s) the flush's fold of the live maps into pending
// rows and distinct-user adds. No server is touched; the pending rows are
// dropped after each fold, and their maps sized again, as a written flush
// does. ns/op is per call.
func BenchmarkRecordAndFold(b *testing.B) {
	const flushEvery = 200_000
	db, _ := sql.Open("mysql", "nobody:x@tcp(127.0.0.1:1)/none")
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	r, err := New(Options{DBs: []*sql.DB{db, db}, Redis: rdb, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	load := benchload.NewUniform()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		app, iface, user := load.Next()
		r.Recorder.Record(app, iface, user, true)
		if (i+1)%flushEvery == 0 {
			clk.Advance(15 * time.Second)
			r.Flusher.swapLive(b.Context(), nil)
			for _, s := range r.Flusher.shards { // as a written flush leaves them
				s.pending = s.pending.next()
			}
			r.Flusher.uniq.dropQueued(len(r.Flusher.uniq.queue))
		}
	}
}

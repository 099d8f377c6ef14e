package routing

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
)

// The cells of the tiers' tests (package tierstest); below them, copies
// of the cold store's tests' shard and commit-fault helpers and of the
// store benchmarks' (a test package cannot import another's tests).
type confCell = tierstest.Cell

var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)

// cellOnShard returns a new cell whose cold row lives on shard.
func cellOnShard(t *testing.T, s *cold.Store, shard int, limit int64) confCell {
	t.Helper()
	for range 200 {
		c := newConfCell(limit, time.Hour)
		if ref := c.Ref(); s.ShardOf(&ref) == shard {
			return c
		}
	}
	t.Fatalf("no cell found on shard %d", shard)
	return confCell{}
}

// countCommits makes faultyShards' pools count their COMMITs.
func countCommits(f *commitFaults) *atomic.Int64 {
	var n atomic.Int64
	f.set(func(int) error { n.Add(1); return nil })
	return &n
}

// countedShards returns pools on n fresh shard databases whose round trips
// (statements, and a *sql.Tx's commands) are counted in the returned
// counter.
func countedShards(t *testing.T, n int) ([]*sql.DB, *atomic.Int64) {
	t.Helper()
	var count atomic.Int64
	dbs := testenv.MySQLShards(t, n)
	for i := range dbs {
		dbs[i] = testenv.Hooked(t, dbs[i], func(string) error { count.Add(1); return nil })
	}
	return dbs, &count
}

// commitFaults is what the pools of faultyShards run before each COMMIT
// (a statement that ends with one): nil lets it through.
type commitFaults struct {
	mu sync.Mutex
	fn func(shard int) error
}

func (f *commitFaults) set(fn func(shard int) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
}

func (f *commitFaults) before(shard int, query string) error {
	if !strings.HasSuffix(query, "COMMIT") {
		return nil
	}
	f.mu.Lock()
	fn := f.fn
	f.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(shard)
}

// faultyShards returns pools on n fresh shard databases that run the
// returned commitFaults' function before each COMMIT: a test fails a
// shard's commit, as a lost connection would, or acts just before it.
func faultyShards(t *testing.T, n int) ([]*sql.DB, *commitFaults) {
	t.Helper()
	f := &commitFaults{}
	dbs := testenv.MySQLShards(t, n)
	for i := range dbs {
		dbs[i] = testenv.Hooked(t, dbs[i], func(q string) error { return f.before(i, q) })
	}
	return dbs, f
}

func tierBenchCells(n int) [][2]confCell {
	out := make([][2]confCell, n)
	for i := range out {
		ip := newConfCell(1<<40, time.Hour)
		ip.Vals = []string{ip.App, fmt.Sprintf("10.0.%d.%d", i/256, i%256)}
		ip.User = ""
		u := newConfCell(1<<40, time.Hour)
		u.App = ip.App
		u.Vals[0] = ip.App
		out[i] = [2]confCell{ip, u}
	}
	return out
}

// tierBenchRedis is a private redis-server: other tenants of the shared one
// would make the numbers meaningless.
func tierBenchRedis(b *testing.B) *redis.Client {
	p := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

var recT = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).Unix()

// Warm values as the version before the current form wrote them:
// snappy.Encode(raw), byte for byte (written by that version's
// EncodeWarmValue). Operators upgrade in place, so a bucket may hold them
// next to values of the current form until each cell is written again.
var oldWarmValues = []struct {
	name string
	val  string
	want tiers.Record
}{
	{"fresh", "\x07\x18 _\x13\x04\x01\x00\x00",
		tiers.Record{Count: 1, Last: recT, First: recT}},
	{"typical", "\x08\x1c _\x13\x04\x0c\x88\x0e\xdf",
		tiers.Record{Count: 12, Last: recT, First: recT - 32*86400, MeanInterval: 1800, Samples: 31}},
	{"moved", "\x07\x18 _\x13D\x05\x07)",
		tiers.Record{Count: 5, Last: recT, First: recT - 86400, MeanInterval: 7, Samples: 9, Moved: true}},
	{"an hour before", "\x07\x18\x10Q\x13\x04\x03\x00\x00",
		tiers.Record{Count: 3, Last: recT - 3600, First: recT - 3600}},
}

// boolInt is 1 for true, 0 for false (the scripts' flags).
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

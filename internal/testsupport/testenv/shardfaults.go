package testenv

import (
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// CountedShards returns pools on n fresh shard databases whose round trips
// (statements, and a *sql.Tx's commands) are counted in the returned
// counter.
func CountedShards(t testing.TB, n int) ([]*sql.DB, *atomic.Int64) {
	t.Helper()
	var count atomic.Int64
	dbs := MySQLShards(t, n)
	for i := range dbs {
		dbs[i] = Hooked(t, dbs[i], func(string) error { count.Add(1); return nil })
	}
	return dbs, &count
}

// CommitFaults is what the pools of FaultyShards run before each COMMIT
// (a statement that ends with one): nil lets it through.
type CommitFaults struct {
	mu sync.Mutex
	fn func(shard int) error
}

// Set makes fn run before each COMMIT (nil: none).
func (f *CommitFaults) Set(fn func(shard int) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
}

// CountCommits makes the pools count their COMMITs, in the returned counter.
func (f *CommitFaults) CountCommits() *atomic.Int64 {
	var n atomic.Int64
	f.Set(func(int) error { n.Add(1); return nil })
	return &n
}

func (f *CommitFaults) before(shard int, query string) error {
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

// FaultyShards returns pools on n fresh shard databases that run the
// returned CommitFaults' function before each COMMIT: a test fails a
// shard's commit, as a lost connection would, or acts just before it.
func FaultyShards(t testing.TB, n int) ([]*sql.DB, *CommitFaults) {
	t.Helper()
	f := &CommitFaults{}
	dbs := MySQLShards(t, n)
	for i := range dbs {
		dbs[i] = Hooked(t, dbs[i], func(q string) error { return f.before(i, q) })
	}
	return dbs, f
}

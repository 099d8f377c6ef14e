package migrate

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// Activity counts checks per fixed-window cell in process and adds them to
// cell_activity (sql/004) on Flush, one multi-row upsert per shard and 500
// rows. It holds at most MaxCells cells between flushes; calls of further
// cells are dropped (counted in Dropped) - the cell's mean is then a little
// low, never its limit. Which cells it is given is the router's choice
// (tiers.Router.CallsMinWindow: config's QUOTA_MIGRATE_MIN_WINDOW).
type Activity struct {
	DBs      []*sql.DB
	MaxCells int // 0: 1,000,000
	Now      func() time.Time

	mu      sync.Mutex
	pending map[tiers.CellID]*pendingCell
	Dropped int64
}

type pendingCell struct {
	ref   tiers.Ref
	calls int64
}

// Observe counts one check of cells (tiers.Router.Counted): the fixed
// window cells of an op.
func (a *Activity) Observe(refs []tiers.Ref) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = map[tiers.CellID]*pendingCell{}
	}
	limit := a.MaxCells
	if limit <= 0 {
		limit = 1_000_000
	}
	for _, r := range refs {
		id := r.ID()
		p, ok := a.pending[id]
		if !ok {
			if len(a.pending) >= limit {
				a.Dropped++
				continue
			}
			p = &pendingCell{ref: r}
			a.pending[id] = p
		}
		p.calls++
	}
}

func (a *Activity) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Flush writes what was counted since the last flush. What could not be
// written is kept for the next flush.
func (a *Activity) Flush(ctx context.Context) error {
	a.mu.Lock()
	p := a.pending
	a.pending = nil
	a.mu.Unlock()
	if len(p) == 0 || len(a.DBs) == 0 {
		return nil
	}
	hour := a.now().Unix() / 3600
	by := make([][]*pendingCell, len(a.DBs))
	for _, c := range p {
		sh := tiers.JumpShard(shardKey(&c.ref), len(a.DBs))
		by[sh] = append(by[sh], c)
	}
	var failed []*pendingCell
	var firstErr error
	for sh, cells := range by {
		// In key order: instances flushing at once (each cycle starts
		// with a flush) then lock rows in the same order and cannot
		// deadlock each other.
		slices.SortFunc(cells, func(a, b *pendingCell) int {
			ia, ib := a.ref.ID(), b.ref.ID()
			return bytes.Compare(ia[:], ib[:])
		})
		for chunk := range slices.Chunk(cells, 500) {
			args := make([]any, 0, 4*len(chunk))
			for _, c := range chunk {
				id := c.ref.ID()
				args = append(args, id[:], EncodeRef(&c.ref), hour, c.calls)
			}
			q := "INSERT INTO cell_activity (k, ref, since, calls) VALUES " +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", len(chunk)), ", ") +
				" ON DUPLICATE KEY UPDATE calls = calls + VALUES(calls)"
			if _, err := a.DBs[sh].ExecContext(ctx, q, args...); err != nil {
				failed = append(failed, chunk...)
				if firstErr == nil {
					firstErr = fmt.Errorf("activity flush shard %d: %w", sh, err)
				}
			}
		}
	}
	if len(failed) > 0 {
		a.mu.Lock()
		if a.pending == nil {
			a.pending = map[tiers.CellID]*pendingCell{}
		}
		for _, c := range failed {
			id := c.ref.ID()
			if q, ok := a.pending[id]; ok {
				q.calls += c.calls
			} else {
				a.pending[id] = c
			}
		}
		a.mu.Unlock()
	}
	return firstErr
}

func shardKey(r *tiers.Ref) uint64 {
	if r.ShardKey != 0 {
		return r.ShardKey
	}
	return tiers.ShardKeyOfIdentity(r.Identity)
}

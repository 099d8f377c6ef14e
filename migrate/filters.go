package migrate

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// RebuildColdFilters puts back into the cold filters every cell that has a
// cold row and no directory field, from cell_activity (every cell the
// cycle moved to cold has a row there; the flushed activity is folded in
// first) and the cold tier: after Redis lost data (a restart without
// persistence, a failover that lost the last writes), a filter missing a
// cold cell's bits would let its next check count it as new, over its cold
// count (migrate/PROTOCOL.md, invariant 2).
// Adding bits never changes a count: a cell the filter holds is looked up.
// It returns how many cells it made sure of.
func (w *Worker) RebuildColdFilters(ctx context.Context) (int, error) {
	m := w.Mover
	if m.Cold == nil {
		return 0, nil
	}
	n := 0
	for sh, db := range w.DBs {
		for part := range partsPerShard {
			if _, err := foldActivityLog(ctx, db, part); err != nil {
				return n, fmt.Errorf("rebuild cold filters, shard %d: %w", sh, err)
			}
		}
		after := []byte{}
		for {
			refs, last, err := activityRefs(ctx, db, after, 1000)
			if err != nil {
				return n, fmt.Errorf("rebuild cold filters, shard %d: %w", sh, err)
			}
			if last == nil {
				break
			}
			after = last
			rows, err := m.Cold.Exists(ctx, refs)
			if err != nil {
				return n, fmt.Errorf("rebuild cold filters: %w", err)
			}
			var swaps []tiers.DirSwap
			for i := range refs {
				if rows[i] {
					swaps = append(swaps, tiers.DirSwap{Ref: refs[i]}) // field absent: in the filter
				}
			}
			ok, err := m.Warm.SwitchToCold(ctx, swaps, nil)
			if err != nil {
				return n, fmt.Errorf("rebuild cold filters: %w", err)
			}
			for _, b := range ok {
				if b {
					n++
				}
			}
		}
	}
	return n, nil
}

// activityRefs reads up to limit cells of cell_activity after key after,
// in key order, and the last key read (nil when none was left).
func activityRefs(ctx context.Context, db *sql.DB, after []byte, limit int) ([]tiers.Ref, []byte, error) {
	rows, err := db.QueryContext(ctx, "SELECT k, ref FROM cell_activity WHERE k > ? ORDER BY k LIMIT ?", after, limit)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var refs []tiers.Ref
	var last []byte
	for rows.Next() {
		var k, ref []byte
		if err := rows.Scan(&k, &ref); err != nil {
			return nil, nil, err
		}
		last = k
		if r, err := DecodeRef(string(ref)); err == nil {
			refs = append(refs, r)
		}
	}
	return refs, last, rows.Err()
}

package cold

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// The cold tier's side of a move (tiers/warm/move.go has the protocol's outline):
// freezing its rows and looking them up.

// Freeze sets Moved on the cold rows of refs (one locking transaction per
// shard and chunk): a check routed to cold before the directory said
// "moving" then finds them frozen (ErrMoved) instead of counting after the
// final copy. Missing rows stay missing (a routed check requires its row).
func (s *Store) Freeze(ctx context.Context, refs []tiers.Ref) error {
	by, err := s.refsByShard(refs)
	if err != nil {
		return err
	}
	for sh, idx := range by {
		if len(idx) == 0 {
			continue
		}
		ids := make([]tiers.CellID, len(idx))
		for j, i := range idx {
			ids[j] = refs[i].ID()
		}
		for attempt := 1; ; attempt++ {
			err := s.freezeShard(ctx, sh, ids)
			if retry, err := s.again(ctx, err, attempt); !retry {
				if err != nil {
					return fmt.Errorf("cold freeze shard %d: %w", sh, err)
				}
				break
			}
		}
	}
	return nil
}

func (s *Store) freezeShard(ctx context.Context, sh int, ids []tiers.CellID) error {
	tx, err := s.dbs[sh].BeginTx(ctx, nil)
	if err != nil {
		return coldUnavailable(err)
	}
	defer func() { _ = tx.Rollback() }()
	rows := map[tiers.CellID]*coldRow{}
	if err := selectCold(ctx, tx, ids, true, rows); err != nil {
		return err
	}
	var write []tiers.CellID
	for id, r := range rows {
		if r.state.Present && !r.state.Rec.Moved {
			r.state.Rec.Moved = true
			write = append(write, id)
		}
	}
	if len(write) == 0 {
		return nil
	}
	if err := writeCold(ctx, tx, write, rows); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return coldUnavailable(err)
	}
	return nil
}

// Size returns the rows of cold_cells, summed over the shards (exact
// below 100,000 rows a shard, else information_schema's TABLE_ROWS
// estimate), and their bytes of data and index: InnoDB's own estimate,
// which it refreshes in the background once a tenth of a table has
// changed.
func (s *Store) Size(ctx context.Context) (rows, bytes int64, err error) {
	for sh, db := range s.dbs {
		var size, n int64
		if err := db.QueryRowContext(ctx, "SELECT COALESCE(DATA_LENGTH + INDEX_LENGTH, 0), COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'cold_cells'").Scan(&size, &n); err != nil {
			return 0, 0, fmt.Errorf("shard %d: %w", sh, err)
		}
		if n < 100_000 {
			// Small tables: exact (TABLE_ROWS is an estimate).
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM cold_cells").Scan(&n); err != nil {
				return 0, 0, fmt.Errorf("shard %d: %w", sh, err)
			}
		}
		rows += n
		bytes += size
	}
	return rows, bytes, nil
}

// DBs returns the shard databases, in shard order.
func (s *Store) DBs() []*sql.DB { return s.dbs }

// Exists reports, per ref, whether the cold tier has a row for it: one
// SELECT per shard and chunk, no locks.
func (s *Store) Exists(ctx context.Context, refs []tiers.Ref) ([]bool, error) {
	out := make([]bool, len(refs))
	err := s.shardChunks(refs, func(sh int, chunk []int) error {
		ids := make([]tiers.CellID, len(chunk))
		for j, i := range chunk {
			ids[j] = refs[i].ID()
		}
		rows := map[tiers.CellID]*coldRow{}
		if err := selectCold(ctx, s.dbs[sh], ids, false, rows); err != nil {
			return fmt.Errorf("cold lookup shard %d: %w", sh, err)
		}
		for j, i := range chunk {
			_, out[i] = rows[ids[j]]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

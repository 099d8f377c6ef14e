package userdays

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
)

// Today's chunks are compacted in size tiers, as an LSM tree's runs are:
// a flush writes a batch of level-0 chunks; Rollup merges an app's
// mergeMinBatches batches of level 0 into one batch of level 1, and
// mergeFanIn batches of a level L >= 1 into one of level L+1 (at
// maxChunkLevel, into one of maxChunkLevel again). The triggers count
// batches, not chunk rows (a busy app's flush writes 64 rows or more). So a
// query for one user reads at most mergeMinBatches−1 +
// maxChunkLevel×(mergeFanIn−1) = 76 batches plus the flushes since the
// last Rollup, rather than every flush's (5,760 a day at 15 s).
const (
	// mergeMinBatches of level 0 (about 8 minutes of one quotad's flushes)
	// trigger a merge into level 1.
	mergeMinBatches = 32
	// mergeFanIn batches of a level >= 1 trigger a merge into the next.
	// Each level an entry climbs costs a rewrite of it
	// (BenchmarkMergeUserChunks): at 16, a day of 10-minute rollups ends
	// as 9 level-2 batches (two rewrites, 55 batches a query); at 8, three
	// rewrites for 47.
	mergeFanIn = 16
	// maxChunkLevel is the top level, whose batches merge into one of the
	// same level: it bounds the batches a query reads whatever the traffic.
	maxChunkLevel = 3
)

// mergeThreshold is the batches of level that make Rollup merge it.
func mergeThreshold(level uint8) int {
	if level == 0 {
		return mergeMinBatches
	}
	return mergeFanIn
}

// mergeTarget is the level that the merge of level's chunks writes.
func mergeTarget(level uint8) uint8 { return min(level+1, maxChunkLevel) }

// Merge compacts today's chunks: for each level from 0 up (so a merge's
// batch counts towards the next level in the same run), each app with at
// least mergeThreshold batches of it has them merged into one batch of
// mergeTarget. It returns the merges done.
func (u *Store) Merge(ctx context.Context, conn *sql.Conn, today usage.Day) (int, error) {
	pace := usage.NewPacer(u.duty, time.Now().Add(time.Hour), nil)
	var m chunkMerge
	var errs []error
	merges := 0
	for level := uint8(0); level <= maxChunkLevel; level++ {
		apps, err := appsToMerge(ctx, conn, today, level)
		if err != nil {
			return merges, errors.Join(append(errs, err)...)
		}
		for _, app := range apps {
			if err := u.mergeAppChunks(ctx, conn, pace, &m, today, app, level); err != nil {
				errs = append(errs, fmt.Errorf("merge level-%d user chunks of %q: %w", level, app, err))
				continue
			}
			merges++
		}
	}
	return merges, errors.Join(errs...)
}

// appsToMerge lists the apps with at least mergeThreshold(level) batches
// of level on day.
func appsToMerge(ctx context.Context, conn *sql.Conn, day usage.Day, level uint8) ([]string, error) {
	var apps []string
	err := usage.EachRow(ctx, conn,
		"SELECT app_id FROM usage_user_chunks WHERE day = ? AND level = ? GROUP BY app_id HAVING COUNT(DISTINCT batch_id) >= ?",
		[]any{day.String(), level, mergeThreshold(level)}, func(rows *sql.Rows) error {
			var app []byte
			if err := rows.Scan(&app); err != nil {
				return err
			}
			apps = append(apps, string(app))
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("level-%d user chunks to merge: %w", level, err)
	}
	return apps, nil
}

// mergeAppChunks replaces app's chunks of level on day with one batch of
// mergeTarget(level) chunks of the same entries summed.
func (u *Store) mergeAppChunks(ctx context.Context, conn *sql.Conn, pace *usage.Pacer, m *chunkMerge, day usage.Day, app string, level uint8) error {
	return u.rewriteChunks(ctx, conn, pace, m, chunkRewrite{
		from:  []chunkTable{todayChunks},
		where: "day = ? AND app_id = ? AND level = ?",
		args:  []any{day.String(), app, level},
		day:   day,
		app:   app,
		to:    todayChunks,
		level: mergeTarget(level),
	})
}

// chunkRewrite is one rewrite of an app's chunks of a day: those that
// where selects (with args) from each table of from, replaced by one batch
// of the same entries summed, in table to at level.
type chunkRewrite struct {
	from  []chunkTable
	where string
	args  []any
	day   usage.Day
	app   string
	to    chunkTable
	level uint8
}

// rewriteChunks does w in one transaction: a crash leaves the old chunks
// or the new, never both. m is the working set, reused.
func (u *Store) rewriteChunks(ctx context.Context, conn *sql.Conn, pace *usage.Pacer, m *chunkMerge, w chunkRewrite) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Locking reads: the DELETEs below remove the chunks read and no other.
	m.reset()
	for _, t := range w.from {
		if err := lockedChunks(ctx, tx, m, "SELECT body FROM "+t.Name+" WHERE "+w.where+" FOR UPDATE", w.args...); err != nil {
			return fmt.Errorf("read %s: %w", t.Name, err)
		}
	}
	chunks := m.chunks(w.day, w.app, w.level, chunkMaxRaw)
	if len(chunks) == 0 {
		return nil
	}
	// Delete before inserting: at maxChunkLevel a merge's new chunks have
	// the level of the old ones.
	for _, t := range w.from {
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+t.Name+" WHERE "+w.where, w.args...); err != nil {
			return fmt.Errorf("delete rewritten chunks from %s: %w", t.Name, err)
		}
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	if err := u.insertChunks(ctx, tx, pace, w.to, id, chunks); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	u.rowsWritten.WithLabelValues(w.to.Name).Add(float64(len(chunks)))
	return nil
}

// lockedChunks reads (and locks) the chunk bodies that query selects into
// m, adding them to what m holds.
func lockedChunks(ctx context.Context, tx *sql.Tx, m *chunkMerge, query string, args ...any) error {
	return usage.EachRow(ctx, tx, query, args, func(rows *sql.Rows) error {
		var body sql.RawBytes // decoded at once: no copy of the body
		if err := rows.Scan(&body); err != nil {
			return err
		}
		return m.add(body)
	})
}

// Once a UTC day is over, Rollup seals each app's per-user figures of it:
// the day's chunks of every level (and its sealed chunks, when a late flush
// added to a sealed day) merged into one batch of usage_user_sealed, cut
// into parts as a merge cuts them. It used to fold them into
// usage_user_daily rows, which cost MariaDB many times more an entry
// (BenchmarkSealDay).

// Seal seals every (day, app) with chunks of a day before today, one per
// transaction, resting as the flush does, and returns the pairs sealed.
func (u *Store) Seal(ctx context.Context, conn *sql.Conn, today usage.Day) (int, error) {
	pace := usage.NewPacer(u.duty, time.Now().Add(time.Hour), nil)
	var m chunkMerge // the merges' working set, reused
	var errs []error
	sealed := 0
	// A cursor: a (day, app) that fails (a corrupt chunk) is passed over.
	d, app := "1000-01-01", "" // before any day
	for {
		var next []byte
		err := conn.QueryRowContext(ctx, `SELECT DATE_FORMAT(day, '%Y-%m-%d'), app_id FROM usage_user_chunks
WHERE day < ? AND (day, app_id) > (?, ?) ORDER BY day, app_id LIMIT 1`,
			today.String(), d, app).Scan(&d, &next)
		if errors.Is(err, sql.ErrNoRows) {
			return sealed, errors.Join(errs...)
		}
		if err != nil {
			return sealed, errors.Join(append(errs, fmt.Errorf("user chunks to seal: %w", err))...)
		}
		app = string(next)
		day, err := usage.ParseDay(d)
		if err == nil {
			err = u.sealAppDay(ctx, conn, pace, &m, day, app)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("seal user chunks of %q on %s: %w", app, d, err))
			if ctx.Err() != nil {
				return sealed, errors.Join(errs...)
			}
			continue
		}
		sealed++
	}
}

// sealAppDay replaces app's chunks of day, today's and sealed, with one
// sealed batch of the same entries summed.
func (u *Store) sealAppDay(ctx context.Context, conn *sql.Conn, pace *usage.Pacer, m *chunkMerge, day usage.Day, app string) error {
	return u.rewriteChunks(ctx, conn, pace, m, chunkRewrite{
		from:  []chunkTable{todayChunks, sealedChunks},
		where: "day = ? AND app_id = ?",
		args:  []any{day.String(), app},
		day:   day,
		app:   app,
		to:    sealedChunks,
	})
}

package analytics

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Today's chunks are compacted in size tiers, as an LSM tree's runs are: a
// flush writes a batch of level-0 chunks (one per part); once an app has
// mergeMinBatches batches of level 0 today, Rollup merges them into one
// batch of level 1, split into parts by the merged volume; once it has
// mergeFanIn batches of a level L >= 1, into one of level L+1; and at
// maxChunkLevel into one of maxChunkLevel again. The triggers count batches
// (flushes or merges), not chunk rows: a busy app's flush writes 64 rows
// or more, and counting rows merged it at every rollup. So after a Rollup
// an app has fewer than mergeMinBatches batches of level 0 today and fewer
// than mergeFanIn of each level above. A query for one user reads, of
// each batch, the chunks of its user's part: so at most
// mergeMinBatches−1 + maxChunkLevel×(mergeFanIn−1) = 76 batches plus the
// flushes since that Rollup, however long the day has run; on a day of
// one quotad's 10-minute rollups, 55 at most (see mergeFanIn). Without merges
// it would read every flush's (5,760 a day at 15 s); with merges into one
// level only, one batch per merge (up to 144 a day at the 10-minute
// rollup).
const (
	// mergeMinBatches is the number of an app's flush batches (level 0)
	// of the day from which Rollup merges them: about 8 minutes of 15 s
	// flushes of one quotad. Flush batches are small (one flush's users),
	// and a merge may hold back the app's flushes until it commits (its
	// locking read, lockedChunks).
	mergeMinBatches = 32
	// mergeFanIn is the number of an app's batches of one level >= 1 from
	// which Rollup merges them into one of the next level. A merge
	// rewrites its batches' entries (summed per user and interface), so an
	// entry is rewritten once per level it climbs, and a query reads up to
	// mergeFanIn−1 batches per level. With calls spread like make bench's
	// a merge sums almost nothing (nearly every call is a new (user,
	// interface) of the day), so each level an entry climbs costs quotad
	// and MariaDB a rewrite of it (BenchmarkMergeUserChunks). A day
	// of one quotad's 10-minute rollups makes 144 level-1 batches (at most
	// 5,760/32 = 180 on any schedule): at 16 they end as 9 of level 2, an
	// entry rewritten twice before the day's seal, and a query reads at
	// most 31 + 15 + 9 = 55 batches; at 8, as 18 → 2 of level 3, three
	// times (a third more of the merges' work) for at most 31 + 7 + 7 + 2
	// = 47 batches a query.
	mergeFanIn = 16
	// maxChunkLevel is the top level: its batches merge into one of the
	// same level, which rewrites all of them. Level 3 takes 256 level-1
	// batches (several quotads, shorter flushes or a rollup more often than
	// every 10 minutes), and its own merge 4,096: a day of ~23 quotads'
	// 15 s flushes. The cap bounds the batches a query reads whatever the
	// traffic (and is far below the TINYINT's 255).
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

// merge compacts today's chunks (see mergeMinBatches): for each
// level from 0 up, each app with at least mergeThreshold batches of that
// level has them merged into one batch of mergeTarget. Levels go upwards
// so that a merge's batch counts towards the next level in the same run,
// and a second run finds nothing to merge. It returns the merges done.
func (u *userFigures) merge(ctx context.Context, conn *sql.Conn, today Day) (int, error) {
	pace := newPacer(u.duty, time.Now().Add(time.Hour), nil)
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
// of level on day (read from the by_level index alone: it holds batch_id).
func appsToMerge(ctx context.Context, conn *sql.Conn, day Day, level uint8) ([]string, error) {
	rows, err := conn.QueryContext(ctx,
		"SELECT app_id FROM usage_user_chunks WHERE day = ? AND level = ? GROUP BY app_id HAVING COUNT(DISTINCT batch_id) >= ?",
		day.String(), level, mergeThreshold(level))
	if err != nil {
		return nil, fmt.Errorf("level-%d user chunks to merge: %w", level, err)
	}
	defer rows.Close()
	var apps []string
	for rows.Next() {
		var app []byte
		if err := rows.Scan(&app); err != nil {
			return nil, fmt.Errorf("level-%d user chunks to merge: %w", level, err)
		}
		apps = append(apps, string(app))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("level-%d user chunks to merge: %w", level, err)
	}
	return apps, nil
}

// mergeAppChunks replaces app's chunks of level on day with one batch of
// mergeTarget(level) chunks of the same entries summed (rewriteChunks).
// Only merges write the levels above 0, one at a time under Rollup's lock.
func (u *userFigures) mergeAppChunks(ctx context.Context, conn *sql.Conn, pace *pacer, m *chunkMerge, day Day, app string, level uint8) error {
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
	day   Day
	app   string
	to    chunkTable
	level uint8
}

// rewriteChunks does w in one transaction: a crash leaves the old chunks
// or the new, never both. m is the working set, reused from one rewrite
// to the next.
func (u *userFigures) rewriteChunks(ctx context.Context, conn *sql.Conn, pace *pacer, m *chunkMerge, w chunkRewrite) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	// Locking reads: a flush writing one of these chunks meanwhile waits
	// for the commit, so the DELETEs below remove the chunks read and no
	// other.
	m.reset()
	for _, t := range w.from {
		if err := lockedChunks(ctx, tx, m, "SELECT body FROM "+t.name+" WHERE "+w.where+" FOR UPDATE", w.args...); err != nil {
			return fmt.Errorf("read %s: %w", t.name, err)
		}
	}
	chunks := m.chunks(w.day, w.app, w.level, chunkMaxRaw)
	if len(chunks) == 0 {
		return nil
	}
	// Delete before inserting: at maxChunkLevel a merge's new chunks have
	// the level of the old ones.
	for _, t := range w.from {
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+t.name+" WHERE "+w.where, w.args...); err != nil {
			return fmt.Errorf("delete rewritten chunks from %s: %w", t.name, err)
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
	u.met.rowsWritten.WithLabelValues(w.to.name).Add(float64(len(chunks)))
	return nil
}

// lockedChunks reads (and locks) the chunk bodies that query selects into
// m, adding them to what m holds.
func lockedChunks(ctx context.Context, tx *sql.Tx, m *chunkMerge, query string, args ...any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var body sql.RawBytes // decoded at once: no copy of the body
		if err := rows.Scan(&body); err != nil {
			return err
		}
		if err := m.add(body); err != nil {
			return err
		}
	}
	return rows.Err()
}

package worker

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/migrate/jobs"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
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
	return w.rebuildColdFilters(ctx, w.Jobs.Start(jobs.KindRebuild, "api"))
}

// rebuildColdFilters is RebuildColdFilters, its progress told to job
// (a part a shard; "moved": the cells put back in their filters).
func (w *Worker) rebuildColdFilters(ctx context.Context, job *jobs.Job) (n int, err error) {
	defer func() { job.End(map[string]any{"cells": n, "job": job.ID()}, err, w.Jobs.Time()) }()
	m := w.Mover
	if m.Cold == nil {
		return 0, nil
	}
	job.SetTotal(len(w.DBs))
	for sh, db := range w.DBs {
		if _, err := foldActivityLogs(ctx, db); err != nil {
			return n, fmt.Errorf("rebuild cold filters, shard %d: %w", sh, err)
		}
		pp := job.PartStarted(sh)
		if rows, err := activityRowCount(ctx, db); err == nil {
			pp.Cells.Store(rows)
			pp.Counted.Store(true)
		}
		after := []byte{}
		for {
			refs, last, err := activityRefs(ctx, db, after, 1000)
			if err != nil && !errors.Is(err, errUndecodable) {
				return n, fmt.Errorf("rebuild cold filters, shard %d: %w", sh, err)
			}
			if last == nil {
				job.PartEnded(sh, true)
				break
			}
			after = last
			pp.Scanned.Add(int64(len(refs)))
			rows, err := m.Cold.Exists(ctx, refs)
			if err != nil {
				return n, fmt.Errorf("rebuild cold filters: %w", err)
			}
			var swaps []warm.DirSwap
			for _, r := range where(refs, rows) {
				swaps = append(swaps, warm.DirSwap{Ref: r}) // field absent: in the filter
			}
			ok, err := m.Warm.SwitchToCold(ctx, swaps, nil)
			if err != nil {
				return n, fmt.Errorf("rebuild cold filters: %w", err)
			}
			for _, b := range ok {
				if b {
					n++
					pp.Moved.Add(1)
				}
			}
		}
	}
	return n, nil
}

// foldActivityLogs folds every part's flushed activity of a shard (db)
// into its cell_activity, and returns the cells folded.
func foldActivityLogs(ctx context.Context, db *sql.DB) (int, error) {
	n := 0
	for part := range activity.PartsPerShard {
		k, err := activity.FoldLog(ctx, db, part)
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// activityRefs reads up to limit cells of cell_activity after key after,
// in key order, and the last key read (nil when none was left). A row
// whose ref cannot be decoded is left out and counted in the error
// (errUndecodable), with the cells read.
func activityRefs(ctx context.Context, db *sql.DB, after []byte, limit int) ([]tiers.Ref, []byte, error) {
	rows, err := db.QueryContext(ctx, "SELECT k, ref FROM cell_activity WHERE k > ? ORDER BY k LIMIT ?", after, limit)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var refs []tiers.Ref
	var last []byte
	bad := 0
	for rows.Next() {
		var k, ref []byte
		if err := rows.Scan(&k, &ref); err != nil {
			return nil, nil, err
		}
		last = k
		if r, err := migrate.DecodeRef(string(ref)); err == nil {
			refs = append(refs, r)
		} else {
			bad++
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if bad > 0 {
		return refs, last, fmt.Errorf("%w: %d rows of cell_activity after %x", errUndecodable, bad, after)
	}
	return refs, last, nil
}

// errUndecodable: a cell_activity row whose ref cannot be decoded (a
// rebuild skips it; a compaction, which would drop the cell from its
// filter, stops).
var errUndecodable = errors.New("undecodable refs")

// CompactReport is what CompactColdFilters did.
type CompactReport struct {
	Tags        int    `json:"tags"`      // tags with a cold filter and a cell in cell_activity
	Compacted   int    `json:"compacted"` // whose filter was replaced
	Changed     int    `json:"changed"`   // left as they were: a cell of theirs went cold meanwhile
	CellsBefore int    `json:"cells_before"`
	CellsAfter  int    `json:"cells_after"` // in the filters compacted
	BytesBefore int64  `json:"bytes_before"`
	BytesAfter  int64  `json:"bytes_after"`
	Job         string `json:"job,omitempty"` // this instance's job (GET /v1/admin/jobs/{id})
}

// CompactColdFilters rebuilds each tag's cold filter as a single layer
// that holds the tag's cells that are cold now: a filter whose cells went
// cold a few at a time has several layers, each probed, and keeps the
// bits of cells moved out of cold since, so its false positives (a MySQL
// lookup each) grow with time. A cell is kept if it has a cold row and
// the filter holds it, the filter's version having been read before
// either was looked at; the new filter replaces the old one only if that
// version is unchanged, so a cell switched into cold meanwhile is never
// left out. It holds the cycle key meanwhile (a cycle due waits), so that
// no quiet move writes a row without a switch (migrate/PROTOCOL.md,
// "Compacting a cold filter"), and fails if a cycle runs. Like
// RebuildColdFilters it finds the cold cells in cell_activity, in one
// scan; the cells it keeps wait in a temporary table of each shard, read
// back in tag order, so that it holds one tag's cells at a time.
func (w *Worker) CompactColdFilters(ctx context.Context) (CompactReport, error) {
	return w.compactColdFilters(ctx, w.Jobs.Start(jobs.KindCompact, "api"))
}

// compactColdFilters is CompactColdFilters, its progress told to job (a
// part a shard's scan; "moved": the cells kept).
func (w *Worker) compactColdFilters(ctx context.Context, job *jobs.Job) (rep CompactReport, err error) {
	rep.Job = job.ID()
	defer func() { job.End(rep, err, w.Jobs.Time()) }()
	job.SetTotal(len(w.DBs))
	if w.Mover.Cold == nil {
		return rep, nil
	}
	id, err := w.holdCycleKey(ctx)
	if err != nil {
		return rep, err
	}
	defer endCycle.Run(context.WithoutCancel(ctx), w.Mover.RDB, []string{w.cycleKey()}, id)
	defer w.keepRenewed(ctx, w.cycleKey(), id, w.partLeaseTTL())()
	scratch, err := w.openScratch(ctx)
	defer scratch.close()
	if err != nil {
		return rep, err
	}
	filters := map[tiers.Tag]warm.ColdFilter{}
	for sh, db := range w.DBs {
		if err := w.keepColdCells(ctx, sh, db, scratch[sh], filters, job); err != nil {
			return rep, err
		}
	}
	// Renewals that failed for a lease time let a cycle in: its quiet moves
	// may have written rows the scan did not see.
	if cur, err := w.Mover.RDB.Get(ctx, w.cycleKey()).Result(); err != nil || cur != id {
		return rep, fmt.Errorf("compact cold filters: lost the cycle key (%q, %v); nothing replaced", cur, err)
	}
	return rep, w.replaceFilters(ctx, filters, scratch, &rep)
}

// keepColdCells scans shard sh's cell_activity and writes to its scratch
// table the cells that have a cold row and that their tag's filter holds,
// reading each tag's filter first (filters).
func (w *Worker) keepColdCells(ctx context.Context, sh int, db *sql.DB, scratch *sql.Conn, filters map[tiers.Tag]warm.ColdFilter, job *jobs.Job) error {
	if _, err := foldActivityLogs(ctx, db); err != nil {
		return fmt.Errorf("compact cold filters, shard %d: %w", sh, err)
	}
	pp := job.PartStarted(sh)
	if rows, err := activityRowCount(ctx, db); err == nil {
		pp.Cells.Store(rows)
		pp.Counted.Store(true)
	}
	after := []byte{}
	for {
		refs, last, err := activityRefs(ctx, db, after, 1000)
		if err != nil {
			job.PartEnded(sh, false)
			return fmt.Errorf("compact cold filters, shard %d: %w", sh, err)
		}
		if last == nil {
			job.PartEnded(sh, true)
			return nil
		}
		after = last
		pp.Scanned.Add(int64(len(refs)))
		if err := w.readFilters(ctx, refs, filters); err != nil {
			return err
		}
		refs = slices.DeleteFunc(refs, func(r tiers.Ref) bool { return filters[r.Tag].Layers == 0 })
		held, err := w.coldAndHeld(ctx, refs)
		if err != nil {
			return err
		}
		pp.Moved.Add(int64(len(held)))
		if err := insertScratch(ctx, scratch, held); err != nil {
			return fmt.Errorf("compact cold filters, shard %d: %w", sh, err)
		}
	}
}

// compactionPrefix starts the cycle key's value while a compaction holds
// it; compactionPoll is how often a cycle due meanwhile looks again (a
// GET of the key: cheap, and the cycle starts soon after the compaction
// ends).
const (
	compactionPrefix = "compact-"
	compactionPoll   = 100 * time.Millisecond
)

// holdCycleKey takes the cycle key for a compaction (cycle.go), so that no
// cycle moves cells while it runs, for a part's lease time (the caller
// renews it), and returns the value it wrote; it fails if a cycle or
// another compaction holds the key.
func (w *Worker) holdCycleKey(ctx context.Context) (string, error) {
	id := compactionPrefix + strconv.FormatInt(w.now().UnixNano(), 36)
	ok, err := w.Mover.RDB.SetNX(ctx, w.cycleKey(), id, w.partLeaseTTL()).Result()
	if err != nil {
		return "", fmt.Errorf("compact cold filters: %w", err)
	}
	if !ok {
		cur, _ := w.Mover.RDB.Get(ctx, w.cycleKey()).Result()
		return "", fmt.Errorf("compact cold filters: %q runs now (a migration cycle, or a compaction); try again after it", cur)
	}
	return id, nil
}

// readFilters reads the cold filter of each tag of refs not in filters
// yet: before any of the tag's cells is looked up.
func (w *Worker) readFilters(ctx context.Context, refs []tiers.Ref, filters map[tiers.Tag]warm.ColdFilter) error {
	var tags []tiers.Tag
	seen := map[tiers.Tag]bool{}
	for _, r := range refs {
		if _, ok := filters[r.Tag]; !ok && !seen[r.Tag] {
			seen[r.Tag] = true
			tags = append(tags, r.Tag)
		}
	}
	if len(tags) == 0 {
		return nil
	}
	got, err := w.Mover.Warm.ColdFilters(ctx, tags)
	if err != nil {
		return fmt.Errorf("compact cold filters: %w", err)
	}
	for i, t := range tags {
		filters[t] = got[i]
	}
	return nil
}

// coldAndHeld returns the refs that have a cold row and that their tag's
// filter holds.
func (w *Worker) coldAndHeld(ctx context.Context, refs []tiers.Ref) ([]tiers.Ref, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	rows, err := w.Mover.Cold.Exists(ctx, refs)
	if err != nil {
		return nil, fmt.Errorf("compact cold filters: %w", err)
	}
	cold := where(refs, rows)
	if len(cold) == 0 {
		return nil, nil
	}
	maybe, err := w.Mover.Warm.MayBeCold(ctx, cold)
	if err != nil {
		return nil, fmt.Errorf("compact cold filters: %w", err)
	}
	return where(cold, maybe), nil
}

// where returns the items of s whose entry in keep is true.
func where[T any](s []T, keep []bool) []T {
	var out []T
	for i := range s {
		if keep[i] {
			out = append(out, s[i])
		}
	}
	return out
}

// replaceFilters replaces the filter of each tag of filters that has more
// than one layer or more cells than are cold now by one of its cells in
// the scratch tables, read tag by tag in tag order from every shard.
func (w *Worker) replaceFilters(ctx context.Context, filters map[tiers.Tag]warm.ColdFilter, scratch scratchTables, rep *CompactReport) error {
	tags := make([]tiers.Tag, 0, len(filters))
	for tag, f := range filters {
		if f.Layers > 0 {
			tags = append(tags, tag)
		}
	}
	slices.SortFunc(tags, func(a, b tiers.Tag) int { return bytes.Compare(a[:], b[:]) })
	cells, err := scratch.byTag(ctx)
	if err != nil {
		return err
	}
	defer cells.close()
	for _, tag := range tags {
		f := filters[tag]
		rep.Tags++
		kept, err := cells.of(tag)
		if err != nil {
			return err
		}
		if f.Layers == 1 && len(kept) >= f.Cells {
			continue // nothing to gain
		}
		ok, size, err := w.Mover.Warm.ReplaceColdFilter(ctx, tag, f.Version, kept)
		if err != nil {
			return fmt.Errorf("compact cold filters: %w", err)
		}
		if !ok {
			rep.Changed++
			continue
		}
		rep.Compacted++
		rep.CellsBefore += f.Cells
		rep.CellsAfter += len(kept)
		rep.BytesBefore += int64(f.Bytes)
		rep.BytesAfter += int64(size)
	}
	return cells.err()
}

// activityRowCount is the rows of a shard's cell_activity, what a rebuild's or
// compaction's scan of the shard is measured against: counted below
// 100,000 rows, InnoDB's estimate (information_schema) above, which a
// count would cost a scan of its own for.
func activityRowCount(ctx context.Context, db *sql.DB) (int64, error) {
	var est sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'cell_activity'").Scan(&est); err != nil {
		return 0, fmt.Errorf("cell_activity rows: %w", err)
	}
	if est.Valid && est.Int64 >= 100_000 {
		return est.Int64, nil
	}
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM cell_activity").Scan(&n); err != nil {
		return 0, fmt.Errorf("cell_activity rows: %w", err)
	}
	return n, nil
}

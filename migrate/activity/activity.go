// Package activity is the cells' activity, the migration worker's input:
// counted per check in memory, flushed to cell_activity_log, folded part
// by part into cell_activity (PartsPerShard parts a shard).
package activity

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/tiers"
)

// Activity counts checks per fixed-window cell in process and, on Flush,
// writes them to cell_activity_log (sql/008) in batches: per shard one
// statement of a few rows, whatever the number of cells, where one row per
// cell would cost about a row write per check when calls spread over many
// cells of long windows. Each cycle folds a part's batches into
// cell_activity (sql/004), the per-cell history it scans, just before it
// scans that part (FoldLog). It holds at most MaxCells cells
// between flushes (a cell's created calls and its map entry each count
// as one); calls of further cells are dropped (counted in Dropped) - the
// cell's mean is then a little low, never its limit. Which cells it
// is given is the router's choice (routing.Router.CallsMinWindow: config's
// QUOTA_MIGRATE_MIN_WINDOW).
type Activity struct {
	DBs      []*sql.DB
	MaxCells int // 0: 1,000,000
	Now      func() time.Time

	mu      sync.Mutex
	pending map[tiers.CellID]*pendingCell
	// created is the calls that created their cell's hot key, each
	// appended without a lookup in pending: a cell's first call in a
	// window, and the only one of many cells (a batch of new users). A
	// cell may be here and in pending, or here twice; Flush adds up its
	// calls.
	created []pendingCell
	Dropped int64
}

type pendingCell struct {
	id    tiers.CellID // ref.ID(), an MD5: computed once
	ref   tiers.Ref
	calls int64
}

// Observe counts one check of cells (routing.Router.Calls): the fixed
// window cells of an op; bit i of created says the call created cell i's
// hot key (routing.Router.Calls). It keeps nothing of cells.
//
// A created cell is appended to a list rather than looked up in the map:
// in a map of a million cells nearly every lookup of a new one misses the
// CPU's caches, and a batch of new users is all new cells (make
// bench-cells). The list holds at most a call per key created, so it is
// bounded as the map is.
func (a *Activity) Observe(cells []tiers.Cell, created uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = map[tiers.CellID]*pendingCell{}
	}
	limit := a.MaxCells
	if limit <= 0 {
		limit = 1_000_000
	}
	for i := range cells {
		c := &cells[i]
		id := c.CellID()
		isCreated := i < 64 && created&(1<<i) != 0
		var p *pendingCell
		if !isCreated {
			p = a.pending[id]
		}
		switch {
		case p != nil:
			p.calls++
		case len(a.pending)+len(a.created) >= limit:
			a.Dropped++
		case isCreated:
			a.created = append(a.created, pendingCell{id: id, ref: tiers.RefOf(c), calls: 1})
		default:
			a.pending[id] = &pendingCell{id: id, ref: tiers.RefOf(c), calls: 1}
		}
	}
}

func (a *Activity) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Bounds of what a flush writes: cells per cell_activity_log row (about
// 40 bytes each) and rows per INSERT, so that a statement stays far below
// MariaDB's default max_allowed_packet (16 MiB).
const (
	logBatchCells       = 2000
	logRowsPerStatement = 32
)

// Flush writes what was counted since the last flush. What could not be
// written is kept for the next flush.
func (a *Activity) Flush(ctx context.Context) error {
	a.mu.Lock()
	p, created := a.pending, a.created
	a.pending, a.created = nil, nil
	a.mu.Unlock()
	if len(p)+len(created) == 0 || len(a.DBs) == 0 {
		return nil
	}
	hour := a.now().Unix() / 3600
	by := make([][]*pendingCell, len(a.DBs))
	for _, c := range p {
		sh := ShardOf(&c.ref, len(a.DBs))
		by[sh] = append(by[sh], c)
	}
	for i := range created {
		c := &created[i]
		sh := ShardOf(&c.ref, len(a.DBs))
		by[sh] = append(by[sh], c)
	}
	var failed []*pendingCell
	var errs []error
	for sh, cells := range by {
		f, err := a.flushShard(ctx, sh, cells, hour)
		failed = append(failed, f...)
		errs = append(errs, err)
	}
	a.keep(failed)
	return errors.Join(errs...)
}

// logRow is one row of cell_activity_log: cells of one part.
type logRow struct {
	part  int
	cells []*pendingCell
}

// flushShard writes one shard's cells as rows of cell_activity_log and
// returns the cells of the statements that failed.
func (a *Activity) flushShard(ctx context.Context, sh int, cells []*pendingCell, hour int64) ([]*pendingCell, error) {
	slices.SortFunc(cells, func(a, b *pendingCell) int { return bytes.Compare(a.id[:], b.id[:]) })
	cells = addUpSameCells(cells)
	var rows []logRow
	for len(cells) > 0 {
		part := PartOfCell(cells[0].id)
		n := 1
		for n < len(cells) && n < logBatchCells && PartOfCell(cells[n].id) == part {
			n++
		}
		rows = append(rows, logRow{part: part, cells: cells[:n]})
		cells = cells[n:]
	}
	var failed []*pendingCell
	var firstErr error
	for chunk := range slices.Chunk(rows, logRowsPerStatement) {
		args := make([]any, 0, 3*len(chunk))
		for _, r := range chunk {
			args = append(args, r.part, hour, appendLogEntries(nil, r.cells))
		}
		q := "INSERT INTO cell_activity_log (part, hour, cells) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", len(chunk)), ", ")
		if _, err := a.DBs[sh].ExecContext(ctx, q, args...); err != nil {
			for _, r := range chunk {
				failed = append(failed, r.cells...)
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("activity flush shard %d: %w", sh, err)
			}
		}
	}
	return failed, firstErr
}

// addUpSameCells merges the entries of one cell (sorted cells: they are
// next to each other) into its first, the calls added up.
func addUpSameCells(cells []*pendingCell) []*pendingCell {
	out := cells[:0]
	for _, c := range cells {
		if n := len(out); n > 0 && out[n-1].id == c.id {
			out[n-1].calls += c.calls
			continue
		}
		out = append(out, c)
	}
	return out
}

// keep puts back the cells a flush could not write.
func (a *Activity) keep(failed []*pendingCell) {
	if len(failed) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = map[tiers.CellID]*pendingCell{}
	}
	for _, c := range failed {
		if q, ok := a.pending[c.id]; ok {
			q.calls += c.calls
		} else {
			a.pending[c.id] = c
		}
	}
}

// PartsPerShard is how many key ranges a shard's cell_activity (and its
// log) is cut into: a cycle's parts.
const PartsPerShard = 16

// PartOfCell is the part of its shard a cell is in (the worker's partRange's).
func PartOfCell(id tiers.CellID) int { return int(id[0]) * PartsPerShard / 256 }

// appendLogEntries appends cells as cell_activity_log.cells has them.
func appendLogEntries(b []byte, cells []*pendingCell) []byte {
	var scratch [migrate.MaxRefLen]byte
	for _, c := range cells {
		ref := migrate.AppendRef(scratch[:0], &c.ref)
		b = binary.AppendUvarint(b, uint64(len(ref)))
		b = append(b, ref...)
		b = binary.AppendUvarint(b, uint64(c.calls))
	}
	return b
}

// foldedCell is a cell's calls over the batches one fold reads.
type foldedCell struct {
	ref   string
	since int64
	calls int64
}

// logEntry is one cell of a cell_activity_log row.
type logEntry struct {
	id    tiers.CellID
	ref   string
	calls int64
}

// decodeLogRow returns the entries of one cell_activity_log row, or an
// error if any of them cannot be read.
func decodeLogRow(b []byte) ([]logEntry, error) {
	var out []logEntry
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return nil, errors.New("truncated entry")
		}
		ref := string(b[k : k+int(n)])
		b = b[k+int(n):]
		calls, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, errors.New("truncated calls")
		}
		b = b[k:]
		r, err := migrate.DecodeRef(ref)
		if err != nil {
			return nil, err
		}
		out = append(out, logEntry{id: r.ID(), ref: ref, calls: int64(calls)})
	}
	return out, nil
}

// addFolded adds the entries of a row flushed at hour to cells.
func addFolded(cells map[tiers.CellID]*foldedCell, entries []logEntry, hour int64) {
	for _, e := range entries {
		if c, ok := cells[e.id]; ok {
			c.calls += e.calls
			c.since = min(c.since, hour)
		} else {
			cells[e.id] = &foldedCell{ref: e.ref, since: hour, calls: e.calls}
		}
	}
}

// logRowsPerFold is how many cell_activity_log rows one fold transaction
// takes.
const logRowsPerFold = 16

// FoldLog adds the batches flushed for part of a shard (db) to
// cell_activity and deletes them, a few per transaction, and returns how
// many cells it folded (a cell in the batches of two transactions counts
// twice). A transaction deletes its batches before it adds
// them: if another worker folded one of them meanwhile (the part's lease
// lapsed while this worker stalled), fewer rows go and the transaction
// rolls back, so each batch is counted once. A row that cannot be read is
// deleted with its transaction's and reported: left, it would hold back
// the part's later batches.
func FoldLog(ctx context.Context, db *sql.DB, part int) (int, error) {
	folded := 0
	var bad []error
	for {
		ids, cells, unreadable, err := readActivityLog(ctx, db, part)
		if err != nil || len(ids) == 0 {
			return folded, errors.Join(append(bad, err)...)
		}
		ok, err := foldBatches(ctx, db, ids, cells)
		if err != nil {
			return folded, errors.Join(append(bad, err)...)
		}
		if ok {
			folded += len(cells)
			bad = append(bad, unreadable...)
		}
	}
}

// readActivityLog reads the oldest rows of a part's log: their ids, their
// cells summed, and the errors of the rows it could not read (their ids
// are in ids, their cells are not).
func readActivityLog(ctx context.Context, db *sql.DB, part int) (ids []any, cells map[tiers.CellID]*foldedCell, unreadable []error, err error) {
	rows, err := db.QueryContext(ctx, "SELECT id, hour, cells FROM cell_activity_log WHERE part = ? ORDER BY id LIMIT ?", part, logRowsPerFold)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("activity log read: %w", err)
	}
	defer rows.Close()
	cells = map[tiers.CellID]*foldedCell{}
	for rows.Next() {
		var id, hour int64
		var b []byte
		if err := rows.Scan(&id, &hour, &b); err != nil {
			return nil, nil, nil, fmt.Errorf("activity log read: %w", err)
		}
		ids = append(ids, id)
		entries, err := decodeLogRow(b)
		if err != nil {
			unreadable = append(unreadable, fmt.Errorf("activity log row %d dropped: %w", id, err))
			continue
		}
		addFolded(cells, entries, hour)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("activity log read: %w", err)
	}
	return ids, cells, unreadable, nil
}

// foldBatches deletes the log rows ids and adds their cells to
// cell_activity in one transaction; false: another worker had deleted
// some of them, and nothing changed.
func foldBatches(ctx context.Context, db *sql.DB, ids []any, cells map[tiers.CellID]*foldedCell) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("activity fold: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, "DELETE FROM cell_activity_log WHERE id IN ("+
		strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")+")", ids...)
	if err != nil {
		return false, fmt.Errorf("activity fold: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		return false, err
	}
	keys := slices.SortedFunc(maps.Keys(cells), func(a, b tiers.CellID) int { return bytes.Compare(a[:], b[:]) })
	for chunk := range slices.Chunk(keys, 500) {
		args := make([]any, 0, 4*len(chunk))
		for _, k := range chunk {
			c := cells[k]
			args = append(args, k[:], c.ref, c.since, c.calls)
		}
		q := "INSERT INTO cell_activity (k, ref, since, calls) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", len(chunk)), ", ") +
			" ON DUPLICATE KEY UPDATE calls = calls + VALUES(calls)"
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return false, fmt.Errorf("activity fold: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("activity fold: %w", err)
	}
	return true, nil
}

// ShardOf is the shard, of shards, whose cell_activity holds r.
func ShardOf(r *tiers.Ref, shards int) int {
	key := r.ShardKey
	if key == 0 {
		key = tiers.ShardKeyOfIdentity(r.Identity)
	}
	return tiers.JumpShard(key, shards)
}

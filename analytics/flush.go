package analytics

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// writeAll is the hold of a flush that holds no minute back.
const writeAll int64 = math.MaxInt64

// flush moves the live aggregates to the pending rows, adds distinct users
// to Redis and writes every shard's pending rows, but for the day and curve
// figures of minutes from hold (Unix seconds; writeAll: none) on. final also
// persists every touched HyperLogLog (Close). pace (nil: flat out) spreads
// the work.
func (r *Recorder) flush(ctx context.Context, final bool, pace *pacer, hold int64) error {
	r.flushing.Lock()
	defer r.flushing.Unlock()
	start := time.Now()
	defer func() { r.met.flushSeconds.Observe(time.Since(start).Seconds()) }()

	r.swapLive(ctx, pace)

	var errs []error
	if err := r.pfaddPending(ctx, pace, final || hold == writeAll); err != nil {
		errs = append(errs, fmt.Errorf("redis PFADD: %w", err))
	}
	errs = append(errs, r.writeShards(ctx, pace, hold)...)
	now := r.clk.Now()
	if final || now.Sub(r.lastPersist) >= r.opt.PersistEvery {
		if err := r.persistHLL(ctx, final); err != nil {
			errs = append(errs, fmt.Errorf("persist HLL: %w", err))
		} else {
			r.lastPersist = now
		}
	}
	r.updateGauges()
	if len(errs) > 0 {
		r.met.flushErrors.Inc()
	} else {
		r.met.lastFlush.Set(float64(now.Unix()))
	}
	return errors.Join(errs...)
}

// swapLive empties the live maps into the shards' pending rows and the
// queue of distinct-user adds. Each live map moves under mu, so that a
// reader (who holds mu's read lock throughout) sees each call once: still
// live or already pending. Between maps mu is free and the flusher rests.
func (r *Recorder) swapLive(ctx context.Context, pace *pacer) {
	// Only the flusher changes what the shards hold: no lock to count.
	held := make([]int, len(r.shards))
	for i, s := range r.shards {
		for _, rs := range s.unwritten() {
			held[i] += rs.len()
		}
	}
	var lost liveLoss
	for i := range r.live.shards {
		l := &r.live.shards[i]
		r.mu.Lock()
		l.mu.Lock()
		if len(l.rows.keys) == 0 {
			l.mu.Unlock()
			r.mu.Unlock()
			continue
		}
		rows := r.live.take(i)
		l.mu.Unlock()
		r.fold(rows, held, &lost)
		r.mu.Unlock()
		r.live.putBack(i, rows)
		pace.rest(ctx)
	}
	// Sorted so that pfaddPending walks it in runs of one key; under mu,
	// because readers scan the queue.
	r.mu.Lock()
	slices.SortFunc(r.hllQueue, func(a, b userAdd) int { return cmp.Compare(a.group, b.group) })
	r.mu.Unlock()
	if lost.adds > 0 {
		r.met.droppedAdds.Add(float64(lost.adds))
	}
	if lost.calls > 0 {
		r.met.dropped.Add(float64(lost.calls))
		if now := time.Now(); now.Sub(r.lastDropLog) > time.Minute {
			r.lastDropLog = now
			r.log.Error("analytics: pending rows at QUOTA_ANALYTICS_BUFFER_MAX; calls dropped (MySQL unreachable?)",
				"dropped_calls", lost.calls, "max_rows", r.opt.MaxPendingRows)
		}
	}
}

// liveLoss counts what a fold dropped at the bounds: calls whose rows did
// not fit under MaxPendingRows, distinct-user adds past the queue's bound.
type liveLoss struct{ calls, adds int64 }

// fold adds one live map's counts to the shards' pending rows and the
// distinct-user queue (caller holds mu). held is the rows each shard holds.
func (r *Recorder) fold(rows liveRows, held []int, lost *liveLoss) {
	n := len(r.shards)
	for i, k := range rows.keys {
		c := rows.counts[i]
		// app and iface are substrings of the id: the pending rows keep
		// the id's one object alive, not the request's strings.
		app, iface, user := k.id.split()
		appHash := FNV1a64(app)
		si := int(appHash % uint64(n)) // ShardIndex
		p := r.shards[si].pending
		day := Day(floorDiv(k.min, 86400))
		dk := dailyKey{app: app, iface: iface, day: day}
		// One probe finds the day's row, its minutes and its app's user
		// rows: this map holds a flush's worth of rows and every probe is
		// a cache miss.
		pd := p.daily[dk]
		grow := pd.newRows(k.min)
		if user != "" {
			grow++ // a user row is appended, never looked up
		}
		if grow > 0 && held[si]+grow > r.opt.MaxPendingRows {
			lost.calls += c.Calls
			continue
		}
		held[si] += grow
		d := p.ifaceDay(dk, pd)
		p.add(d, k.min, c)
		if user == "" {
			continue
		}
		p.addUser(d.users, newUserRow(userKey{id: k.id, day: day}, c))
		if len(r.hllQueue) >= r.opt.MaxPendingRows {
			lost.adds++
			continue
		}
		r.hllQueue = append(r.hllQueue, userAdd{group: groupOf(appHash, day, iface), id: k.id, day: day})
	}
}

// writeShards writes every shard's pending rows, the shards at once: a
// flush takes as long as its slowest shard, not their sum, and a shard that
// hangs until its timeout does not hold the others' rows back.
func (r *Recorder) writeShards(ctx context.Context, pace *pacer, hold int64) []error {
	errs := make([]error, len(r.shards))
	var wg sync.WaitGroup
	for i := range r.shards {
		wg.Add(1)
		shardPace := pace.share(len(r.shards))
		go func() {
			defer wg.Done()
			if err := r.writeShard(ctx, i, shardPace, hold); err != nil {
				errs[i] = fmt.Errorf("mysql shard %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

// writeShard resolves the shard's uncertain batches, then writes its pending
// rows but for the day and curve figures of minutes from hold on in one
// transaction, resting between statements as pace says.
func (r *Recorder) writeShard(ctx context.Context, i int, pace *pacer, hold int64) error {
	sh := r.shards[i]
	for len(sh.uncertain) > 0 {
		b := sh.uncertain[0]
		var one int
		err := sh.db.QueryRowContext(ctx, "SELECT 1 FROM analytics_batches WHERE batch_id = ?", b.id[:]).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("look up batch: %w", err)
		}
		r.mu.Lock()
		sh.uncertain = sh.uncertain[1:]
		if errors.Is(err, sql.ErrNoRows) {
			sh.pending.merge(b.rows) // never committed: write it again
		}
		r.mu.Unlock()
	}
	p := r.holdOpen(sh, hold)
	if p.len() == 0 {
		r.mu.Lock()
		r.afterWrite(sh, p)
		r.mu.Unlock()
		return nil
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	tx, err := sh.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	written, err := r.writeRows(ctx, tx, p, id, pace)
	if err == nil {
		_, err = tx.ExecContext(ctx, "INSERT INTO analytics_batches (batch_id) VALUES (?)", id[:])
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	r.mu.Lock()
	err = tx.Commit()
	if err != nil {
		// The COMMIT may or may not have happened: the next flush looks
		// the batch id up before writing these rows again.
		sh.uncertain = append(sh.uncertain, &batch{id: id, rows: p})
	}
	r.afterWrite(sh, p)
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for table, n := range written {
		r.met.rowsWritten.WithLabelValues(table).Add(float64(n))
	}
	return nil
}

// holdOpen returns the shard's rows to write: pending, whose minutes from
// hold on it moves to sh.open (with what a failed write left there before:
// a minute held then and over now is written this time).
func (r *Recorder) holdOpen(sh *dbShard, hold int64) *rowset {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := sh.pending
	if sh.open != nil {
		p.merge(sh.open)
		sh.open = nil
	}
	if hold != writeAll {
		sh.open = p.splitFrom(hold)
	}
	return p
}

// afterWrite replaces the shard's pending rows, written (or to be looked
// up by batch id), with the minutes held back from them, or, if none were
// held, with an empty rowset that has room for as many rows as written
// held; an empty written stays (caller holds r.mu).
func (r *Recorder) afterWrite(sh *dbShard, written *rowset) {
	switch {
	case sh.open != nil:
		sh.pending, sh.open = sh.open, nil
	case written.len() > 0:
		sh.pending = written.next()
	}
}

// columns of the tables the flush upserts, in INSERT order.
const (
	seriesCols = "app_id, res, t, interface_id, calls, allowed, denied"
	dailyCols  = "app_id, day, interface_id, calls, allowed, denied"
	addCounts  = " ON DUPLICATE KEY UPDATE calls = calls + VALUES(calls), allowed = allowed + VALUES(allowed), denied = denied + VALUES(denied)"
)

// chunkTable is a table of per-user chunks: today's, with each chunk's
// batch and level, or the finished days' sealed ones (userseal.go).
type chunkTable struct {
	name, cols string
	sealed     bool
}

var (
	todayChunks  = chunkTable{name: "usage_user_chunks", cols: "day, app_id, part, batch_id, seq, level, entries, body"}
	sealedChunks = chunkTable{name: "usage_user_sealed", cols: "day, app_id, part, seq, entries, body", sealed: true}
)

func (t chunkTable) ncols() int { return strings.Count(t.cols, ",") + 1 }

func (t chunkTable) appendRow(args []any, day string, c *userChunk, batchID []byte) []any {
	if t.sealed {
		return append(args, day, c.app, c.part, c.seq, c.entries, c.body)
	}
	return append(args, day, c.app, c.part, batchID, c.seq, c.level, c.entries, c.body)
}

func (r *Recorder) writeRows(ctx context.Context, tx *sql.Tx, p *rowset, batchID [16]byte, pace *pacer) (map[string]int, error) {
	written := map[string]int{}
	// Rows go in primary-key order (here, and rowset.userChunks for the
	// user rows): concurrent writers (other quotad instances) lock them in the
	// same order and do not deadlock, and each B-tree page is visited once.
	daily := p.dailyRows()
	series := seriesRows(daily)
	err := r.insert(ctx, tx, pace, "usage_series", seriesCols, 7, len(series), func(args []any, i int) []any {
		s := &series[i]
		return append(args, s.app, int64(Res1m), s.t, s.iface, s.Calls, s.Allowed, s.Denied)
	})
	if err != nil {
		return nil, err
	}
	written["usage_series"] = len(series)
	var days dayStrings
	err = r.insert(ctx, tx, pace, "usage_daily", dailyCols, 6, len(daily), func(args []any, i int) []any {
		d := &daily[i]
		return append(args, d.app, days.of(d.day), d.iface, d.Calls, d.Allowed, d.Denied)
	})
	if err != nil {
		return nil, err
	}
	written["usage_daily"] = len(daily)
	chunks := p.userChunks(&r.mu, chunkMaxRaw)
	if err := r.insertChunks(ctx, tx, pace, todayChunks, batchID, chunks); err != nil {
		return nil, err
	}
	written["usage_user_chunks"] = len(chunks)
	return written, nil
}

// chunkStatementBytes bounds the chunk bodies of one INSERT (its execute
// packet must stay below max_allowed_packet, 16 MiB by default).
const chunkStatementBytes = 4 << 20

// insertChunks writes chunks into table in statements of at most
// RowsPerStatement chunks and chunkStatementBytes of bodies; batchID is
// their batch's (not written to the sealed table).
func (r *Recorder) insertChunks(ctx context.Context, tx *sql.Tx, pace *pacer, table chunkTable, batchID [16]byte, chunks []userChunk) error {
	var days dayStrings
	stmts := chunkStatements{table: table}
	defer stmts.close()
	args := make([]any, 0, table.ncols()*min(len(chunks), r.opt.RowsPerStatement))
	for lo := 0; lo < len(chunks); {
		hi, size := lo, 0
		args = args[:0]
		for hi < len(chunks) && hi-lo < r.opt.RowsPerStatement && (hi == lo || size+len(chunks[hi].body) <= chunkStatementBytes) {
			c := &chunks[hi]
			args = table.appendRow(args, days.of(c.day), c, batchID[:])
			size += len(c.body)
			hi++
		}
		r.met.statements.WithLabelValues(table.name).Inc()
		if err := stmts.exec(ctx, tx, hi-lo, args); err != nil {
			return fmt.Errorf("%s: %w", table.name, err)
		}
		pace.rest(ctx)
		lo = hi
	}
	return nil
}

// chunkStatements are the prepared INSERTs into a chunk table of one
// transaction, by their rows. The bodies go as binary parameters: sent in
// an interpolated statement, each body byte was escaped here and unescaped
// by MariaDB's lexer, 7 % of MariaDB's perf samples in
// BenchmarkFlushServerCPU and 18 % in BenchmarkMergeUserChunks. A flush's
// statements but its last have the same rows, so it prepares two.
type chunkStatements struct {
	table  chunkTable
	byRows map[int]*sql.Stmt
}

func (s *chunkStatements) exec(ctx context.Context, tx *sql.Tx, rows int, args []any) error {
	if s.byRows == nil {
		s.byRows = map[int]*sql.Stmt{}
	}
	stmt := s.byRows[rows]
	if stmt == nil {
		var err error
		if stmt, err = tx.PrepareContext(ctx, valuesSQL(s.table.name, s.table.cols, s.table.ncols(), rows, "")); err != nil {
			return err
		}
		s.byRows[rows] = stmt
	}
	_, err := stmt.ExecContext(ctx, args...)
	return err
}

func (s *chunkStatements) close() {
	for _, stmt := range s.byRows {
		stmt.Close()
	}
}

// dayStrings formats days as MySQL DATE text, remembering the last one (a
// flush's rows are nearly all of one day).
type dayStrings struct {
	day Day
	s   string
}

func (d *dayStrings) of(day Day) string {
	if d.s == "" || d.day != day {
		d.day, d.s = day, day.String()
	}
	return d.s
}

// insert writes n rows in statements of at most RowsPerStatement rows,
// resting after each as pace says; the full-size statement is prepared once
// per transaction.
func (r *Recorder) insert(ctx context.Context, tx *sql.Tx, pace *pacer, table, cols string, ncols, n int, row func(args []any, i int) []any) error {
	if n == 0 {
		return nil
	}
	per := r.opt.RowsPerStatement
	var full *sql.Stmt
	defer func() {
		if full != nil {
			full.Close()
		}
	}()
	args := make([]any, 0, min(per, n)*ncols)
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		args = args[:0]
		for i := lo; i < hi; i++ {
			args = row(args, i)
		}
		var err error
		r.met.statements.WithLabelValues(table).Inc()
		if hi-lo == per {
			if full == nil {
				if full, err = tx.PrepareContext(ctx, insertSQL(table, cols, ncols, per)); err != nil {
					return fmt.Errorf("%s: %w", table, err)
				}
			}
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, insertSQL(table, cols, ncols, hi-lo), args...)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", table, err)
		}
		pace.rest(ctx)
	}
	return nil
}

func insertSQL(table, cols string, ncols, rows int) string {
	return valuesSQL(table, cols, ncols, rows, addCounts)
}

// valuesSQL is "INSERT INTO table (cols) VALUES (?,…),… suffix" for rows
// rows of ncols placeholders.
func valuesSQL(table, cols string, ncols, rows int, suffix string) string {
	var b strings.Builder
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", ncols), ",") + ")"
	b.Grow(len(table) + len(cols) + rows*(len(tuple)+1) + len(suffix) + 32)
	b.WriteString("INSERT INTO ")
	b.WriteString(table)
	b.WriteString(" (")
	b.WriteString(cols)
	b.WriteString(") VALUES ")
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tuple)
	}
	b.WriteString(suffix)
	return b.String()
}

func (r *Recorder) updateGauges() {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, s := range r.shards {
		for _, rs := range s.unwritten() {
			n += rs.len()
		}
	}
	r.met.pendingRows.Set(float64(n))
	// An add waiting for its app-level key waits for its interface-level
	// one too.
	r.met.pendingAdds.WithLabelValues("app").Set(float64(len(r.hllQueue)))
	r.met.pendingAdds.WithLabelValues("interface").Set(float64(len(r.hllQueue) + len(r.ifaceQueue.adds)))
}

package analytics

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
	"github.com/quota-platform/quota/clock"
)

// Flusher moves the Recorder's counts into per-shard rows (rows.go) and
// writes them: the day and curve figures as upserts, the per-user figures
// through userdays.Store, the distinct users through uniques.
type Flusher struct {
	opt   Options
	clk   clock.Clock
	log   *slog.Logger
	met   *collectors
	rec   *Recorder
	uniq  *uniques
	users *userdays.Store

	// mu orders readers (Stats, in readRows) against the flusher's moves
	// of rows from the Recorder to the shards and from the shards to
	// MySQL, so that a reader sees each call exactly once. Only the flusher
	// (holding flushing) writes shards, with mu held.
	mu       sync.RWMutex
	flushing sync.Mutex
	// shards are each MySQL shard's rows not yet written.
	shards      []*dbShard
	adds        []userAdd // a fold's distinct-user adds, for uniques (the flusher's alone)
	lastDropLog time.Time

	runOnce  sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

type dbShard struct {
	db      *sql.DB
	pending *rowset // rows certainly not in MySQL
	// open is the day and curve figures of the minute in progress, held
	// back while a periodic flush writes pending (Options.HoldOpenMinute).
	open      *rowset
	uncertain []*batch // rows whose COMMIT answer was lost
}

// unwritten is every rowset of the shard not known to be in MySQL (caller
// holds the Flusher's mu).
func (sh *dbShard) unwritten() []*rowset {
	out := make([]*rowset, 0, 2+len(sh.uncertain))
	out = append(out, sh.pending)
	if sh.open != nil {
		out = append(out, sh.open)
	}
	for _, b := range sh.uncertain {
		out = append(out, b.rows)
	}
	return out
}

type batch struct {
	id   [16]byte
	rows *rowset
}

func newFlusher(o Options, dbs usage.Shards, rec *Recorder, uniq *uniques, users *userdays.Store, met *collectors) *Flusher {
	f := &Flusher{opt: o, clk: o.Clock, log: o.Log, met: met, rec: rec, uniq: uniq, users: users,
		stop: make(chan struct{}), done: make(chan struct{})}
	for _, db := range dbs {
		f.shards = append(f.shards, &dbShard{db: db, pending: newRowset()})
	}
	met.lastFlush.Set(float64(f.clk.Now().Unix()))
	return f
}

// Run flushes every FlushEvery until ctx is done or Close is called.
func (f *Flusher) Run(ctx context.Context) {
	started := false
	f.runOnce.Do(func() { started = true })
	if !started {
		return
	}
	defer close(f.done)
	t := time.NewTicker(f.opt.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.stop:
			return
		case <-t.C:
		}
		fctx, cancel := context.WithTimeout(ctx, max(f.opt.FlushEvery, 30*time.Second))
		pace := usage.NewPacer(f.opt.FlushDuty, time.Now().Add(f.opt.FlushEvery/2), f.stop)
		if err := f.flush(fctx, false, pace, f.periodicHold()); err != nil {
			f.log.Warn("analytics flush failed; rows kept for the next flush", "err", err)
		}
		cancel()
	}
}

// periodicHold is the hold of one of Run's flushes: the minute in
// progress with Options.HoldOpenMinute, else none.
func (f *Flusher) periodicHold() int64 {
	if !f.opt.HoldOpenMinute {
		return writeAll
	}
	return Res1m.Floor(f.clk.Now().Unix())
}

// Close stops Run and flushes what is pending, persisting the distinct-user
// registers of every key touched. Calls recorded after Close has returned are
// kept in memory only.
func (f *Flusher) Close(ctx context.Context) error {
	f.stopOnce.Do(func() { close(f.stop) })
	f.runOnce.Do(func() { close(f.done) }) // Run never started
	select {
	case <-f.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return f.flush(ctx, true, nil, writeAll)
}

// Flush writes every pending aggregate now, flat out (Run paces its own).
func (f *Flusher) Flush(ctx context.Context) error { return f.flush(ctx, false, nil, writeAll) }

// readRows runs fn while no flush moves rows: what fn reads of MySQL and
// of memory holds each call exactly once.
func (f *Flusher) readRows(fn func() error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return fn()
}

// unwritten are the rows of app's shard not known to be in MySQL (caller
// in readRows).
func (f *Flusher) unwritten(app string) []*rowset {
	return f.shards[usage.ShardIndex(app, len(f.shards))].unwritten()
}

// unwrittenApps adds to set the apps of the rows not known to be in MySQL.
func (f *Flusher) unwrittenApps(set map[string]struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, sh := range f.shards {
		for _, rs := range sh.unwritten() {
			for k := range rs.daily {
				set[k.app] = struct{}{}
			}
		}
	}
}

// writeAll is the hold of a flush that holds no minute back.
const writeAll int64 = math.MaxInt64

// flush moves the Recorder's counts to the pending rows, adds distinct users
// to Redis and writes every shard's pending rows but the day and curve
// figures of minutes from hold on (writeAll: none). final also persists
// every touched HyperLogLog (Close). pace (nil: flat out) spreads the work.
func (f *Flusher) flush(ctx context.Context, final bool, pace *usage.Pacer, hold int64) error {
	f.flushing.Lock()
	defer f.flushing.Unlock()
	start := time.Now()
	defer func() { f.met.flushSeconds.Observe(time.Since(start).Seconds()) }()

	f.swapLive(ctx, pace)

	var errs []error
	if err := f.uniq.send(ctx, pace, final || hold == writeAll); err != nil {
		errs = append(errs, fmt.Errorf("redis PFADD: %w", err))
	}
	errs = append(errs, f.writeShards(ctx, pace, hold)...)
	if err := f.uniq.persist(ctx, final, true); err != nil {
		errs = append(errs, fmt.Errorf("persist HLL: %w", err))
	}
	f.updateGauges()
	if len(errs) > 0 {
		f.met.flushErrors.Inc()
	} else {
		f.met.lastFlush.Set(float64(f.clk.Now().Unix()))
	}
	return errors.Join(errs...)
}

// swapLive empties the Recorder's maps into the shards' pending rows and
// hands their users to uniques, each map under mu (a reader sees each call
// once: still in the Recorder or already pending), resting between maps.
func (f *Flusher) swapLive(ctx context.Context, pace *usage.Pacer) {
	// Only the flusher changes what the shards hold: no lock to count.
	held := make([]int, len(f.shards))
	for i, s := range f.shards {
		for _, rs := range s.unwritten() {
			held[i] += rs.len()
		}
	}
	var lost int64
	for i := range f.rec.shards {
		l := &f.rec.shards[i]
		f.mu.Lock()
		l.mu.Lock()
		if len(l.rows.keys) == 0 {
			l.mu.Unlock()
			f.mu.Unlock()
			continue
		}
		rows := f.rec.take(i)
		l.mu.Unlock()
		f.adds = f.fold(rows, held, &lost, f.adds[:0])
		f.uniq.enqueue(f.adds)
		f.mu.Unlock()
		clear(f.adds) // no row ids kept alive
		f.rec.putBack(i, rows)
		pace.Rest(ctx)
	}
	if lost > 0 {
		f.met.dropped.Add(float64(lost))
		if now := time.Now(); now.Sub(f.lastDropLog) > time.Minute {
			f.lastDropLog = now
			f.log.Error("analytics: pending rows at QUOTA_ANALYTICS_BUFFER_MAX; calls dropped (MySQL unreachable?)",
				"dropped_calls", lost, "max_rows", f.opt.MaxPendingRows)
		}
	}
}

// fold adds one of the Recorder's maps to the shards' pending rows and
// appends the users of the rows that fit to adds (caller holds mu). held
// is the rows each shard holds; lost counts the calls that did not fit.
func (f *Flusher) fold(rows liveRows, held []int, lost *int64, adds []userAdd) []userAdd {
	n := len(f.shards)
	for i, k := range rows.keys {
		c := rows.counts[i]
		app, iface, user := k.id.Split()
		appHash := usage.FNV1a64(app)
		si := int(appHash % uint64(n)) // ShardIndex
		p := f.shards[si].pending
		day := Days{Loc: f.opt.Location}.OfUnix(k.min)
		dk := dailyKey{app: app, iface: iface, day: day}
		// One probe finds the day's row, its minutes and its app's user rows.
		pd := p.daily[dk]
		grow := pd.newRows(k.min)
		if user != "" {
			grow++ // a user row is appended, never looked up
		}
		if grow > 0 && held[si]+grow > f.opt.MaxPendingRows {
			*lost += c.Calls
			continue
		}
		held[si] += grow
		d := p.ifaceDay(dk, pd)
		p.add(d, k.min, c)
		if user == "" {
			continue
		}
		p.addUser(d.users, userdays.NewRow(userdays.Key{ID: k.id, Day: day}, c))
		adds = append(adds, userAdd{group: groupOf(appHash, day, iface), id: k.id, day: day})
	}
	return adds
}

// writeShards writes every shard's pending rows, the shards at once, so a
// shard that hangs does not hold the others back.
func (f *Flusher) writeShards(ctx context.Context, pace *usage.Pacer, hold int64) []error {
	errs := make([]error, len(f.shards))
	var wg sync.WaitGroup
	for i := range f.shards {
		wg.Add(1)
		shardPace := pace.Share(len(f.shards))
		go func() {
			defer wg.Done()
			if err := f.writeShard(ctx, i, shardPace, hold); err != nil {
				errs[i] = fmt.Errorf("mysql shard %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

// writeShard resolves the shard's uncertain batches, then writes its
// pending rows (but the held minutes) in one transaction.
func (f *Flusher) writeShard(ctx context.Context, i int, pace *usage.Pacer, hold int64) error {
	sh := f.shards[i]
	for len(sh.uncertain) > 0 {
		b := sh.uncertain[0]
		var one int
		err := sh.db.QueryRowContext(ctx, "SELECT 1 FROM analytics_batches WHERE batch_id = ?", b.id[:]).Scan(&one)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("look up batch: %w", err)
		}
		f.mu.Lock()
		sh.uncertain = sh.uncertain[1:]
		if errors.Is(err, sql.ErrNoRows) {
			sh.pending.merge(b.rows) // never committed: write it again
		}
		f.mu.Unlock()
	}
	p := f.holdOpen(sh, hold)
	if p.len() == 0 {
		f.mu.Lock()
		f.afterWrite(sh, p)
		f.mu.Unlock()
		return nil
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	tx, err := sh.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	written, err := f.writeRows(ctx, tx, p, id, pace)
	if err == nil {
		if _, err = tx.ExecContext(ctx, "INSERT INTO analytics_batches (batch_id) VALUES (?)", id[:]); err != nil {
			err = fmt.Errorf("analytics_batches: %w", err)
		}
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	f.mu.Lock()
	err = tx.Commit()
	if err != nil {
		// The COMMIT may or may not have happened: the next flush looks
		// the batch id up before writing these rows again.
		sh.uncertain = append(sh.uncertain, &batch{id: id, rows: p})
	}
	f.afterWrite(sh, p)
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for table, n := range written {
		f.met.rowsWritten.WithLabelValues(table).Add(float64(n))
	}
	return nil
}

// holdOpen returns the shard's rows to write: pending, with what a failed
// write left in sh.open, less the minutes from hold on, which go to
// sh.open.
func (f *Flusher) holdOpen(sh *dbShard, hold int64) *rowset {
	f.mu.Lock()
	defer f.mu.Unlock()
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
// up by batch id), with the minutes held back from them, or else an empty
// rowset (caller holds f.mu).
func (f *Flusher) afterWrite(sh *dbShard, written *rowset) {
	switch {
	case sh.open != nil:
		sh.pending, sh.open = sh.open, nil
	case written.len() > 0:
		sh.pending = written.next()
	}
}

// addCounts makes an INSERT of counts add them to the row already there.
const addCounts = " ON DUPLICATE KEY UPDATE calls = calls + VALUES(calls), allowed = allowed + VALUES(allowed), denied = denied + VALUES(denied)"

// The tables the flush upserts, their columns in INSERT order.
var (
	seriesTable = usage.InsertTable{Name: "usage_series", Cols: "app_id, res, t, interface_id, calls, allowed, denied", Suffix: addCounts}
	dailyTable  = usage.InsertTable{Name: "usage_daily", Cols: "app_id, day, interface_id, calls, allowed, denied", Suffix: addCounts}
)

// writeRows writes p's rows in tx and returns the rows written by table.
func (f *Flusher) writeRows(ctx context.Context, tx *sql.Tx, p *rowset, batchID [16]byte, pace *usage.Pacer) (map[string]int, error) {
	written := map[string]int{}
	// Rows go in primary-key order: concurrent writers (other quotads) lock
	// them in the same order and do not deadlock.
	daily := p.dailyRows()
	series := seriesRows(daily)
	err := usage.InsertRows(ctx, tx, pace, f.met.statements, f.opt.RowsPerStatement, seriesTable, len(series), nil, func(args []any, i int) []any {
		s := &series[i]
		return append(args, s.app, int64(Res1m), s.t, s.iface, s.Calls, s.Allowed, s.Denied)
	})
	if err != nil {
		return nil, err
	}
	written[seriesTable.Name] = len(series)
	// Kept: a Day.String() a row costs 1.5 % (BenchmarkRecordAndPeriodicFlush, GOGC=off) of a 1.1× budget.
	day, dayText := Day(0), ""
	err = usage.InsertRows(ctx, tx, pace, f.met.statements, f.opt.RowsPerStatement, dailyTable, len(daily), nil, func(args []any, i int) []any {
		d := &daily[i]
		if dayText == "" || d.day != day {
			day, dayText = d.day, d.day.String()
		}
		return append(args, d.app, dayText, d.iface, d.Calls, d.Allowed, d.Denied)
	})
	if err != nil {
		return nil, err
	}
	written[dailyTable.Name] = len(daily)
	// Each group is sorted under mu: readers range over its rows.
	n, err := f.users.Write(ctx, tx, pace, p.userGroups(), func(g *userdays.Group) {
		f.mu.Lock()
		p.sortGroup(g)
		f.mu.Unlock()
	}, batchID)
	if err != nil {
		return nil, err
	}
	written[userdays.ChunksTable] = n
	return written, nil
}

func (f *Flusher) updateGauges() {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for _, s := range f.shards {
		for _, rs := range s.unwritten() {
			n += rs.len()
		}
	}
	f.met.pendingRows.Set(float64(n))
	f.uniq.updateGauges()
}

// Package worker is the migration worker: it decides what moves between
// tiers and has migrate's Mover move it: the fleet's scheduled cycles
// (cycle.go), promotions of cells called again, Repair every second, and
// the cold filters' rebuild and compaction, each a job of migrate/jobs.
package worker

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/robfig/cron/v3"
	"golang.org/x/time/rate"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/tick"
	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/migrate/jobs"
	"github.com/quota-platform/quota/schedule"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// Config is the migration policy.
type Config struct {
	Schedule string // cron spec of the scheduled cycle (in Location), e.g. "@daily"
	// Location is the time zone of Schedule (QUOTA_TIMEZONE); nil: UTC.
	Location      *time.Location
	HotThreshold  float64 // mean calls per hour at or above which a cell is hot
	ColdThreshold float64 // mean calls per hour below which a cell is cold
	// On call: a warm cell whose mean interval between its last 50 calls
	// is at most PromoteInterval moves to hot at once (a cold one to warm);
	// a warm cell whose mean interval is at least DemoteInterval moves to
	// cold. 0 disables either.
	PromoteInterval time.Duration
	DemoteInterval  time.Duration
	BatchSize       int // cells per scan chunk and move batch; 0: 1000
	// RepairEvery is how often the worker looks for moves a crashed
	// worker left (their cells wait frozen until then, and their lease
	// has lapsed); 0: 1 s (one HGETALL of the journal).
	RepairEvery  time.Duration
	HorizonHours int // history kept per cell; 0: 168 (7 days)
	// PartLeaseTTL bounds how long a dead instance keeps a part of a cycle
	// from the others (the lease is renewed while the part runs); 0: 30 s.
	PartLeaseTTL time.Duration
	// PartWorkers is how many parts of a cycle an instance runs at once;
	// 0: 4.
	PartWorkers int
	// ActivityWait is how long an instance waits after joining a cycle
	// before its first part, so that every instance of the fleet (watching
	// for cycles, WatchCycles) has flushed its activity: a cell only one
	// other instance has seen since its last flush has no cell_activity row
	// yet, and a part scanned before that row lands would skip the cell.
	// 0: no wait (one instance).
	ActivityWait time.Duration
	// LogMaxRows bounds each part's cell_activity_log between cycles: a
	// part holding more rows is folded into cell_activity at once
	// (FoldLongLogs, looked at every LogCheckEvery). 0: the log is folded
	// by cycles only.
	LogMaxRows    int
	LogCheckEvery time.Duration // 0: 1 min
	// CellsPerSecond bounds the cells this instance's part workers scan a
	// second, together (each instance of a fleet has its own bound), so
	// that the checks it serves meanwhile keep their share of the CPU and
	// of Redis; 0: as fast as they go.
	CellsPerSecond float64
	// ProgressEvery is how often an instance publishes the progress of
	// the cycle parts it runs to the fleet (progress.go) and reads the
	// fleet's; 0: 500 ms.
	ProgressEvery time.Duration
}

// Worker runs migration cycles and on-call moves.
type Worker struct {
	Mover    *migrate.Mover
	Activity *activity.Activity // flushed before each cycle (may be nil)
	DBs      []*sql.DB          // the shards holding cell_activity
	Config   Config
	Now      func() time.Time
	Log      *slog.Logger
	// Name says which instance ran a part, in cycle reports (e.g. the
	// host and listen address).
	Name string
	// Jobs registers this instance's cycles, rebuilds and compactions and
	// their progress (nil: not kept).
	Jobs *jobs.Jobs

	cycle  sync.Mutex
	mu     sync.Mutex
	queued map[tiers.CellID]bool
	queue  chan onCall
}

type onCall struct {
	ref      tiers.Ref
	from, to tiers.Tier
}

// CycleReport is what one cycle did.
type CycleReport struct {
	Cycle    string         `json:"cycle"`              // the fleet's cycle this instance ran parts of
	Parts    int            `json:"parts"`              // parts done
	PartsBy  map[string]int `json:"parts_by,omitempty"` // parts done per instance (Worker.Name)
	Folded   int            `json:"folded"`             // cell entries of flushed activity added to cell_activity (activity.FoldLog)
	Scanned  int            `json:"scanned"`
	Moved    map[string]int `json:"moved"` // "hot>warm": cells
	Quiet    int            `json:"quiet"` // of Moved["hot>cold"], the cells moved by the quiet move (migrate/PROTOCOL.md)
	Idle     int            `json:"idle"`  // of Quiet, the idle cells
	Skipped  int            `json:"skipped"`
	Repaired int            `json:"repaired"`
	Failures int            `json:"failures"`
	Errors   []string       `json:"errors,omitempty"`
	Duration string         `json:"duration"`
	Job      string         `json:"job,omitempty"` // this instance's job (GET /v1/admin/jobs/{id})
}

func (w *Worker) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *Worker) repairEvery() time.Duration {
	if w.Config.RepairEvery > 0 {
		return w.Config.RepairEvery
	}
	return time.Second
}

func (w *Worker) batch() int {
	if w.Config.BatchSize > 0 {
		return w.Config.BatchSize
	}
	return 1000
}

// Target is the tier a cell with the given mean calls per hour belongs in.
func (c *Config) Target(perHour float64) tiers.Tier {
	switch {
	case perHour >= c.HotThreshold:
		return tiers.Hot
	case perHour < c.ColdThreshold:
		return tiers.Cold
	}
	return tiers.Warm
}

// RunCycle runs the fleet's migration cycle now: it joins the cycle
// another instance is running, or starts one, and works its parts until
// all are done (cycle.go). Each part scans its range of a shard's
// cell_activity in key order, batch by batch, moving each batch's cells
// whose tier differs from their target. The report covers every part,
// whoever ran it; Errors are this instance's.
func (w *Worker) RunCycle(ctx context.Context) (CycleReport, error) {
	return w.runCycle(ctx, "", w.Jobs.Start(jobs.KindMigrate, "api"))
}

// StartCycle runs RunCycle in the background, until it ends or ctx does,
// and returns its job at once; while this instance runs a cycle, it
// returns that cycle's job instead (a cycle asked for joins the one
// running).
func (w *Worker) StartCycle(ctx context.Context) *jobs.Job {
	if j := w.Jobs.Running(jobs.KindMigrate); j != nil {
		return j
	}
	job := w.Jobs.Start(jobs.KindMigrate, "api")
	job.SetTotal(len(w.DBs) * activity.PartsPerShard)
	go func() {
		rep, err := w.runCycle(ctx, "", job)
		w.log().Info("migration cycle", "job", job.ID(), "cycle", rep.Cycle, "parts", rep.Parts, "scanned", rep.Scanned, "moved", rep.Moved, "failures", rep.Failures, "duration", rep.Duration, "err", err)
	}()
	return job
}

// runCycle is RunCycle; want names the cycle to start when none is running
// ("": a new id); job is told its progress, and its end.
func (w *Worker) runCycle(ctx context.Context, want string, job *jobs.Job) (rep CycleReport, err error) {
	w.cycle.Lock()
	defer w.cycle.Unlock()
	start := time.Now()
	rep = CycleReport{Moved: map[string]int{}, Job: job.ID()}
	job.SetTotal(len(w.DBs) * activity.PartsPerShard)
	defer func() { job.End(rep, err, w.Jobs.Time()) }()
	var mu sync.Mutex
	var errs []error
	failures := 0 // outside the parts (theirs are in the done hash)
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		rep.Errors = append(rep.Errors, err.Error())
		errs = append(errs, err)
	}
	fail := func(err error) { note(err); failures++ }
	n, _, err := w.Mover.Repair(ctx)
	rep.Repaired = n
	if err != nil {
		fail(err)
	}
	if w.Activity != nil {
		if err := w.Activity.Flush(ctx); err != nil {
			fail(err)
		}
	}
	id, err := w.joinCycle(ctx, want)
	if err == nil {
		job.SetCycle(id)
		err = w.markCycleStart(ctx, id)
	}
	if err == nil && w.Config.ActivityWait > 0 {
		err = clock.Sleep(ctx, w.Config.ActivityWait)
	}
	if err == nil {
		hour := w.now().Unix() / 3600
		pace := w.pacer()
		run := func(ctx context.Context, p int) partReport {
			pr := partReport{Moved: map[string]int{}}
			pp := job.PartStarted(p)
			w.runPart(ctx, p, hour, pace, &pr, pp, func(err error) { pr.Failures++; note(err) })
			pr.Cells = int(pp.Cells.Load())
			job.PartEnded(p, ctx.Err() == nil)
			return pr
		}
		stopPublishing := w.publishWhileRunning(ctx, id, job)
		err = w.workParts(ctx, id, run)
		stopPublishing()
		if err != nil {
			fail(err)
		}
		err = w.fleetReport(ctx, id, &rep)
		if err == nil {
			w.markCycleEnd(context.WithoutCancel(ctx), id)
		}
		if fp, ferr := w.fleetProgress(context.WithoutCancel(ctx), id); ferr == nil {
			job.SetFleet(fp)
		}
	}
	if err != nil {
		fail(err)
	}
	rep.Failures += failures
	rep.Duration = time.Since(start).Round(time.Millisecond).String()
	err = errors.Join(errs...)
	w.Mover.Metrics.CycleDone(err, time.Now())
	return rep, err
}

// WatchCycles flushes the activity whenever a cycle this instance has not
// seen starts (the cycle key polled every interval), until ctx ends: the
// fleet's other instances then have their activity in cell_activity within
// about interval + one flush of a cycle's start, which is what
// Config.ActivityWait waits for.
func (w *Worker) WatchCycles(ctx context.Context, interval time.Duration) {
	if w.Activity == nil {
		return
	}
	last := ""
	tick.Every(ctx, interval, func() { last = w.flushOnNewCycle(ctx, last) })
}

// flushOnNewCycle is one poll of WatchCycles: it flushes the activity if
// the cycle key names a cycle other than last, and returns the cycle it
// names (last when none, or on an error reading it).
func (w *Worker) flushOnNewCycle(ctx context.Context, last string) string {
	id, err := w.Mover.RDB.Get(ctx, w.cycleKey()).Result()
	if err != nil || id == last {
		return last
	}
	if err := w.Activity.Flush(ctx); err != nil {
		w.log().Warn("migration activity flush at a cycle's start failed", "cycle", id, "err", err)
	}
	return id
}

// pacer bounds the cells a cycle's part workers scan (Config.
// CellsPerSecond), a batch at once; nil: no bound.
func (w *Worker) pacer() *rate.Limiter {
	if w.Config.CellsPerSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(w.Config.CellsPerSecond), w.batch())
}

// waitPace waits until pace (nil: none) lets n cells through, or ctx ends.
// Not rate.Limiter.WaitN, which fails at once, ctx still alive, when the
// wait would outlast ctx's deadline: a part that stops with ctx alive is
// recorded done, its cells left unscanned until the next cycle.
func waitPace(ctx context.Context, pace *rate.Limiter, n int) error {
	if pace == nil {
		return nil
	}
	r := pace.ReserveN(time.Now(), n) // n is at most the burst: a batch
	if err := clock.Sleep(ctx, r.Delay()); err != nil {
		r.Cancel()
		return err
	}
	return nil
}

// runPart folds part p's flushed activity into its shard's cell_activity,
// scans the part's range of cell_activity in key order, batch by batch,
// moves each batch's cells whose tier differs from their target (each
// batch waits for pace, if set), and rescales the history of rows older
// than the horizon.
func (w *Worker) runPart(ctx context.Context, p int, hour int64, pace *rate.Limiter, rep *partReport, pp *jobs.PartProgress, fail func(error)) {
	sh, lo, hi := partRange(p)
	if sh >= len(w.DBs) {
		return
	}
	db := w.DBs[sh]
	folded, err := activity.FoldLog(ctx, db, p%activity.PartsPerShard)
	rep.Folded += folded
	if err != nil {
		fail(fmt.Errorf("shard %d: %w", sh, err))
	}
	horizon := int64(w.Config.HorizonHours)
	if horizon <= 0 {
		horizon = 168
	}
	coldPerTag, cells, err := w.coldTargets(ctx, db, lo, hi, hour)
	if err != nil {
		fail(err)
	} else {
		pp.Cells.Store(int64(cells))
		pp.Counted.Store(true)
	}
	// The part holds about 1/parts of each tag's cells.
	parts := len(w.DBs) * activity.PartsPerShard
	capacity := func(t tiers.Tag) int { return coldPerTag[t] * parts }
	scan := "SELECT k, ref, since, calls FROM cell_activity WHERE k > ? ORDER BY k LIMIT ?"
	window := w.batch() * scanBatches
	args := func(after []byte) []any { return []any{after, window} }
	if hi != nil {
		scan = "SELECT k, ref, since, calls FROM cell_activity WHERE k > ? AND k < ? ORDER BY k LIMIT ?"
		args = func(after []byte) []any { return []any{after, hi, window} }
	}
	after := lo
	for ctx.Err() == nil {
		rows, err := db.QueryContext(ctx, scan, args(after)...)
		if err != nil {
			fail(fmt.Errorf("activity scan shard %d: %w", sh, err))
			return
		}
		var cells []scannedCell
		var last []byte
		old := false // a row past the horizon
		for rows.Next() {
			var k, ref []byte
			var since, calls int64
			if err := rows.Scan(&k, &ref, &since, &calls); err != nil {
				fail(err)
				break
			}
			last = k
			r, err := migrate.DecodeRef(string(ref))
			if err != nil {
				fail(err)
				continue
			}
			cells = append(cells, scannedCell{ref: r, to: w.Config.Target(float64(calls) / float64(max(hour-since, 1)))})
			old = old || hour-since > horizon
		}
		rows.Close()
		if len(last) == 0 {
			return
		}
		rep.Scanned += len(cells)
		sortByTag(cells)
		for batch := range slices.Chunk(cells, w.batch()) {
			if waitPace(ctx, pace, len(batch)) != nil {
				return // ctx is done: the part is not recorded done
			}
			before := movedOf(rep)
			w.moveBatch(ctx, batch, capacity, rep, fail)
			pp.Scanned.Add(int64(len(batch)))
			pp.Moved.Add(int64(movedOf(rep) - before))
		}
		// Bound the history: rows older than the horizon keep their mean.
		// Only a batch that read such a row has one to rescale (a row a
		// concurrent fold adds is of the log's recent hours; one past the
		// horizon would wait for the next cycle, and only steers tiers).
		if old {
			if _, err := db.ExecContext(ctx, "UPDATE cell_activity SET calls = calls * ? DIV GREATEST(? - since, 1), since = ? - ? WHERE k > ? AND k <= ? AND ? - since > ?",
				horizon, hour, hour, horizon, after, last, hour, horizon); err != nil {
				fail(fmt.Errorf("activity rescale shard %d: %w", sh, err))
			}
		}
		after = last
	}
}

// scanBatches is how many batches of cells a part reads from
// cell_activity at a time. They are moved sorted by tag, so that a batch's
// scripts visit fewer tags: each costs Redis a read of the tag's header
// and filter a call, whatever its cells in the call.
const scanBatches = 8

// scannedCell is a cell a part read from cell_activity, and the tier its
// calls an hour send it to (Config.Target).
type scannedCell struct {
	ref tiers.Ref
	to  tiers.Tier
}

// sortByTag sorts cells by tag, each tag's cells in scan order, by
// counting each tag's cells and then placing them, where a stable
// comparison sort moves the cells O(n log² n) times (BenchmarkSortByTag).
func sortByTag(cells []scannedCell) {
	at := map[tiers.Tag]int{}
	for i := range cells {
		at[cells[i].ref.Tag]++
	}
	n := 0
	for _, t := range slices.SortedFunc(maps.Keys(at), func(a, b tiers.Tag) int { return bytes.Compare(a[:], b[:]) }) {
		at[t], n = n, n+at[t]
	}
	for _, c := range slices.Clone(cells) {
		cells[at[c.ref.Tag]] = c
		at[c.ref.Tag]++
	}
}

// coldTargets counts, per directory tag, the cells of one part (keys from
// lo, before hi when set) whose target is cold: a first pass, so that the
// moves to cold size each tag's cold filter for what this cycle will add
// at once instead of growing it layer by layer as the cells of a tag come
// up in the scan (warm.Store.SwitchToCold). Cells already cold are
// counted too: the filter's own count tells them apart. MariaDB counts
// (one row a tag comes back): a cell's target is cold when its calls an
// hour are under ColdThreshold (Config.Target), i.e. calls < ColdThreshold
// × hours; its tag is bytes 17-19 of its ref (EncodeRef).
//
// The same pass counts the part's cells (the second value), what its
// progress is measured against (progress.go): the range is read once
// either way.
func (w *Worker) coldTargets(ctx context.Context, db *sql.DB, lo, hi []byte, hour int64) (map[tiers.Tag]int, int, error) {
	out := map[tiers.Tag]int{}
	q := "SELECT SUBSTRING(ref, 17, 3), CAST(SUM(calls < ? * GREATEST(? - since, 1)) AS SIGNED), COUNT(*) FROM cell_activity WHERE k >= ?"
	args := []any{w.Config.ColdThreshold, hour, lo}
	if hi != nil {
		q, args = q+" AND k < ?", append(args, hi)
	}
	q += " GROUP BY 1"
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return out, 0, fmt.Errorf("activity count: %w", err)
	}
	defer rows.Close()
	total := 0
	for rows.Next() {
		var tag []byte
		var n, all int
		if err := rows.Scan(&tag, &n, &all); err != nil {
			return out, total, fmt.Errorf("activity count: %w", err)
		}
		total += all
		var t tiers.Tag
		if len(tag) == len(t) && n > 0 {
			copy(t[:], tag)
			out[t] = n
		}
	}
	if err := rows.Err(); err != nil {
		return out, total, fmt.Errorf("activity count: %w", err)
	}
	return out, total, nil
}

// movedOf is the cells a part has moved so far, every direction.
func movedOf(rep *partReport) int {
	n := 0
	for _, m := range rep.Moved {
		n += m
	}
	return n
}

func (w *Worker) moveBatch(ctx context.Context, cells []scannedCell, capacity func(tiers.Tag) int, rep *partReport, fail func(error)) {
	refs := make([]tiers.Ref, len(cells))
	toCold := make([]bool, len(cells))
	for i := range cells {
		refs[i], toCold[i] = cells[i].ref, cells[i].to == tiers.Cold
	}
	cur, states, err := w.Mover.StatesOf(ctx, refs, toCold)
	if err != nil {
		fail(err)
		return
	}
	type dir struct{ from, to tiers.Tier }
	type group struct {
		refs   []tiers.Ref
		states []hot.State
	}
	groups := map[dir]*group{}
	var order []dir
	for i := range refs {
		to := cells[i].to
		if cur[i] == "" || cur[i] == to {
			continue
		}
		d := dir{cur[i], to}
		g, ok := groups[d]
		if !ok {
			g = &group{}
			groups[d] = g
			order = append(order, d)
		}
		g.refs = append(g.refs, refs[i])
		g.states = append(g.states, states[i])
	}
	for _, d := range order {
		g := groups[d]
		res, err := w.Mover.MoveCellsPlanned(ctx, g.refs, d.from, d.to, migrate.Plan{Capacity: capacity, States: g.states})
		if err != nil {
			fail(err)
		}
		rep.Moved[string(d.from)+">"+string(d.to)] += len(res.Moved)
		rep.Quiet += res.Quiet
		rep.Idle += res.Idle
		rep.Skipped += res.Skipped
	}
}

// Observe is the router's on-call hook (routing.Router.Observe): it queues a
// move, never blocking the check, when a warm cell's mean interval crosses
// a threshold or a cold cell's drops to the promote interval, by the record
// the router hands over (none: nothing to decide on).
func (w *Worker) Observe(tier tiers.Tier, ref tiers.Ref, rec *tiers.Record) {
	if rec == nil {
		return
	}
	c := onCall{ref: ref, from: tier}
	switch tier {
	case tiers.Warm:
		if rec.Samples < 3 {
			return
		}
		iv := time.Duration(rec.MeanInterval) * time.Second
		switch {
		case w.Config.PromoteInterval > 0 && iv <= w.Config.PromoteInterval:
			c.to = tiers.Hot
		case w.Config.DemoteInterval > 0 && iv >= w.Config.DemoteInterval:
			c.to = tiers.Cold
		default:
			return
		}
	case tiers.Cold:
		if w.Config.PromoteInterval <= 0 || !w.coldPromotes(rec) {
			return
		}
		c.to = tiers.Warm
	default:
		return
	}
	id := ref.ID()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queue == nil || w.queued[id] {
		return
	}
	select {
	case w.queue <- c:
		w.queued[id] = true
	default: // full: the scheduled cycle will see the cell
	}
}

// Start runs the scheduled cycle on Config.Schedule and the on-call mover
// until Stop. It returns an error for a bad schedule.
func (w *Worker) Start(ctx context.Context) (stop func(), err error) {
	sched, err := cron.ParseStandard(w.Config.Schedule)
	if err != nil {
		return nil, fmt.Errorf("migration schedule %q: %w", w.Config.Schedule, err)
	}
	w.mu.Lock()
	w.queue = make(chan onCall, 10_000)
	w.queued = map[tiers.CellID]bool{}
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	c := schedule.New(w.log(), w.Config.Location)
	c.Schedule(sched, cron.FuncJob(func() {
		// Every instance's cron fires in the same minute: the minute names
		// the fleet's cycle, so it runs once (cycle.go).
		fire := w.now().UTC().Truncate(time.Minute)
		rep, err := w.runCycle(ctx, "sched-"+strconv.FormatInt(fire.Unix(), 10), w.Jobs.Start(jobs.KindMigrate, "schedule"))
		w.log().Info("migration cycle", "cycle", rep.Cycle, "parts", rep.Parts, "parts_by", rep.PartsBy, "folded", rep.Folded, "scanned", rep.Scanned, "moved", rep.Moved, "skipped", rep.Skipped, "repaired", rep.Repaired, "failures", rep.Failures, "duration", rep.Duration, "err", err)
	}))
	c.Start()
	var loops sync.WaitGroup
	loops.Go(func() { w.onCallLoop(ctx) })
	// A crashed worker's cells stay frozen (checks on them wait, then
	// fail over to the fail mode) until a repair: look every RepairEvery.
	loops.Go(func() {
		tick.Every(ctx, w.repairEvery(), func() {
			if n, _, err := w.Mover.Repair(ctx); err != nil || n > 0 {
				w.log().Info("migration repair", "repaired", n, "err", err)
			}
		})
	})
	if w.Config.LogMaxRows > 0 {
		loops.Go(func() {
			tick.Every(ctx, w.logCheckEvery(), func() {
				if n, err := w.FoldLongLogs(ctx); err != nil || n > 0 {
					w.log().Info("migration activity log folded between cycles", "folded", n, "err", err)
				}
			})
		})
	}
	return func() {
		cancel()
		<-c.Stop().Done()
		loops.Wait()
	}, nil
}

func (w *Worker) log() *slog.Logger {
	if w.Log != nil {
		return w.Log
	}
	return slog.Default()
}

// onCallLoop moves queued cells in batches of what has queued up.
func (w *Worker) onCallLoop(ctx context.Context) {
	for {
		var batch []onCall
		select {
		case <-ctx.Done():
			return
		case c := <-w.queue:
			batch = append(batch, c)
		}
	drain:
		for len(batch) < w.batch() {
			select {
			case c := <-w.queue:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		w.runOnCall(ctx, batch)
		w.mu.Lock()
		for _, c := range batch {
			delete(w.queued, c.ref.ID())
		}
		w.mu.Unlock()
	}
}

func (w *Worker) runOnCall(ctx context.Context, batch []onCall) {
	type dir struct{ from, to tiers.Tier }
	groups := map[dir][]tiers.Ref{}
	for _, c := range batch {
		groups[dir{c.from, c.to}] = append(groups[dir{c.from, c.to}], c.ref)
	}
	for d, refs := range groups {
		if _, err := w.Mover.MoveCells(ctx, refs, d.from, d.to); err != nil {
			w.log().Warn("on-call migration", "from", d.from, "to", d.to, "cells", len(refs), "err", err)
		}
	}
}

// coldPromotes reports whether a cold cell's record says it is called often
// enough to go warm at once.
func (w *Worker) coldPromotes(rec *tiers.Record) bool {
	return rec.Samples >= 3 && time.Duration(rec.MeanInterval)*time.Second <= w.Config.PromoteInterval
}

// Admin adapts a Worker to the admin endpoints (api.TiersAdmin).
type Admin struct{ W *Worker }

// TierStats returns Mover.Stats.
func (a Admin) TierStats(ctx context.Context) (any, error) { return a.W.Mover.Stats(ctx) }

// CompactColdFilters runs Worker.CompactColdFilters.
func (a Admin) CompactColdFilters(ctx context.Context) (any, error) {
	return a.W.CompactColdFilters(ctx)
}

// RebuildColdFilters runs Worker.RebuildColdFilters: {"cells": N, "job": id}.
func (a Admin) RebuildColdFilters(ctx context.Context) (any, error) {
	job := a.W.Jobs.Start(jobs.KindRebuild, "api")
	n, err := a.W.rebuildColdFilters(ctx, job)
	return map[string]any{"cells": n, "job": job.ID()}, err
}

// Migrate runs a cycle; its report is answered even when some batch failed.
func (a Admin) Migrate(ctx context.Context) (any, error) {
	rep, err := a.W.RunCycle(ctx)
	return rep, err
}

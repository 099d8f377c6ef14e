package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quota-platform/quota/migrate/activity"
	"github.com/redis/go-redis/v9"
)

// Progress of a long job (a migration cycle, a cold filter rebuild or
// compaction), as an instance sees it and, for a cycle, as the fleet does.
//
// A cycle's parts are shared among the instances (cycle.go), so what the
// fleet has done is in Redis: the done hash holds the parts done, and
// each instance publishes the parts it is running, every
// Config.ProgressEvery, in
//
//	mig:cycle:<id>:live   "p<part>" -> {by, scanned, moved, cells, at} (JSON)
//	                      "start" -> unix ms the cycle was first joined
//	                      (wall time, Jobs.Now: not Worker.Now, which
//	                      places cells in hours)
//	                      "end"   -> unix ms its report was summed
//
// kept two days, as the done hash. A part's live field is deleted once the
// part is in the done hash (a reader ignores a field whose part is done);
// the field of an instance that died in a part stays until another takes
// the part over. mig:cycle:last names the cycle that ended last.

// Progress is what a job has done so far and what is left.
type Progress struct {
	PartsDone    int   `json:"parts_done"`
	PartsRunning int   `json:"parts_running"`
	PartsTotal   int   `json:"parts_total"`
	CellsScanned int64 `json:"cells_scanned"`
	// CellsTotal is the cells of the parts counted so far: a part counts
	// its cells when it starts (a cycle's), a shard when its scan starts
	// (a rebuild's or compaction's); CellsCounted says whether every part
	// has been, i.e. whether CellsTotal is the job's total.
	CellsTotal   int64 `json:"cells_total"`
	CellsCounted bool  `json:"cells_total_final"`
	CellsMoved   int64 `json:"cells_moved"`
	// Fraction is the share of the work done: each part done counts 1,
	// each part running its cells scanned over its cells.
	Fraction       float64 `json:"fraction"`
	CellsPerSecond float64 `json:"cells_per_second"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// ETASeconds is elapsed × (1 − fraction) / fraction: nil until some
	// work is done, 0 once all is.
	ETASeconds *float64 `json:"eta_seconds"`
}

// fill computes Fraction, the rate and the ETA from the counts, over
// elapsed.
func (p *Progress) fill(running float64, elapsed time.Duration) {
	p.ElapsedSeconds = round3(elapsed.Seconds())
	if p.PartsTotal > 0 {
		p.Fraction = min(1, (float64(p.PartsDone)+running)/float64(p.PartsTotal))
	}
	if s := elapsed.Seconds(); s > 0 {
		p.CellsPerSecond = round3(float64(p.CellsScanned) / s)
	}
	switch {
	case p.PartsTotal > 0 && p.PartsDone >= p.PartsTotal:
		p.Fraction = 1
		zero := 0.0
		p.ETASeconds = &zero
	case p.Fraction > 0:
		eta := round3(elapsed.Seconds() * (1 - p.Fraction) / p.Fraction)
		p.ETASeconds = &eta
	}
	p.Fraction = round3(p.Fraction)
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// partProgress is one running part's counts, updated by its part worker
// and read by the publisher and the job's views.
type partProgress struct {
	cells, scanned, moved atomic.Int64
	counted               atomic.Bool // cells is known
}

// fraction is the share of the part scanned (0 until its cells are
// counted).
func (pp *partProgress) fraction() float64 {
	c := pp.cells.Load()
	if !pp.counted.Load() || c <= 0 {
		return 0
	}
	return min(1, float64(pp.scanned.Load())/float64(c))
}

// livePart is a running part's field in the live hash.
type livePart struct {
	By      string `json:"by"`
	Scanned int64  `json:"scanned"`
	Moved   int64  `json:"moved"`
	Cells   int64  `json:"cells"`
	Counted bool   `json:"counted"`
	At      int64  `json:"at"` // unix ms
}

// InstanceProgress is one instance's share of a fleet's cycle.
type InstanceProgress struct {
	PartsDone    int   `json:"parts_done"`
	PartsRunning int   `json:"parts_running"`
	CellsScanned int64 `json:"cells_scanned"`
	CellsMoved   int64 `json:"cells_moved"`
}

// FleetProgress is a cycle's progress over every instance that runs it,
// from what they share in Redis.
type FleetProgress struct {
	Cycle     string     `json:"cycle"`
	State     string     `json:"state"` // running | done | compaction
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Progress
	Instances map[string]InstanceProgress `json:"instances"`
}

func (w *Worker) liveKey(id string) string { return w.Mover.Prefix + "mig:cycle:" + id + ":live" }
func (w *Worker) lastCycleKey() string     { return w.Mover.Prefix + "mig:cycle:last" }

func (w *Worker) progressEvery() time.Duration {
	if w.Config.ProgressEvery > 0 {
		return w.Config.ProgressEvery
	}
	return 500 * time.Millisecond
}

// markCycleStart records when the fleet first joined cycle id.
func (w *Worker) markCycleStart(ctx context.Context, id string) error {
	pipe := w.Mover.RDB.Pipeline()
	pipe.HSetNX(ctx, w.liveKey(id), "start", w.Jobs.now().UnixMilli())
	pipe.Expire(ctx, w.liveKey(id), 48*time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("cycle %s progress: %w", id, err)
	}
	return nil
}

// markCycleEnd records that cycle id ended now and names it the last.
func (w *Worker) markCycleEnd(ctx context.Context, id string) {
	pipe := w.Mover.RDB.Pipeline()
	pipe.HSet(ctx, w.liveKey(id), "end", w.Jobs.now().UnixMilli())
	pipe.Set(ctx, w.lastCycleKey(), id, 48*time.Hour)
	_, _ = pipe.Exec(ctx) // progress only: a failure costs the status view
}

// publish writes this instance's running parts of cycle id to the live
// hash.
func (w *Worker) publish(ctx context.Context, id string, running map[int]*partProgress) error {
	if len(running) == 0 {
		return nil
	}
	at := w.Jobs.now().UnixMilli()
	fields := make([]any, 0, 2*len(running))
	for p, pp := range running {
		js, _ := json.Marshal(livePart{By: w.Name, Scanned: pp.scanned.Load(), Moved: pp.moved.Load(),
			Cells: pp.cells.Load(), Counted: pp.counted.Load(), At: at})
		fields = append(fields, "p"+strconv.Itoa(p), js)
	}
	if err := w.Mover.RDB.HSet(ctx, w.liveKey(id), fields...).Err(); err != nil {
		return fmt.Errorf("cycle %s progress: %w", id, err)
	}
	return nil
}

// FleetCycle is the progress of the cycle running now or, when none runs,
// of the last one that ended (nil when neither is known: none ended in two
// days).
func (w *Worker) FleetCycle(ctx context.Context) (*FleetProgress, error) {
	rdb := w.Mover.RDB
	cur, err := rdb.Get(ctx, w.cycleKey()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cycle progress: %w", err)
	}
	if strings.HasPrefix(cur, compactionPrefix) {
		return &FleetProgress{Cycle: cur, State: "compaction", Instances: map[string]InstanceProgress{}}, nil
	}
	if cur == "" {
		cur, err = rdb.Get(ctx, w.lastCycleKey()).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("cycle progress: %w", err)
		}
	}
	fp, err := w.fleetProgress(ctx, cur)
	if err != nil {
		return nil, err
	}
	return &fp, nil
}

// fleetProgress sums cycle id's done and live hashes.
func (w *Worker) fleetProgress(ctx context.Context, id string) (FleetProgress, error) {
	rdb := w.Mover.RDB
	pipe := rdb.Pipeline()
	doneCmd := pipe.HGetAll(ctx, w.doneKey(id))
	liveCmd := pipe.HGetAll(ctx, w.liveKey(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return FleetProgress{}, fmt.Errorf("cycle %s progress: %w", id, err)
	}
	done, live := doneCmd.Val(), liveCmd.Val()
	fp := FleetProgress{Cycle: id, State: "running", Instances: map[string]InstanceProgress{}}
	fp.PartsTotal = len(w.DBs) * activity.PartsPerShard
	counted := 0
	for _, js := range done {
		var pr partReport
		if err := json.Unmarshal([]byte(js), &pr); err != nil {
			return fp, fmt.Errorf("cycle %s progress: %w", id, err)
		}
		moved := 0
		for _, n := range pr.Moved {
			moved += n
		}
		fp.PartsDone++
		fp.CellsScanned += int64(pr.Scanned)
		fp.CellsMoved += int64(moved)
		fp.CellsTotal += int64(max(pr.Cells, pr.Scanned))
		counted++
		ip := fp.Instances[pr.By]
		ip.PartsDone++
		ip.CellsScanned += int64(pr.Scanned)
		ip.CellsMoved += int64(moved)
		fp.Instances[pr.By] = ip
	}
	running := 0.0
	for f, v := range live {
		switch {
		case f == "start" || f == "end":
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			t := time.UnixMilli(ms).UTC()
			if f == "start" {
				fp.StartedAt = &t
			} else {
				fp.EndedAt = &t
			}
			continue
		case !strings.HasPrefix(f, "p"):
			continue
		}
		if _, isDone := done[f[1:]]; isDone {
			continue
		}
		var lp livePart
		if json.Unmarshal([]byte(v), &lp) != nil {
			continue
		}
		fp.PartsRunning++
		fp.CellsScanned += lp.Scanned
		fp.CellsMoved += lp.Moved
		if lp.Counted {
			fp.CellsTotal += lp.Cells
			counted++
			if lp.Cells > 0 {
				running += min(1, float64(lp.Scanned)/float64(lp.Cells))
			}
		}
		ip := fp.Instances[lp.By]
		ip.PartsRunning++
		ip.CellsScanned += lp.Scanned
		ip.CellsMoved += lp.Moved
		fp.Instances[lp.By] = ip
	}
	fp.CellsCounted = counted >= fp.PartsTotal
	end := w.Jobs.now()
	if fp.EndedAt != nil {
		end = *fp.EndedAt
	}
	if fp.PartsDone >= fp.PartsTotal {
		fp.State = "done"
		fp.PartsRunning = 0
	}
	var elapsed time.Duration
	if fp.StartedAt != nil {
		elapsed = end.Sub(*fp.StartedAt)
	}
	fp.fill(running, elapsed)
	return fp, nil
}

// Job kinds.
const (
	KindMigrate = "migrate"
	KindRebuild = "rebuild-filters"
	KindCompact = "compact-filters"
)

// jobKinds are every kind, in the order they are shown.
var jobKinds = []string{KindMigrate, KindRebuild, KindCompact}

// Job is one run of a long job on this instance.
type Job struct {
	id, kind, trigger, instance, url string
	started                          time.Time

	mu       sync.Mutex
	ended    time.Time
	err      error
	result   any
	cycle    string
	fleet    *FleetProgress
	total    int // parts
	counted  int // parts whose cells are counted (done or running)
	done     int
	scanned  int64 // of the parts done
	moved    int64
	cells    int64 // of the parts done or counted
	running  map[int]*partProgress
	finished bool
}

// JobView is a job as the admin API answers it (GET /v1/admin/jobs/{id}).
type JobView struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`    // migrate | rebuild-filters | compact-filters
	Trigger  string `json:"trigger"` // api | schedule
	Instance string `json:"instance"`
	// URL is the instance's own address (QUOTA_ADVERTISE_URL): a job is
	// kept by the instance that runs it, so behind a load balancer it is
	// polled there.
	URL       string     `json:"url,omitempty"`
	State     string     `json:"state"` // running | done | failed
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Cycle     string     `json:"cycle,omitempty"`
	// Progress is this instance's work (its parts, of the fleet's total
	// for a cycle).
	Progress Progress `json:"progress"`
	// Fleet is the cycle's progress over every instance (a cycle only), as
	// of the last publication (Config.ProgressEvery).
	Fleet  *FleetProgress `json:"fleet,omitempty"`
	Result any            `json:"result,omitempty"`
	Error  string         `json:"error,omitempty"`
}

// ID is the job's id.
func (j *Job) ID() string { return j.id }

func (j *Job) setTotal(parts int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.total = parts
}

func (j *Job) setCycle(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cycle = id
}

func (j *Job) setFleet(fp FleetProgress) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.fleet = &fp
}

// partStarted registers part p as running here and returns its counts.
func (j *Job) partStarted(p int) *partProgress {
	pp := &partProgress{}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.running == nil {
		j.running = map[int]*partProgress{}
	}
	j.running[p] = pp
	return pp
}

// partEnded moves part p from running to done (when done) or drops it.
func (j *Job) partEnded(p int, done bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	pp := j.running[p]
	delete(j.running, p)
	if pp == nil || !done {
		return
	}
	j.done++
	j.scanned += pp.scanned.Load()
	j.moved += pp.moved.Load()
	j.cells += max(pp.cells.Load(), pp.scanned.Load())
	j.counted++
}

// runningParts is a copy of the running parts' map.
func (j *Job) runningParts() map[int]*partProgress {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.running)
}

func (j *Job) end(result any, err error, at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.result, j.err, j.ended, j.finished = result, err, at, true
}

// View is the job's state at now.
func (j *Job) View(now time.Time) JobView {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := JobView{ID: j.id, Kind: j.kind, Trigger: j.trigger, Instance: j.instance, URL: j.url, State: "running",
		StartedAt: j.started.UTC(), Cycle: j.cycle, Result: j.result}
	p := Progress{PartsDone: j.done, PartsTotal: j.total, CellsScanned: j.scanned, CellsMoved: j.moved, CellsTotal: j.cells}
	running, counted := 0.0, j.counted
	for _, pp := range j.running {
		p.PartsRunning++
		p.CellsScanned += pp.scanned.Load()
		p.CellsMoved += pp.moved.Load()
		if pp.counted.Load() {
			p.CellsTotal += pp.cells.Load()
			counted++
		}
		running += pp.fraction()
	}
	p.CellsCounted = j.total > 0 && counted >= j.total
	end := now
	if j.finished {
		end = j.ended
		t := j.ended.UTC()
		v.EndedAt = &t
		v.State = "done"
		if j.err != nil {
			v.State, v.Error = "failed", j.err.Error()
		}
	}
	if j.kind == KindMigrate {
		// This instance does a share of the fleet's parts, not a known
		// number of them: the share done is the fleet's, as of its last
		// look (ProgressEvery), or this instance's own work if more (a
		// lower bound of the fleet's, and never stale).
		p.fill(running, end.Sub(j.started))
		if j.fleet != nil {
			f := *j.fleet
			f.Instances = maps.Clone(j.fleet.Instances)
			v.Fleet = &f
			if f.Fraction > p.Fraction {
				p.Fraction = f.Fraction
				eta := round3(end.Sub(j.started).Seconds() * (1 - f.Fraction) / f.Fraction)
				p.ETASeconds = &eta
			}
		}
		if p.PartsDone < p.PartsTotal && p.Fraction >= 1 {
			p.Fraction = 0.999 // the fleet's last parts are not done yet
		}
	} else {
		p.fill(running, end.Sub(j.started))
	}
	v.Progress = p
	return v
}

// Jobs are this instance's jobs: the one running of each kind and the
// last few that ended. It is also the Prometheus collector of their
// progress (quota_job_*), every kind's series present from the start.
type Jobs struct {
	Instance string           // the instance's name in job views (Worker.Name)
	URL      string           // the instance's address in job views (JobView.URL)
	Now      func() time.Time // nil: time.Now
	mu       sync.Mutex       // guards seq and all
	seq      int
	all      []*Job // oldest first, at most keepJobs
}

// keepJobs is how many jobs Jobs keeps (the running ones and the last that
// ended).
const keepJobs = 32

func (js *Jobs) now() time.Time {
	if js != nil && js.Now != nil {
		return js.Now()
	}
	return time.Now()
}

// start registers a new job of kind; a nil Jobs gives a job that is kept
// nowhere.
func (js *Jobs) start(kind, trigger string) *Job {
	if js == nil {
		return &Job{kind: kind, trigger: trigger, started: time.Now()}
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	js.seq++
	now := js.now()
	j := &Job{id: kind + "-" + strconv.FormatInt(now.UnixMilli(), 36) + "-" + strconv.Itoa(js.seq),
		kind: kind, trigger: trigger, instance: js.Instance, url: js.URL, started: now}
	js.all = append(js.all, j)
	if len(js.all) > keepJobs {
		for i, old := range js.all {
			if old.isFinished() {
				js.all = append(js.all[:i], js.all[i+1:]...)
				break
			}
		}
	}
	return j
}

func (j *Job) isFinished() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.finished
}

// Running is the job of kind running now (nil: none).
func (js *Jobs) Running(kind string) *Job {
	if js == nil {
		return nil
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	for i := len(js.all) - 1; i >= 0; i-- {
		if j := js.all[i]; j.kind == kind && !j.isFinished() {
			return j
		}
	}
	return nil
}

// Get is job id (nil: not known here).
func (js *Jobs) Get(id string) *Job {
	if js == nil {
		return nil
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	for _, j := range js.all {
		if j.id == id {
			return j
		}
	}
	return nil
}

// Views are every job kept, newest first.
func (js *Jobs) Views() []JobView {
	if js == nil {
		return []JobView{}
	}
	js.mu.Lock()
	all := append([]*Job(nil), js.all...)
	js.mu.Unlock()
	now := js.now()
	out := make([]JobView, 0, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		out = append(out, all[i].View(now))
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].StartedAt.After(out[b].StartedAt) })
	return out
}

// last is the newest job of kind (nil: none yet).
func (js *Jobs) last(kind string) *Job {
	js.mu.Lock()
	defer js.mu.Unlock()
	for i := len(js.all) - 1; i >= 0; i-- {
		if js.all[i].kind == kind {
			return js.all[i]
		}
	}
	return nil
}

// publishWhileRunning publishes job's running parts of cycle id and reads
// the fleet's progress every ProgressEvery until the stop it returns is
// called (which waits for the last publication).
func (w *Worker) publishWhileRunning(ctx context.Context, id string, job *Job) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(w.progressEvery())
		defer t.Stop()
		for {
			if err := w.publish(ctx, id, job.runningParts()); err != nil {
				w.log().Debug("cycle progress not published", "cycle", id, "err", err)
			}
			if fp, err := w.fleetProgress(ctx, id); err == nil {
				job.setFleet(fp)
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

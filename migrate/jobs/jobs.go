// Package jobs is the long jobs of an instance (migration cycles, cold
// filter rebuilds and compactions) and their progress, as the admin API,
// quotactl and the Prometheus series show them; migrate/worker runs them.
package jobs

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

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

// Fill computes Fraction, the rate and the ETA from the counts, over
// elapsed.
func (p *Progress) Fill(running float64, elapsed time.Duration) {
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

// PartProgress is one running part's counts, updated by its part worker
// and read by the publisher and the job's views.
type PartProgress struct {
	Cells, Scanned, Moved atomic.Int64
	Counted               atomic.Bool // Cells is known
}

// fraction is the share of the part scanned (0 until its cells are
// counted).
func (pp *PartProgress) fraction() float64 {
	c := pp.Cells.Load()
	if !pp.Counted.Load() || c <= 0 {
		return 0
	}
	return min(1, float64(pp.Scanned.Load())/float64(c))
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

// Job kinds.
const (
	KindMigrate = "migrate"
	KindRebuild = "rebuild-filters"
	KindCompact = "compact-filters"
)

// jobKinds are every kind, in the order they are shown.
var jobKinds = []string{KindMigrate, KindRebuild, KindCompact}

// Kinds are every job kind, in the order they are shown.
func Kinds() []string { return slices.Clone(jobKinds) }

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
	running  map[int]*PartProgress
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
	// of the last publication (worker.Config.ProgressEvery).
	Fleet  *FleetProgress `json:"fleet,omitempty"`
	Result any            `json:"result,omitempty"`
	Error  string         `json:"error,omitempty"`
}

// ID is the job's id.
func (j *Job) ID() string { return j.id }

// SetTotal sets the job's number of parts.
func (j *Job) SetTotal(parts int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.total = parts
}

// SetCycle names the cycle the job runs in.
func (j *Job) SetCycle(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cycle = id
}

// SetFleet records the fleet's progress of the job's cycle, as last read.
func (j *Job) SetFleet(fp FleetProgress) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.fleet = &fp
}

// PartStarted registers part p as running here and returns its counts.
func (j *Job) PartStarted(p int) *PartProgress {
	pp := &PartProgress{}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.running == nil {
		j.running = map[int]*PartProgress{}
	}
	j.running[p] = pp
	return pp
}

// PartEnded moves part p from running to done (when done) or drops it.
func (j *Job) PartEnded(p int, done bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	pp := j.running[p]
	delete(j.running, p)
	if pp == nil || !done {
		return
	}
	j.done++
	j.scanned += pp.Scanned.Load()
	j.moved += pp.Moved.Load()
	j.cells += max(pp.Cells.Load(), pp.Scanned.Load())
	j.counted++
}

// RunningParts is a copy of the running parts' map.
func (j *Job) RunningParts() map[int]*PartProgress {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.running)
}

// End records the job's end at at, with its result or error.
func (j *Job) End(result any, err error, at time.Time) {
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
		p.CellsScanned += pp.Scanned.Load()
		p.CellsMoved += pp.Moved.Load()
		if pp.Counted.Load() {
			p.CellsTotal += pp.Cells.Load()
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
		p.Fill(running, end.Sub(j.started))
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
		p.Fill(running, end.Sub(j.started))
	}
	v.Progress = p
	return v
}

// Jobs are this instance's jobs: the one running of each kind and the
// last few that ended. It is also the Prometheus collector of their
// progress (quota_job_*), every kind's series present from the start.
type Jobs struct {
	Instance string           // the instance's name in job views (worker.Worker.Name)
	URL      string           // the instance's address in job views (JobView.URL)
	Now      func() time.Time // nil: time.Now
	mu       sync.Mutex       // guards seq and all
	seq      int
	all      []*Job // oldest first, at most keepJobs
}

// keepJobs is how many jobs Jobs keeps (the running ones and the last that
// ended).
const keepJobs = 32

// Time is the jobs' clock's time (Now, else time.Now).
func (js *Jobs) Time() time.Time {
	if js != nil && js.Now != nil {
		return js.Now()
	}
	return time.Now()
}

// Start registers a new job of kind; a nil Jobs gives a job that is kept
// nowhere.
func (js *Jobs) Start(kind, trigger string) *Job {
	if js == nil {
		return &Job{kind: kind, trigger: trigger, started: time.Now()}
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	js.seq++
	now := js.Time()
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
	now := js.Time()
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

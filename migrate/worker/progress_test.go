package worker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/migrate/jobs"
	"github.com/quota-platform/quota/tiers"
)

// touchCells calls each cell once, many cells to a router call.
func touchCells(t *testing.T, e *env, cells []moveenv.Cell) {
	t.Helper()
	for len(cells) > 0 {
		n := min(len(cells), 250)
		ops := make([]*tiers.Op, n)
		for i, c := range cells[:n] {
			ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(e.Clock.Now())}}
		}
		if err := e.Router.Check(context.Background(), e.Clock.Now(), ops); err != nil {
			t.Fatalf("check: %v", err)
		}
		cells = cells[n:]
	}
}

// sample is one look at a running job.
type sample struct {
	local jobs.JobView
	fleet jobs.FleetProgress
}

// A cycle over enough cells to take seconds (its scan paced) reports,
// while it runs, progress that only grows, on the instance and for the
// fleet, and ends at its totals: every part done, every cell scanned and
// counted, every cell due to move moved, an ETA of 0. With three instances
// the fleet's figures are the sum of what each published.
func TestCycleProgress_GrowsWhileItRunsAndEndsAtItsTotals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		instances int
		perSecond float64 // each instance's pace
	}{
		{"one instance", 1, 500},
		{"shared by three", 3, 170},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 1600
			e, w := newOwnWorkerEnv(t)
			w.Name = "i0"
			w.Config.BatchSize = 25
			w.Config.CellsPerSecond = tc.perSecond
			w.Config.ProgressEvery = 50 * time.Millisecond
			w.Jobs = &jobs.Jobs{Instance: w.Name}
			workers := []*Worker{w}
			for i := 1; i < tc.instances; i++ {
				o := secondInstance(e, w, "i"+string(rune('0'+i)))
				o.Jobs = &jobs.Jobs{Instance: o.Name}
				workers = append(workers, o)
			}
			cells := moveenv.NewCells(n, 10, 40)
			touchCells(t, e, cells)
			e.Clock.Advance(2 * time.Hour)
			if err := w.Activity.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			job := w.StartCycle(ctx)
			var wg sync.WaitGroup
			for _, o := range workers[1:] {
				wg.Go(func() {
					if _, err := o.RunCycle(ctx); err != nil {
						t.Errorf("%s: %v", o.Name, err)
					}
				})
			}
			var samples []sample
			start := time.Now()
			for {
				v, ok := (Admin{W: w}).Job(job.ID())
				if !ok {
					t.Fatalf("job %s not found", job.ID())
				}
				var s sample
				s.local = v
				if fp, err := w.FleetCycle(ctx); err == nil && fp != nil && fp.Cycle == v.Cycle {
					s.fleet = *fp
				}
				samples = append(samples, s)
				if v.State != "running" {
					break
				}
				if time.Since(start) > 2*time.Minute {
					t.Fatalf("cycle still running after 2 minutes: %+v", v)
				}
				time.Sleep(100 * time.Millisecond)
			}
			wg.Wait()
			took := time.Since(start)
			last := samples[len(samples)-1]
			if last.local.State != "done" {
				t.Fatalf("job ended %s: %s", last.local.State, last.local.Error)
			}
			if took < 2*time.Second {
				t.Fatalf("cycle took %s: too short to show progress", took)
			}
			// Growing: never a step back, and several steps forward.
			steps := 0
			for i := 1; i < len(samples); i++ {
				a, b := samples[i-1].fleet, samples[i].fleet
				if a.Cycle == "" || b.Cycle == "" {
					continue
				}
				if b.PartsDone < a.PartsDone || b.CellsScanned < a.CellsScanned || b.CellsMoved < a.CellsMoved || b.Fraction < a.Fraction {
					t.Errorf("fleet progress went back between samples %d and %d: %+v then %+v", i-1, i, a.Progress, b.Progress)
				}
				la, lb := samples[i-1].local.Progress, samples[i].local.Progress
				if lb.CellsScanned < la.CellsScanned || lb.PartsDone < la.PartsDone {
					t.Errorf("instance progress went back between samples %d and %d: %+v then %+v", i-1, i, la, lb)
				}
				if b.CellsScanned > a.CellsScanned {
					steps++
				}
			}
			if steps < 5 {
				t.Errorf("fleet progress grew in %d of %d samples over %s, want at least 5", steps, len(samples), took)
			}
			mid := 0
			for _, s := range samples {
				if s.local.State == "running" && s.fleet.Cycle != "" && s.fleet.Fraction > 0 && s.fleet.Fraction < 1 && s.fleet.ETASeconds != nil && *s.fleet.ETASeconds > 0 && s.fleet.CellsPerSecond > 0 {
					mid++
				}
			}
			if mid == 0 {
				t.Errorf("no sample while running had a fraction between 0 and 1, a rate and an ETA")
			}
			fp, err := w.FleetCycle(ctx)
			if err != nil || fp == nil {
				t.Fatalf("fleet cycle after the end: %v, %v", fp, err)
			}
			total := 2 * activity.PartsPerShard
			if fp.State != "done" || fp.PartsDone != total || fp.PartsRunning != 0 || fp.CellsScanned != n || fp.CellsTotal != n || !fp.CellsCounted ||
				fp.CellsMoved != n || fp.Fraction != 1 || fp.ETASeconds == nil || *fp.ETASeconds != 0 || fp.EndedAt == nil {
				t.Errorf("fleet progress at the end %+v (%+v): want done, %d parts, %d cells scanned, counted and moved, ETA 0", fp.Progress, fp, total, n)
			}
			// The fleet's figures are the instances' sums; each instance's
			// job says what it did.
			var parts int
			var scanned int64
			for _, o := range workers {
				v := o.Jobs.Views()[0]
				parts += v.Progress.PartsDone
				scanned += v.Progress.CellsScanned
				if got := fp.Instances[o.Name]; int64(got.PartsDone) != int64(v.Progress.PartsDone) || got.CellsScanned != v.Progress.CellsScanned {
					t.Errorf("%s: fleet says %+v, its job %+v", o.Name, got, v.Progress)
				}
			}
			if parts != total || scanned != n {
				t.Errorf("instances did %d parts and scanned %d cells, want %d and %d", parts, scanned, total, n)
			}
			if tc.instances > 1 && len(fp.Instances) < 2 {
				t.Errorf("parts by %d instances (%v), want the cycle shared", len(fp.Instances), fp.Instances)
			}
			t.Logf("%s: %d samples over %s; end %+v", tc.name, len(samples), took.Round(time.Millisecond), fp.Progress)
		})
	}
}

// Every kind's progress series exist before any job runs, at zero, and a
// job's figures show in them once it has run.
func TestJobsCollector_SeriesExistBeforeAnyJobAndShowTheLast(t *testing.T) {
	t.Parallel()
	e, w := newOwnWorkerEnv(t)
	w.Jobs = &jobs.Jobs{Instance: "i0"}
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Jobs)
	want := func(series string, v float64) {
		t.Helper()
		got, err := testutil.GatherAndCount(reg)
		if err != nil || got == 0 {
			t.Fatalf("gather: %d, %v", got, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				s := mf.GetName() + "{"
				for i, l := range m.GetLabel() {
					if i > 0 {
						s += ","
					}
					s += l.GetName() + "=" + l.GetValue()
				}
				s += "}"
				if s == series {
					if m.GetGauge().GetValue() != v {
						t.Errorf("%s = %v, want %v", series, m.GetGauge().GetValue(), v)
					}
					return
				}
			}
		}
		t.Errorf("%s absent", series)
	}
	for _, k := range jobs.Kinds() {
		want("quota_job_running{kind="+k+"}", 0)
		want("quota_job_parts{kind="+k+",state=total}", 0)
		want("quota_job_cells{kind="+k+",what=scanned}", 0)
	}
	want("quota_migration_cycle_fleet_parts{state=done}", 0)
	cells := moveenv.NewCells(30, 10, 5)
	touchCells(t, e, cells)
	e.Clock.Advance(2 * time.Hour)
	if err := w.Activity.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.RunCycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("quota_job_running{kind=migrate}", 0)
	want("quota_job_parts{kind=migrate,state=done}", float64(2*activity.PartsPerShard))
	want("quota_job_cells{kind=migrate,what=scanned}", 30)
	want("quota_job_cells{kind=migrate,what=moved}", 30)
	want("quota_job_fraction_done{kind=migrate}", 1)
	want("quota_migration_cycle_fleet_cells{what=total}", 30)
	if _, err := w.RebuildColdFilters(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("quota_job_parts{kind=rebuild-filters,state=done}", 2)
	want("quota_job_cells{kind=rebuild-filters,what=scanned}", 30)
	if v := w.Jobs.Views(); len(v) != 2 || v[0].Kind != jobs.KindRebuild || !strings.HasPrefix(v[1].ID, "migrate-") {
		t.Errorf("jobs %+v: want the rebuild, then the cycle", v)
	}
}

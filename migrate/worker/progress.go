package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/quota-platform/quota/migrate/activity"
	"github.com/quota-platform/quota/migrate/jobs"
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
// livePart is a running part's field in the live hash.
type livePart struct {
	By      string `json:"by"`
	Scanned int64  `json:"scanned"`
	Moved   int64  `json:"moved"`
	Cells   int64  `json:"cells"`
	Counted bool   `json:"counted"`
	At      int64  `json:"at"` // unix ms
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
	pipe.HSetNX(ctx, w.liveKey(id), "start", w.Jobs.Time().UnixMilli())
	pipe.Expire(ctx, w.liveKey(id), 48*time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("cycle %s progress: %w", id, err)
	}
	return nil
}

// markCycleEnd records that cycle id ended now and names it the last.
func (w *Worker) markCycleEnd(ctx context.Context, id string) {
	pipe := w.Mover.RDB.Pipeline()
	pipe.HSet(ctx, w.liveKey(id), "end", w.Jobs.Time().UnixMilli())
	pipe.Set(ctx, w.lastCycleKey(), id, 48*time.Hour)
	_, _ = pipe.Exec(ctx) // progress only: a failure costs the status view
}

// publish writes this instance's running parts of cycle id to the live
// hash.
func (w *Worker) publish(ctx context.Context, id string, running map[int]*jobs.PartProgress) error {
	if len(running) == 0 {
		return nil
	}
	at := w.Jobs.Time().UnixMilli()
	fields := make([]any, 0, 2*len(running))
	for p, pp := range running {
		js, _ := json.Marshal(livePart{By: w.Name, Scanned: pp.Scanned.Load(), Moved: pp.Moved.Load(),
			Cells: pp.Cells.Load(), Counted: pp.Counted.Load(), At: at})
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
func (w *Worker) FleetCycle(ctx context.Context) (*jobs.FleetProgress, error) {
	rdb := w.Mover.RDB
	cur, err := rdb.Get(ctx, w.cycleKey()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cycle progress: %w", err)
	}
	if strings.HasPrefix(cur, compactionPrefix) {
		return &jobs.FleetProgress{Cycle: cur, State: "compaction", Instances: map[string]jobs.InstanceProgress{}}, nil
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
func (w *Worker) fleetProgress(ctx context.Context, id string) (jobs.FleetProgress, error) {
	rdb := w.Mover.RDB
	pipe := rdb.Pipeline()
	doneCmd := pipe.HGetAll(ctx, w.doneKey(id))
	liveCmd := pipe.HGetAll(ctx, w.liveKey(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return jobs.FleetProgress{}, fmt.Errorf("cycle %s progress: %w", id, err)
	}
	done, live := doneCmd.Val(), liveCmd.Val()
	fp := jobs.FleetProgress{Cycle: id, State: "running", Instances: map[string]jobs.InstanceProgress{}}
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
	end := w.Jobs.Time()
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
	fp.Fill(running, elapsed)
	return fp, nil
}

// publishWhileRunning publishes job's running parts of cycle id and reads
// the fleet's progress every ProgressEvery until the stop it returns is
// called (which waits for the last publication).
func (w *Worker) publishWhileRunning(ctx context.Context, id string, job *jobs.Job) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(w.progressEvery())
		defer t.Stop()
		for {
			if err := w.publish(ctx, id, job.RunningParts()); err != nil {
				w.log().Debug("cycle progress not published", "cycle", id, "err", err)
			}
			if fp, err := w.fleetProgress(ctx, id); err == nil {
				job.SetFleet(fp)
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

package worker

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/migrate"
	"github.com/quota-platform/quota/migrate/activity"
)

// A cycle is the fleet's, not an instance's: its work is split into parts
// (each shard's cell_activity in activity.PartsPerShard ranges of keys), and every
// instance that runs the cycle - each on its schedule, or one asked by
// POST /v1/admin/migrate, which the others join - takes parts under a
// lease until all are done. In Redis, under the service's prefix:
//
//	mig:cycle                 the cycle running now (its id), for a day at most,
//	                          or compact-<id>: a cold filter compaction
//	mig:cycle:<id>:part:<p>   the lease of part p (an instance's token, PX)
//	mig:cycle:<id>:done       part -> what it moved (JSON), kept two days
//
// A part is done once: its lease keeps others off it while it runs, and
// its entry in the done hash afterwards. An instance that dies in a part
// stops renewing its lease, which lapses; another instance then runs the
// part again from the start (cells already moved are found in their
// target tier and left alone; moves it left frozen are rolled forward by
// Repair first). A scheduled cycle's id comes from the minute it fired
// at, so instances whose cron fires in the same minute share it even if
// one starts after another has finished (the done hash then has every
// part): a cycle runs once per schedule, not once per instance.

// partReport is what one part did (kept in the done hash).
type partReport struct {
	Folded   int            `json:"folded"`
	Scanned  int            `json:"scanned"`
	Moved    map[string]int `json:"moved"`
	Quiet    int            `json:"quiet"`
	Idle     int            `json:"idle"`
	Skipped  int            `json:"skipped"`
	Failures int            `json:"failures"`
	By       string         `json:"by"`
	Cells    int            `json:"cells,omitempty"` // the part's cells when it started (progress.go)
}

func (w *Worker) cycleKey() string { return w.Mover.Prefix + "mig:cycle" }

func (w *Worker) partKey(id string, p int) string {
	return w.Mover.Prefix + "mig:cycle:" + id + ":part:" + strconv.Itoa(p)
}

func (w *Worker) doneKey(id string) string { return w.Mover.Prefix + "mig:cycle:" + id + ":done" }

func (w *Worker) partLeaseTTL() time.Duration {
	if w.Config.PartLeaseTTL > 0 {
		return w.Config.PartLeaseTTL
	}
	return 30 * time.Second
}

func (w *Worker) partWorkers() int {
	if w.Config.PartWorkers > 0 {
		return w.Config.PartWorkers
	}
	return 4
}

// joinCycle returns the id of the cycle running now, or starts one with
// id want (a scheduled cycle's) or, when want is "", a new id. While a
// cold filter compaction holds the cycle key, it waits: no cycle moves
// cells during one (CompactColdFilters).
func (w *Worker) joinCycle(ctx context.Context, want string) (string, error) {
	rdb := w.Mover.RDB
	if want == "" {
		want = "run-" + strconv.FormatInt(w.now().UnixNano(), 36) + "-" + strconv.FormatUint(rand.Uint64()%1e6, 36)
	}
	for {
		cur, err := rdb.Get(ctx, w.cycleKey()).Result()
		switch {
		case err == nil && strings.HasPrefix(cur, compactionPrefix):
			if err := clock.Sleep(ctx, compactionPoll); err != nil {
				return "", err
			}
			continue
		case err == nil:
			return cur, nil
		case !errors.Is(err, redis.Nil):
			return "", fmt.Errorf("cycle: %w", err)
		}
		ok, err := rdb.SetNX(ctx, w.cycleKey(), want, 24*time.Hour).Result()
		if err != nil {
			return "", fmt.Errorf("cycle: %w", err)
		}
		if ok {
			return want, nil
		}
		// Another instance started a cycle (or a compaction) just now.
	}
}

// workParts takes and runs the cycle's parts until every part is done,
// with PartWorkers goroutines; parts another instance holds are waited
// for (and taken over if their lease lapses).
func (w *Worker) workParts(ctx context.Context, id string, run func(ctx context.Context, p int) partReport) error {
	total := len(w.DBs) * activity.PartsPerShard
	local := &localParts{running: map[int]bool{}}
	runLocal := func(ctx context.Context, p int) partReport {
		local.set(p, true)
		defer local.set(p, false)
		return run(ctx, p)
	}
	var wg sync.WaitGroup
	errs := make(chan error, w.partWorkers())
	for range w.partWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w.takeParts(ctx, id, total, local, runLocal)
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// localParts are the parts this instance's part workers are running.
type localParts struct {
	mu      sync.Mutex
	running map[int]bool
}

func (l *localParts) set(p int, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on {
		l.running[p] = true
	} else {
		delete(l.running, p)
	}
}

// holdAll reports whether every part of total not in done is running here.
func (l *localParts) holdAll(total int, done map[string]bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range total {
		if !done[strconv.Itoa(p)] && !l.running[p] {
			return false
		}
	}
	return true
}

func (w *Worker) takeParts(ctx context.Context, id string, total int, local *localParts, run func(ctx context.Context, p int) partReport) error {
	rdb := w.Mover.RDB
	for {
		done, err := rdb.HKeys(ctx, w.doneKey(id)).Result()
		if err != nil {
			return fmt.Errorf("cycle %s: %w", id, err)
		}
		isDone := make(map[string]bool, len(done))
		for _, d := range done {
			isDone[d] = true
		}
		if len(isDone) >= total {
			return nil
		}
		took := false
		for _, p := range rand.Perm(total) {
			if isDone[strconv.Itoa(p)] {
				continue
			}
			ok, err := w.runPartLeased(ctx, id, p, run)
			if err != nil {
				return err
			}
			took = took || ok
		}
		if !took && local.holdAll(total, isDone) {
			return nil // this instance's other part workers finish them
		}
		if !took {
			// The parts left are another instance's: wait for them to be
			// done, or for a dead instance's lease to lapse.
			t := time.NewTimer(min(w.partLeaseTTL()/4, 200*time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// runPartLeased runs part p if it can lease it and it is not done yet,
// renewing the lease while it runs, and records it as done. It reports
// whether it ran the part.
func (w *Worker) runPartLeased(ctx context.Context, id string, p int, run func(ctx context.Context, p int) partReport) (bool, error) {
	rdb := w.Mover.RDB
	key, token := w.partKey(id, p), strconv.FormatUint(rand.Uint64(), 36)
	ttl := w.partLeaseTTL()
	ok, err := rdb.SetNX(ctx, key, token, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("cycle %s part %d: %w", id, p, err)
	}
	if !ok {
		return false, nil
	}
	// Done by another instance between our look at the done hash and the
	// lease (it released the lease after writing done)?
	if again, err := rdb.HExists(ctx, w.doneKey(id), strconv.Itoa(p)).Result(); err != nil || again {
		migrate.ReleaseKey(context.WithoutCancel(ctx), rdb, key, token)
		return false, err
	}
	stop := w.keepRenewed(ctx, key, token, ttl)
	rep := run(ctx, p)
	stop()
	rep.By = w.Name
	js, _ := json.Marshal(rep)
	bg := context.WithoutCancel(ctx)
	if ctx.Err() == nil {
		pipe := rdb.TxPipeline()
		pipe.HSet(bg, w.doneKey(id), strconv.Itoa(p), js)
		pipe.Expire(bg, w.doneKey(id), 48*time.Hour)
		if _, err := pipe.Exec(bg); err != nil {
			return true, fmt.Errorf("cycle %s part %d done: %w", id, p, err)
		}
		// Its live progress is the done hash's now (a reader skips a
		// live field of a part done; this only tidies up).
		rdb.HDel(bg, w.liveKey(id), "p"+strconv.Itoa(p))
	}
	migrate.ReleaseKey(bg, rdb, key, token)
	return true, ctx.Err()
}

// keepRenewed renews key, which holds token, for ttl every ttl/4 until
// the stop it returns is called (and has waited for the renewals to end).
func (w *Worker) keepRenewed(ctx context.Context, key, token string, ttl time.Duration) (stop func()) {
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(ttl / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				migrate.RenewKey(context.WithoutCancel(ctx), w.Mover.RDB, key, token, ttl)
			}
		}
	}()
	return func() {
		close(done)
		<-renewed
	}
}

// fleetReport sums the done hash of cycle id (every instance's parts) and
// ends the cycle: the cycle key is deleted if it still names id.
func (w *Worker) fleetReport(ctx context.Context, id string, rep *CycleReport) error {
	rdb := w.Mover.RDB
	all, err := rdb.HGetAll(ctx, w.doneKey(id)).Result()
	if err != nil {
		return fmt.Errorf("cycle %s report: %w", id, err)
	}
	by := map[string]int{}
	for _, js := range all {
		var pr partReport
		if err := json.Unmarshal([]byte(js), &pr); err != nil {
			return fmt.Errorf("cycle %s report: %w", id, err)
		}
		rep.Folded += pr.Folded
		rep.Scanned += pr.Scanned
		rep.Quiet += pr.Quiet
		rep.Idle += pr.Idle
		rep.Skipped += pr.Skipped
		rep.Failures += pr.Failures
		for d, n := range pr.Moved {
			rep.Moved[d] += n
		}
		by[pr.By]++
	}
	rep.Cycle, rep.Parts, rep.PartsBy = id, len(all), by
	endCycle.Run(context.WithoutCancel(ctx), rdb, []string{w.cycleKey()}, id)
	return nil
}

//go:embed cycle_end.lua
var cycleEndSource string

// endCycle deletes the cycle key if it names the cycle that ended.
var endCycle = redis.NewScript(cycleEndSource)

// partRange is the shard and the key range [lo, hi) of part p (hi nil: to
// the end).
func partRange(p int) (shard int, lo, hi []byte) {
	shard = p / activity.PartsPerShard
	i := p % activity.PartsPerShard
	lo = []byte{byte(i * 256 / activity.PartsPerShard)}
	if i < activity.PartsPerShard-1 {
		hi = []byte{byte((i + 1) * 256 / activity.PartsPerShard)}
	}
	return shard, lo, hi
}

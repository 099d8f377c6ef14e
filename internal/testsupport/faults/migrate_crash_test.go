//go:build faults

package faults

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// One fixed-window rule (only fixed windows are tiered) with a limit no
// test reaches and a window no test run crosses.
const migRules = `rules:
  - {name: mig_user, dimensions: [app_id, user_id], limit: 1000000, window: 366d, algorithm: fixed_window}
`

const (
	migRule   = "mig_user"
	migLimit  = 1000000
	migWindow = 366 * 24 * time.Hour
	migCells  = 5000 // five move batches of up to 1,000 cells
	migPrefix = "q:" // quotad's default QUOTA_REDIS_KEY_PREFIX
)

// A migration direction: thresholds that send the seeded cells to the
// source tier first (nil: they start hot, as new cells do), and thresholds
// that give every cell the other tier as its target.
type migDirection struct {
	name  string
	setup []string
	env   []string
}

var (
	toHot     = []string{"QUOTA_HOT_THRESHOLD=0.000001", "QUOTA_COLD_THRESHOLD=0"}
	hotToCold = migDirection{"hot>cold", nil, []string{"QUOTA_HOT_THRESHOLD=1e9", "QUOTA_COLD_THRESHOLD=1e9"}}
	coldToHot = migDirection{"cold>hot", []string{"QUOTA_HOT_THRESHOLD=1e9", "QUOTA_COLD_THRESHOLD=1e9"}, toHot}
	warmToHot = migDirection{"warm>hot", []string{"QUOTA_HOT_THRESHOLD=1e9", "QUOTA_COLD_THRESHOLD=0"}, toHot}
)

// SIGKILL quotad in the middle of a migration cycle, under checks on the
// cells being moved, at several delays after the cycle's first journal entry
// (so that different steps of a move are cut), restart it, and let the next
// cycle repair: every cell's count is exactly the calls answered 200 for it
// (plus at most those whose answer was lost in flight), and every cell is in
// exactly one tier.
func TestQuotadSIGKILL_MidMigrationRepairsToExactCounts(t *testing.T) {
	for _, tc := range []struct {
		dir   migDirection
		delay time.Duration // after the journal first appears
	}{
		{hotToCold, 0},
		{hotToCold, 20 * time.Millisecond},
		{hotToCold, 50 * time.Millisecond},
		{hotToCold, 120 * time.Millisecond},
		{coldToHot, 30 * time.Millisecond},
		{coldToHot, 75 * time.Millisecond},
		{warmToHot, 30 * time.Millisecond},
		{warmToHot, 150 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.dir.name, tc.delay), func(t *testing.T) {
			runMigrationKill(t, tc.dir, tc.delay)
		})
	}
}

// migEnv is one quotad with tiering on, over a private Redis and two fresh
// shards, and handles on those stores to inspect the cells directly.
type migEnv struct {
	q     *testenv.Quotad
	rdb   *redis.Client
	dbs   []*sql.DB
	hot   *hot.Store
	warm  *warm.Store
	cold  *cold.Store
	app   string
	users []string
	refs  []tiers.Ref
}

func newMigEnv(t *testing.T, dir migDirection) *migEnv {
	t.Helper()
	r := testenv.StartRedis(t)
	dbs, shardEnv := shards(t)
	env := append([]string{
		"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_RULES=" + writeRules(t, migRules), shardEnv,
		"QUOTA_TIERING=on", "QUOTA_ADMIN_TOKEN=" + adminToken, "QUOTA_MIGRATE_SCHEDULE=@yearly",
		"QUOTA_PROMOTE_INTERVAL=0", "QUOTA_DEMOTE_INTERVAL=0", "QUOTA_ANALYTICS=off",
	}, dir.env...)
	if dir.setup != nil {
		env = append(env, dir.setup...) // until toSource
	}
	e := &migEnv{q: testenv.StartQuotad(t, env...), dbs: dbs, app: fmt.Sprintf("mig-%d", time.Now().UnixNano())}
	e.rdb = redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { e.rdb.Close() })
	e.hot = hot.NewStore(e.rdb, hot.Options{Prefix: migPrefix})
	e.warm = warm.NewStore(e.rdb, warm.Options{Prefix: migPrefix})
	e.cold = cold.NewStore(dbs, cold.Options{})
	for i := range migCells {
		u := fmt.Sprintf("u%d", i)
		id := tiers.IdentityOf(migRule, []string{e.app, u})
		e.users = append(e.users, u)
		e.refs = append(e.refs, tiers.Ref{Identity: id, Window: migWindow, Tag: tiers.TagOf(e.app), ShardKey: tiers.ShardKeyOf(e.app, u)})
	}
	return e
}

func (e *migEnv) body(u int, extra string) string {
	return fmt.Sprintf(`{"app_id":%q,"user_id":%q%s}`, e.app, e.users[u], extra)
}

// batch sends one /v1/check/batch for users us (extra is appended to each
// item's JSON) and returns each item's answer.
func (e *migEnv) batch(t *testing.T, us []int, extra string) []batchItem {
	t.Helper()
	items := make([]string, 0, len(us))
	for _, u := range us {
		items = append(items, e.body(u, extra))
	}
	a := call(t, "POST", e.q.URL+"/v1/check/batch", `{"checks":[`+strings.Join(items, ",")+`]}`)
	if a.status != http.StatusOK || a.header.Get("Quota-Enforced") != "" {
		t.Fatalf("batch of %d: %d %q %.300s\nquotad's log: %s", len(us), a.status, a.header.Get("Quota-Enforced"), a.raw, tail(e.q.Logs(), 20))
	}
	var out struct {
		Results []batchItem `json:"results"`
	}
	if err := json.Unmarshal(a.raw, &out); err != nil || len(out.Results) != len(us) {
		t.Fatalf("batch of %d: %v %s", len(us), err, tail(string(a.raw), 3))
	}
	return out.Results
}

type batchItem struct {
	Allowed bool `json:"allowed"`
	Rules   []struct {
		Remaining int    `json:"remaining"`
		Tier      string `json:"tier"`
	} `json:"rules"`
}

// inBatches calls fn with the users for which keep is true, 500 at a time
// (1,000 items would pass the 64 KiB body limit).
func inBatches(keep func(u int) bool, fn func(us []int)) {
	var us []int
	for u := range migCells {
		if keep(u) {
			us = append(us, u)
		}
		if len(us) == 500 || (u == migCells-1 && len(us) > 0) {
			fn(us)
			us = nil
		}
	}
}

// seed makes every cell exist with a count of its own: user u gets u%3+1
// calls. It returns the calls allowed per user.
func (e *migEnv) seed(t *testing.T) map[int]int {
	t.Helper()
	allowed := map[int]int{}
	for round := range 3 {
		inBatches(func(u int) bool { return u%3 >= round }, func(us []int) {
			for i, it := range e.batch(t, us, "") {
				if !it.Allowed {
					t.Fatalf("seed call on %s denied", e.users[us[i]])
				}
				allowed[us[i]]++
			}
		})
	}
	return allowed
}

// counts reads every cell's count and tier through quotad (dry runs).
func (e *migEnv) counts(t *testing.T) ([]int, map[string]int) {
	t.Helper()
	counts := make([]int, migCells)
	byTier := map[string]int{}
	inBatches(func(int) bool { return true }, func(us []int) {
		for i, it := range e.batch(t, us, `,"dry_run":true`) {
			if len(it.Rules) != 1 || !it.Allowed {
				t.Fatalf("dry run on %s: %+v", e.users[us[i]], it)
			}
			counts[us[i]] = migLimit - it.Rules[0].Remaining - 1
			byTier[it.Rules[0].Tier]++
		}
	})
	return counts, byTier
}

// cellState is where the stores say one cell is.
type cellState struct {
	dir        string // H, M, warm, warm-moved, absent, or ? for anything else
	liveHot    bool   // the live hot key of the current window exists
	frozenHot  bool   // the key renamed away by a hot freeze exists
	coldRow    bool
	coldFilter bool // its tag's cold filter holds it
}

func (c cellState) tiers() []string {
	var in []string
	if c.liveHot {
		in = append(in, "hot")
	}
	if c.dir == "warm" || c.dir == "warm-moved" {
		in = append(in, "warm")
	}
	if c.coldRow {
		in = append(in, "cold")
	}
	return in
}

// states reads every cell's directory field, hot keys and cold row straight
// from Redis and MySQL.
func (e *migEnv) states(t *testing.T) []cellState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dirs, err := e.warm.DirRaw(ctx, e.refs)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.cold.Exists(ctx, e.refs)
	if err != nil {
		t.Fatal(err)
	}
	filtered, err := e.warm.MayBeCold(ctx, e.refs)
	if err != nil {
		t.Fatal(err)
	}
	idx := time.Now().UnixMilli() / migWindow.Milliseconds()
	pipe := e.rdb.Pipeline()
	live := make([]*redis.IntCmd, len(e.refs))
	frozen := make([]*redis.IntCmd, len(e.refs))
	for i := range e.refs {
		key := e.hot.Key(&tiers.Cell{Tag: e.refs[i].Tag, Key: tiers.FixedKeyOf(e.refs[i].ID(), idx)})
		live[i] = pipe.Exists(ctx, key)
		frozen[i] = pipe.Exists(ctx, key+"~")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	out := make([]cellState, len(e.refs))
	for i := range e.refs {
		out[i] = cellState{dir: dirClass(dirs[i]), liveHot: live[i].Val() == 1, frozenHot: frozen[i].Val() == 1, coldRow: rows[i], coldFilter: filtered[i]}
	}
	return out
}

func dirClass(v string) string {
	switch v {
	case "":
		return "absent"
	case warm.DirHot, warm.DirMoving:
		return v
	}
	if r, ok := warm.IsRecord(v); ok {
		if r.Moved {
			return "warm-moved"
		}
		return "warm"
	}
	return "?"
}

// summary tallies states: "dir H 2250, dir M 750, live hot 2250, frozen hot 750, cold rows 0".
func summary(ss []cellState) string {
	dirs := map[string]int{}
	var live, frozen, cold int
	for _, s := range ss {
		dirs[s.dir]++
		live += b2i(s.liveHot)
		frozen += b2i(s.frozenHot)
		cold += b2i(s.coldRow)
	}
	var parts []string
	for d, n := range dirs {
		parts = append(parts, fmt.Sprintf("dir %s %d", d, n))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s, live hot keys %d, frozen hot keys %d, cold rows %d", strings.Join(parts, ", "), live, frozen, cold)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (e *migEnv) journal(t *testing.T) int64 {
	t.Helper()
	n, err := e.rdb.HLen(context.Background(), migPrefix+"mig:journal").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// migrate runs a migration cycle through quotad. A cycle after a crash
// joins the dead instance's cycle and waits for its part leases to lapse
// (30 s), longer than the tests' usual client timeout.
func (e *migEnv) migrate() (answer, error) {
	req, err := http.NewRequest("POST", e.q.URL+"/v1/admin/migrate", nil)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, raw: raw}, err
}

// killMidCycle starts a migration cycle and SIGKILLs quotad delay after the
// cycle's first journal entry appears. It fails the test if the cycle ended
// before the kill.
func (e *migEnv) killMidCycle(t *testing.T, delay time.Duration) (journaledAfter time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		a, err := e.migrate()
		if err == nil {
			err = fmt.Errorf("cycle answered %d %s", a.status, a.raw)
		}
		done <- err
	}()
	ctx := context.Background()
	for e.rdb.Exists(ctx, migPrefix+"mig:journal").Val() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the cycle ended before any move was journaled: %v", err)
		default:
		}
		if time.Since(began) > 20*time.Second {
			t.Fatal("no move journaled within 20 s")
		}
		time.Sleep(time.Millisecond)
	}
	journaledAfter = time.Since(began)
	time.Sleep(delay)
	e.q.Kill()
	if err := <-done; err != nil && strings.HasPrefix(err.Error(), "cycle answered") {
		t.Fatalf("the cycle finished before the kill (%s after it began): %v", time.Since(began), err)
	}
	return journaledAfter
}

func runMigrationKill(t *testing.T, dir migDirection, delay time.Duration) {
	e := newMigEnv(t, dir)
	fig := newFigures(t)
	allowed := e.seed(t)
	e.toSource(t, dir)
	_, before := e.counts(t)

	// Checks on the cells being moved: 400/s, each on another user (7919 is
	// prime to migCells).
	body := func(seq int64) []byte { return []byte(e.body(int((seq*7919)%migCells), "")) }
	load := StartLoad(LoadConfig{URLs: []string{e.q.URL}, Rate: 400, Workers: 16, Body: body, Timeout: 10 * time.Second})
	time.Sleep(300 * time.Millisecond)
	journaledAfter := e.killMidCycle(t, delay)
	killed := time.Now()
	time.Sleep(100 * time.Millisecond)
	ss := load.Stop()
	lost, other := tallyLoad(t, ss, killed, allowed)

	atKill := e.states(t)
	journal := e.journal(t)

	e.q.Start()
	restarted := time.Since(killed)
	probe := e.probeFrozen(t, firstFrozen(atKill))
	repairedIn := e.waitRepaired(t, killed)
	next := e.nextCycle(t)

	counts, after := e.counts(t)
	e.assertExact(t, counts, allowed, lost)
	e.assertOneTierEach(t)
	assertAlive(t, e.q)
	fig.add("%s, %d cells in %v, %d checks under the cycle (%v), first journal entry %s after the cycle began, SIGKILL %s later",
		dir.name, migCells, before, len(ss), ss.Tally(), journaledAfter.Round(time.Millisecond), delay)
	fig.add("at the kill: journal %d, %s", journal, summary(atKill))
	fig.add("restarted in %s; %s; journal empty %s after the kill", restarted.Round(time.Millisecond), probe, repairedIn.Round(100*time.Millisecond))
	fig.add("next cycle %s; after it cells %v, every count = calls answered 200 (+ %d answers lost in flight, %d other), each cell in one tier",
		strings.TrimSpace(string(next.raw)), after, sumLost(lost), other)
}

// toSource sends the seeded cells to the direction's source tier with a
// cycle under its setup thresholds, then restarts quotad with the
// direction's own.
func (e *migEnv) toSource(t *testing.T, dir migDirection) {
	t.Helper()
	if dir.setup == nil {
		return
	}
	e.nextCycle(t)
	e.q.Kill()
	e.q.Setenv(dir.env...)
	e.q.Start()
}

// nextCycle runs a migration cycle and fails the test if it reports a
// failure.
func (e *migEnv) nextCycle(t *testing.T) answer {
	t.Helper()
	a, err := e.migrate()
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("the next cycle: %v %d %s", err, a.status, a.raw)
	}
	var rep struct {
		Failures int `json:"failures"`
	}
	if err := json.Unmarshal(a.raw, &rep); err != nil || rep.Failures != 0 {
		t.Errorf("the next cycle failed: %v %s", err, a.raw)
	}
	return a
}

// tallyLoad adds the load's allowed calls to allowed and returns, per user,
// the calls whose answer was lost at the kill (counted or not).
func tallyLoad(t *testing.T, ss Samples, killed time.Time, allowed map[int]int) (map[int]int, int) {
	t.Helper()
	lost := map[int]int{}
	other := 0
	for _, s := range ss {
		u := int((s.Seq * 7919) % migCells)
		switch {
		case s.Status == http.StatusOK && s.Enforced == "":
			allowed[u]++
		case s.Status == 0 && s.Intended.Before(killed):
			lost[u]++
		case s.Status == 0:
		default:
			other++
			t.Errorf("unexpected answer under the cycle: %s (after %s)", s.Outcome(), s.Latency)
		}
	}
	return lost, other
}

func sumLost(lost map[int]int) int {
	n := 0
	for _, v := range lost {
		n += v
	}
	return n
}

// firstFrozen is the first cell a move left frozen (-1 if none).
func firstFrozen(ss []cellState) int {
	for i, s := range ss {
		if s.dir == warm.DirMoving || s.dir == "warm-moved" {
			return i
		}
	}
	return -1
}

// probeFrozen times a dry run on a cell the kill left frozen, before the
// repair (its lease has not lapsed yet).
func (e *migEnv) probeFrozen(t *testing.T, u int) string {
	t.Helper()
	if u < 0 {
		return "no cell left frozen"
	}
	began := time.Now()
	a, err := tryCall("POST", e.q.URL+"/v1/check", e.body(u, `,"dry_run":true`))
	if err != nil {
		return fmt.Sprintf("a dry run on a frozen cell: %v after %s", err, time.Since(began).Round(time.Millisecond))
	}
	return fmt.Sprintf("a dry run on a frozen cell before the repair: %d enforced=%q after %s",
		a.status, a.header.Get("Quota-Enforced"), time.Since(began).Round(time.Millisecond))
}

// waitRepaired waits until the restarted worker's repair (every 5 s, once
// the dead worker's 30 s leases lapse) has emptied the journal.
func (e *migEnv) waitRepaired(t *testing.T, killed time.Time) time.Duration {
	t.Helper()
	if err := PollUntil(90*time.Second, 250*time.Millisecond, func() error {
		if n := e.journal(t); n > 0 {
			return fmt.Errorf("%d journal entries left", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("never repaired: %v", err)
	}
	return time.Since(killed)
}

func (e *migEnv) assertExact(t *testing.T, counts []int, allowed, lost map[int]int) {
	t.Helper()
	bad := 0
	for u, got := range counts {
		if got < allowed[u] || got > allowed[u]+lost[u] {
			if bad++; bad <= 10 {
				t.Errorf("%s: count %d after the repair; %d calls answered 200, %d answers lost in flight", e.users[u], got, allowed[u], lost[u])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cells off", bad, len(counts))
	}
}

func (e *migEnv) assertOneTierEach(t *testing.T) {
	t.Helper()
	bad := 0
	for u, s := range e.states(t) {
		in := s.tiers()
		ok := len(in) == 1 && !s.frozenHot && s.dir != warm.DirMoving && s.dir != "warm-moved" && s.dir != "?"
		if ok && in[0] == "hot" {
			ok = s.dir == "absent"
		}
		if ok && in[0] == "cold" {
			ok = s.dir == "absent" && s.coldFilter
		}
		if !ok {
			if bad++; bad <= 10 {
				t.Errorf("%s after the repair: %+v (in %v)", e.users[u], s, in)
			}
		}
	}
	if n := e.journal(t); n != 0 {
		t.Errorf("%d journal entries left after the next cycle", n)
	}
	if bad > 0 {
		t.Errorf("%d of %d cells not in exactly one tier", bad, migCells)
	}
}

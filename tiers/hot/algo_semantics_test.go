package hot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tiermodel"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// Hand-computed cases: what each algorithm answers, worked out on paper,
// through the real script (and, each time, through the model too).

// t0 is a whole hour (and second) in simulated time.
const t0 = int64(1_800_000_000_000)

type algoEnv struct {
	t      *testing.T
	s      *Store
	models map[string]tiermodel.Model
}

func newAlgoEnv(t *testing.T, o Options) *algoEnv {
	rdb, prefix := testenv.Redis(t)
	o.Prefix = prefix
	return &algoEnv{t: t, s: NewStore(rdb, o), models: map[string]tiermodel.Model{}}
}

func algoCell(a rules.Algorithm, limit int64, window time.Duration, id string) tiers.Cell {
	vals := []string{id}
	return tiers.Cell{
		Algorithm: a, Limit: limit, Window: window,
		Identity: tiers.IdentityOf(string(a), vals),
		Key:      tiers.CounterKeyOf(string(a), vals, int64(window/time.Second), 0),
		Tag:      tiers.TagOf(id),
	}
}

// check runs one op through the store and the model and fails on any
// difference; it returns the store's op.
func (e *algoEnv) check(now, cost int64, mode tiers.Mode, cells ...tiers.Cell) *tiers.Op {
	e.t.Helper()
	op := &tiers.Op{Cost: cost, Mode: mode}
	var mcs []tiermodel.Cell
	for _, c := range cells {
		if c.Algorithm == rules.FixedWindow {
			idx := now / c.Window.Milliseconds()
			c.Key = tiers.CounterKeyOf(string(c.Algorithm), []string{fmt.Sprint(c.Identity)}, int64(c.Window/time.Second), idx)
		}
		op.Cells = append(op.Cells, c)
		mk := fmt.Sprintf("%x|%s|%d", c.Identity, c.Algorithm, c.Window)
		m := e.models[mk]
		if m == nil {
			var err error
			if m, err = tiermodel.New(c.Algorithm, c.Limit, c.Window); err != nil {
				e.t.Fatal(err)
			}
			e.models[mk] = m
		}
		mcs = append(mcs, tiermodel.Cell{Model: m, Shadow: c.Shadow})
	}
	if err := e.s.Check(context.Background(), time.UnixMilli(now), []*tiers.Op{op}); err != nil {
		e.t.Fatal(err)
	}
	// Simulated time stands still while the test runs: keep the keys from
	// expiring in real time (TestAlgo_KeysExpireWhenTheyNoLongerMatter
	// checks the TTLs).
	for i := range op.Cells {
		e.s.rdb.Persist(context.Background(), e.s.Key(&op.Cells[i]))
	}
	want, committed := checkModels(time.UnixMilli(now), cost, mode, mcs)
	for i := range want {
		if op.Out[i] != want[i] {
			e.t.Fatalf("at %+d ms cost %d: redis %+v, model %+v", now-t0, cost, op.Out[i], want[i])
		}
	}
	if committed != op.Committed {
		e.t.Fatalf("at %+d ms: committed redis %v model %v", now-t0, op.Committed, committed)
	}
	return op
}

// expect checks one cell's answer: allowed, remaining, reset and retry (ms).
func (e *algoEnv) expect(now, cost int64, mode tiers.Mode, c tiers.Cell, allowed bool, remaining, reset, retry int64) {
	e.t.Helper()
	o := e.check(now, cost, mode, c).Out[0]
	want := tiers.Outcome{Allowed: allowed, Remaining: remaining, ResetAfter: ms(reset), RetryAfter: ms(retry), Tier: tiers.Hot}
	if o != want {
		e.t.Fatalf("at t0%+d ms cost %d %s: got %+v, want %+v", now-t0, cost, c.Algorithm, o, want)
	}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func TestAlgo_SlidingWindowCountsTheTrailingSeconds(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.SlidingWindow, 3, 10*time.Second, "sw")
	e.expect(t0+500, 1, tiers.Enforce, c, true, 2, 9500, 0) // second 0 leaves at t0+10 s
	e.expect(t0+1200, 1, tiers.Enforce, c, true, 1, 8800, 0)
	e.expect(t0+1900, 1, tiers.Enforce, c, true, 0, 8100, 0)
	e.expect(t0+2000, 1, tiers.Enforce, c, false, 0, 8000, 8000) // full until second 0 leaves
	e.expect(t0+2000, 1, tiers.DryRun, c, false, 0, 8000, 8000)
	e.expect(t0+9999, 1, tiers.Enforce, c, false, 0, 1, 1)
	e.expect(t0+10000, 1, tiers.Enforce, c, true, 0, 1000, 0) // oldest now second 1, 2 calls
	// cost 2 needs two of the three calls gone: both of second 1, at 11 s
	e.expect(t0+10500, 2, tiers.Enforce, c, false, 0, 500, 500)
	e.expect(t0+11000, 2, tiers.DryRun, c, true, 0, 9000, 0)      // second 1 left: 1 in, 2 would fit
	e.expect(t0+11000, 4, tiers.Enforce, c, false, 2, 9000, 9000) // over the limit: retry = until empty
	// report counts past the limit and never denies the op
	op := e.check(t0+11000, 5, tiers.Report, c)
	if !op.Committed || op.Out[0].Allowed || op.Out[0].Remaining != 0 {
		t.Fatalf("report: %+v", op)
	}
	e.expect(t0+11000, 1, tiers.Enforce, c, false, 0, 9000, 10000) // 6 in window: 4 must leave (second 11 at 21 s)
}

func TestAlgo_SlidingWindowOver24HoursIsExactToTheSecond(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.SlidingWindow, 2, 24*time.Hour, "sw24")
	day := int64(24 * 3600 * 1000)
	start := t0 + 37*60*1000 + 13*1000 + 250 // mid-hour, mid-minute
	e.expect(start, 1, tiers.Enforce, c, true, 1, day-250, 0)
	e.expect(start+5*3600*1000+999, 1, tiers.Enforce, c, true, 0, day-5*3600*1000-999-250, 0)
	e.expect(start+day-251, 1, tiers.Enforce, c, false, 0, 1, 1)               // the first call's second ends at start-250+day
	e.expect(start+day-250, 1, tiers.Enforce, c, true, 0, 5*3600*1000+1000, 0) // the second's second leaves 5 h 1 s later
}

// A server whose clock is behind the last commit's (the window's start
// moved back) is answered from a recount; the running count stays exact
// for the clocks after it.
func TestAlgo_SlidingWindowUnderClockSkew(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.SlidingWindow, 5, 10*time.Second, "skew")
	check := func(now, cost int64) tiers.Outcome {
		t.Helper()
		op := &tiers.Op{Cost: cost, Mode: tiers.Enforce, Cells: []tiers.Cell{c}}
		if err := e.s.Check(context.Background(), time.UnixMilli(now), []*tiers.Op{op}); err != nil {
			t.Fatal(err)
		}
		return op.Out[0]
	}
	check(t0+10500, 1)
	check(t0+11200, 1)
	// 300 ms behind: second 10, whose window starts a second earlier; the
	// call of second 11 is in the current 10 s bucket and counts
	if o := check(t0+10900, 1); !o.Allowed || o.Remaining != 2 || o.ResetAfter != ms(9100) {
		t.Fatalf("behind: %+v", o)
	}
	// and back on time: 3 calls (seconds 10, 10, 11), then the window moves on
	if o := check(t0+12000, 2); !o.Allowed || o.Remaining != 0 || o.ResetAfter != ms(8000) {
		t.Fatalf("on time: %+v", o)
	}
	if o := check(t0+19999, 1); o.Allowed || o.RetryAfter != ms(1) {
		t.Fatalf("full: %+v", o)
	}
	if o := check(t0+20000, 2); !o.Allowed || o.Remaining != 0 || o.ResetAfter != ms(1000) {
		t.Fatalf("two left at 20 s: %+v", o)
	}
}

func TestAlgo_TokenBucketRefillsContinuously(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.TokenBucket, 10, 10*time.Second, "tb") // one token a second
	e.expect(t0, 11, tiers.DryRun, c, false, 10, 0, 0)         // never fits: retry = time to full = 0
	e.expect(t0, 10, tiers.Enforce, c, true, 0, 10000, 0)
	e.expect(t0, 1, tiers.Enforce, c, false, 0, 10000, 1000)
	e.expect(t0+500, 1, tiers.Enforce, c, false, 0, 9500, 500)
	e.expect(t0+1000, 1, tiers.Enforce, c, true, 0, 10000, 0)
	e.expect(t0+3500, 1, tiers.DryRun, c, true, 1, 8500, 0) // 2.5 tokens, 1.5 after
	e.expect(t0+3500, 3, tiers.Enforce, c, false, 2, 7500, 500)
	// report drives it into debt, at most one full bucket
	e.expect(t0+3500, 30, tiers.Report, c, false, 0, 20000, 20000)
	e.expect(t0+13500, 1, tiers.Enforce, c, false, 0, 10000, 1000) // back to 0 tokens after 10 s
	e.expect(t0+23500, 10, tiers.Enforce, c, true, 0, 10000, 0)
}

func TestAlgo_TokenBucketFractionalRates(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.TokenBucket, 3, 7*time.Second, "tb3") // a token every 2333.33 ms
	e.expect(t0, 3, tiers.Enforce, c, true, 0, 7000, 0)
	e.expect(t0+2333, 1, tiers.Enforce, c, false, 0, 4667, 1)
	e.expect(t0+2334, 1, tiers.Enforce, c, true, 0, 7000, 0) // 2 units left: 6999.3 ms to full
}

func TestAlgo_SlidingLogIsExactToTheMillisecond(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.SlidingLog, 2, time.Second, "sl")
	e.expect(t0, 1, tiers.Enforce, c, true, 1, 1000, 0)
	e.expect(t0+100, 1, tiers.Enforce, c, true, 0, 900, 0)
	e.expect(t0+999, 1, tiers.Enforce, c, false, 0, 1, 1)
	e.expect(t0+1000, 1, tiers.Enforce, c, true, 0, 100, 0)    // t0's call left at t0+1000
	e.expect(t0+1050, 2, tiers.Enforce, c, false, 0, 50, 950)  // both must leave: t0+1000 at t0+2000
	e.expect(t0+1050, 3, tiers.Enforce, c, false, 0, 50, 950)  // over the limit: until empty
	e.expect(t0+1100, 2, tiers.Enforce, c, false, 1, 900, 900) // t0+100 left
	e.expect(t0+2000, 2, tiers.Enforce, c, true, 0, 1000, 0)   // a cost of 2 takes two slots
	e.expect(t0+2999, 1, tiers.Enforce, c, false, 0, 1, 1)     // both slots at t0+2000
	e.expect(t0+2999, 1, tiers.Report, c, false, 0, 1, 1)      // report overwrites the oldest slot: t0+2000, t0+2999 left
}

func TestAlgo_MinIntervalSpacesCalls(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.MinInterval, 2, time.Second, "mi") // 500 ms apart
	e.expect(t0, 1, tiers.Enforce, c, true, 0, 500, 0)
	e.expect(t0+499, 1, tiers.Enforce, c, false, 0, 1, 1)
	e.expect(t0+500, 1, tiers.Enforce, c, true, 0, 500, 0)
	e.expect(t0+1000, 2, tiers.Enforce, c, true, 0, 1000, 0) // cost 2 = two intervals
	e.expect(t0+1999, 1, tiers.DryRun, c, false, 0, 1, 1)
	e.expect(t0+3000, 3, tiers.Enforce, c, false, 1, 0, 0) // over the limit: never fits
	e.expect(t0+3000, 1, tiers.DryRun, c, true, 0, 500, 0)
	c3 := algoCell(rules.MinInterval, 3, time.Second, "mi3") // ceil(1000/3) = 334 ms
	e.expect(t0, 1, tiers.Enforce, c3, true, 0, 334, 0)
	e.expect(t0+333, 1, tiers.Enforce, c3, false, 0, 1, 1)
	e.expect(t0+334, 1, tiers.Enforce, c3, true, 0, 334, 0)
	// report: debt of at most limit intervals past now
	e.expect(t0+334, 9, tiers.Report, c3, false, 0, 1002, 1002)
}

func TestAlgo_FixedWindowKeepsItsAnswers(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	c := algoCell(rules.FixedWindow, 2, time.Minute, "fw")
	e.expect(t0+250, 1, tiers.Enforce, c, true, 1, 59750, 0)
	e.expect(t0+300, 1, tiers.Enforce, c, true, 0, 59700, 0)
	e.expect(t0+400, 1, tiers.Enforce, c, false, 0, 59600, 59600)
	e.expect(t0+60000, 2, tiers.Enforce, c, true, 0, 60000, 0)
}

// A denied op counts nothing in any cell, whatever the algorithms; a shadow
// cell never denies the op.
func TestAlgo_AllOrNothingAcrossAlgorithms(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		e := newAlgoEnv(t, Options{SplitBySlot: split})
		id := fmt.Sprint("aon", split)
		var cells []tiers.Cell
		for _, a := range []rules.Algorithm{rules.SlidingWindow, rules.TokenBucket, rules.SlidingLog, rules.MinInterval} {
			c := algoCell(a, 5, time.Hour, id)
			c.Tag = tiers.TagOf(string(a)) // one part per algorithm when split
			cells = append(cells, c)
		}
		tight := algoCell(rules.FixedWindow, 1, time.Hour, id+"tight")
		op := e.check(t0, 1, tiers.Enforce, append(cells, tight)...)
		if !op.Committed {
			t.Fatal("first call denied")
		}
		for range 3 {
			if op := e.check(t0+1, 1, tiers.Enforce, append(cells, tight)...); op.Committed || op.Allowed() {
				t.Fatalf("split=%v: second call through: %+v", split, op.Out)
			}
		}
		shadow := tight
		shadow.Shadow = true
		if op := e.check(t0+2, 1, tiers.Enforce, append(cells[:2:2], shadow)...); !op.Committed || op.Out[2].Allowed {
			t.Fatalf("shadow cell denied the op: %+v", op.Out)
		}
	}
}

// Refund gives back exactly what a split part counted: the state after the
// refund answers every later call as if the denied op had never been.
func TestAlgo_RefundRestoresEveryAlgorithm(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{SplitBySlot: true})
	for _, a := range []rules.Algorithm{rules.FixedWindow, rules.SlidingWindow, rules.TokenBucket, rules.SlidingLog, rules.MinInterval} {
		c := algoCell(a, 4, time.Minute, "refund")
		c.Tag = tiers.TagOf("a")
		blocker := algoCell(rules.FixedWindow, 1, time.Minute, "blocker")
		blocker.Tag = tiers.TagOf("b")
		e.check(t0, 1, tiers.Enforce, c)             // some history
		e.check(t0+30000, 1, tiers.Enforce, c)       // a full ring for the log after the next
		e.check(t0+59000, 1, tiers.Enforce, blocker) // uses the blocker up
		for i := range 4 {
			// the first part (c) allows and counts, the second denies: refund
			op := e.check(t0+59000+int64(i), 2, tiers.Enforce, c, blocker)
			if op.Committed {
				t.Fatalf("%s: op counted", a)
			}
		}
		// and later calls still agree with the model, which never counted them
		for i := range 8 {
			e.check(t0+59500+int64(i)*7000, 1, tiers.Enforce, c)
		}
	}
}

// A rule's limit may change under existing state: the log is cut to the
// newest calls, the bucket to its capacity.
func TestAlgo_LimitChangesKeepStateSane(t *testing.T) {
	t.Parallel()
	e := newAlgoEnv(t, Options{})
	big := algoCell(rules.SlidingLog, 5, time.Minute, "lc")
	for i := range 5 {
		e.expect(t0+int64(i)*1000, 1, tiers.Enforce, big, true, int64(4-i), 60000-int64(i)*1000, 0)
	}
	small := big
	small.Limit = 3
	// only the newest 3 times are kept: t0+2s, 3s, 4s
	o := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{small}}
	if err := e.s.Check(context.Background(), time.UnixMilli(t0+5000), []*tiers.Op{o}); err != nil {
		t.Fatal(err)
	}
	if o.Out[0].Allowed || o.Out[0].Remaining != 0 || o.Out[0].RetryAfter != ms(57000) {
		t.Fatalf("under the lower limit: %+v", o.Out[0])
	}
	o = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{small}}
	if err := e.s.Check(context.Background(), time.UnixMilli(t0+62000), []*tiers.Op{o}); err != nil {
		t.Fatal(err)
	}
	// at t0+62 s the window (2 s, 62 s] holds t0+3 s, 4 s: one slot left, taken now
	if !o.Out[0].Allowed || o.Out[0].Remaining != 0 || o.Out[0].ResetAfter != ms(1000) {
		t.Fatalf("after the limit change: %+v", o.Out[0])
	}
	tb := algoCell(rules.TokenBucket, 10, 10*time.Second, "lc")
	e.expect(t0, 1, tiers.Enforce, tb, true, 9, 1000, 0)
	tbSmall := tb
	tbSmall.Limit = 2
	o = &tiers.Op{Cost: 1, Mode: tiers.DryRun, Cells: []tiers.Cell{tbSmall}}
	if err := e.s.Check(context.Background(), time.UnixMilli(t0), []*tiers.Op{o}); err != nil {
		t.Fatal(err)
	}
	if !o.Out[0].Allowed || o.Out[0].Remaining != 1 {
		t.Fatalf("token bucket after the limit change: %+v", o.Out[0])
	}
}

// Each key expires once it can no longer change an answer: fixed window at
// the window's end, sliding window a window after the last call, token
// bucket when full again, sliding log when its newest call leaves, min
// interval when the next call may go (each plus the jitter, 0 here).
func TestAlgo_KeysExpireWhenTheyNoLongerMatter(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	s := NewStore(rdb, Options{Prefix: prefix})
	now := time.Now().Truncate(time.Hour).Add(90 * time.Second) // 30 s before a minute ends
	cases := []struct {
		a    rules.Algorithm
		cost int64
		want time.Duration
	}{
		{rules.FixedWindow, 1, 30 * time.Second},
		{rules.SlidingWindow, 1, time.Minute},
		{rules.TokenBucket, 3, 18 * time.Second}, // 3 of 10 tokens at one per 6 s
		{rules.SlidingLog, 1, time.Minute},
		{rules.MinInterval, 2, 12 * time.Second}, // two intervals of 6 s
	}
	for _, tc := range cases {
		c := algoCell(tc.a, 10, time.Minute, "ttl")
		if tc.a == rules.FixedWindow {
			c.Key = tiers.CounterKeyOf("ttl", nil, 60, now.UnixMilli()/60000)
		}
		if err := s.Check(context.Background(), now, []*tiers.Op{{Cost: tc.cost, Cells: []tiers.Cell{c}}}); err != nil {
			t.Fatal(err)
		}
		ttl, err := rdb.PTTL(context.Background(), s.Key(&c)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl > tc.want || ttl < tc.want-5*time.Second {
			t.Errorf("%s: TTL %s, want %s", tc.a, ttl, tc.want)
		}
	}
}

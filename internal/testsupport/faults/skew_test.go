//go:build faults && partitions

package faults

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/faults/history"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// Two quotad on one Redis, the second's clock 1 s ahead
// (QUOTA_TEST_CLOCK_OFFSET), each algorithm's identities called through
// both. A decision's time is the deciding quotad's clock, so what skew
// costs is judged per algorithm against the bound docs/operations.md
// states ("Faults and guarantees"):
//
//   - fixed_window: exact per counter on the deciding clock (no window's
//     counter ever allows more than the limit); in real time a window's
//     boundary moves by up to the skew, so a real window can take up to the
//     limit plus what the next counter allows within the skew before its
//     boundary (reported).
//   - sliding_log: never more than limit in any real span of window − skew.
//   - sliding_window (whole seconds): never more than limit in any real
//     span of window − 1 s − 2 × skew: an instance behind does not read
//     the bucket of the second the instance ahead is in, and the instance
//     ahead prunes a second early (derived from the script's structure;
//     the history's tightest span is reported).
//   - token_bucket: never more than limit + (span + skew) × limit / window
//     in any real span (a clock ahead refills up to the skew early; one
//     behind never takes refill back: the bucket keeps the latest time).
//   - min_interval (interval I = window / limit): never more than limit in
//     any real span of window − skew. Each allowance stores next = its
//     clock's now + I and the next allowance needs its own clock's now >=
//     next, so m allowances after one take at least m × I − skew of real
//     time (the offsets telescope): consecutive ones may come I − skew
//     apart, but no run of them gains more than the skew in all.
func TestClockSkew_InstancesOneSecondApartStayWithinTheStatedBound(t *testing.T) {
	fig := newFigures(t)
	const (
		skew   = time.Second
		window = 5 * time.Second
		limit  = 20
		n      = 8 // identities per algorithm
	)
	algos := []string{"fixed_window", "sliding_log", "sliding_window", "token_bucket", "min_interval"}
	dims := []string{"fw", "sl", "sw", "tb", "mi"}
	rules := "rules:\n"
	for i, a := range algos {
		rules += fmt.Sprintf("  - {name: skew_%s, dimensions: [%s], limit: %d, window: %s, algorithm: %s}\n", dims[i], dims[i], limit, window, a)
	}
	r := testenv.StartRedis(t)
	// QUOTA_TTL_JITTER=5s: every key's extra TTL is the 5 s floor, so a
	// key that expired under the instance behind would show here in every
	// run (with 0-5 s, as before the floor, in most runs).
	env := []string{"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_FAIL_MODE=closed", "QUOTA_TIERING=off", "QUOTA_ANALYTICS=off", "QUOTA_TTL_JITTER=5s",
		"QUOTA_RULES=" + writeRules(t, rules)}
	q0 := testenv.StartQuotad(t, env...)
	q1 := testenv.StartQuotad(t, append(env, "QUOTA_TEST_CLOCK_OFFSET="+skew.String())...)

	// Request seq: instance seq%2, algorithm (seq/2)%5, identity (seq/8)%n:
	// every identity is called through both instances, 8 times a second.
	run := testenv.RandomHex(4)
	algo := func(seq int64) int { return int(seq/2) % len(algos) }
	identity := func(seq int64) string {
		return fmt.Sprintf("%s:%s-%d", dims[algo(seq)], run, (seq/8)%n)
	}
	body := func(seq int64) []byte {
		a := algo(seq)
		return fmt.Appendf(nil, `{"%s":"%s-%d"}`, dims[a], run, (seq/8)%n)
	}
	rate := float64(8 * n * len(algos))
	load := StartLoad(LoadConfig{URLs: []string{q0.URL, q1.URL}, Rate: rate, Workers: 32, Body: body})
	time.Sleep(4*window + 2*time.Second) // four windows and then some
	ss := load.Stop()
	assertAlive(t, q0)
	assertAlive(t, q1)
	if bad := ss.Where(func(s Sample) bool { return !decided(s) }); len(bad) > 0 {
		t.Fatalf("%d of %d checks not decided: %v", len(bad), len(ss), bad.Tally())
	}

	all := ops(ss, identity, func(Sample) bool { return true })
	byAlgo := make([][]history.Op, len(algos))
	for i, op := range all {
		a := algo(ss[i].Seq)
		byAlgo[a] = append(byAlgo[a], op)
	}
	slack := history.Options{Slack: 2 * time.Millisecond}
	offsets := history.Options{Slack: 2 * time.Millisecond, Offsets: map[int]time.Duration{1: skew}}
	w := window.Seconds()
	tests := []struct {
		algo  string
		spec  history.Spec
		opts  history.Options
		bound string
	}{
		{"fixed_window", history.Spec{Limit: limit, Window: window}, offsets, "limit per counter, on the deciding clock"},
		{"sliding_log", history.Spec{Limit: limit, Span: window - skew}, slack, "limit per real span of window - skew"},
		{"sliding_window", history.Spec{Limit: limit, Span: window - time.Second - 2*skew}, slack, "limit per real span of window - 1 s - 2 x skew"},
		{"token_bucket", history.Spec{Limit: limit + int64(math.Ceil((w+skew.Seconds())*limit/w)), Span: window}, slack,
			"limit + (window + skew) x limit / window per real window"},
		{"min_interval", history.Spec{Limit: limit, Span: window - skew}, slack, "limit per real span of window - skew"},
	}
	for i, tc := range tests {
		t.Run(tc.algo, func(t *testing.T) {
			rep := history.Check(tc.spec, byAlgo[i], nil, tc.opts)
			t.Logf("%s (bound: %s)", rep, tc.bound)
			fig.add("%s: %s; bound %s", tc.algo, rep.Summary(), tc.bound)
			if tc.spec.Span > 0 {
				fig.add("%s: the tightest span of %d enforced allowances of one identity: %s", tc.algo, tc.spec.Limit+1, rep.Tightest.Round(time.Millisecond))
			}
			if rep.Over > 0 {
				t.Errorf("%s went over its stated bound (%s):\n%s", tc.algo, tc.bound, rep)
			}
			if tc.spec.Span == 0 && rep.Count(history.UnderServe) > 0 {
				t.Errorf("%s under-served:\n%s", tc.algo, rep)
			}
			if rep.Allowed == 0 || rep.Denied == 0 {
				t.Errorf("%s: the load must both pass and hit the limit (allowed %d, denied %d)", tc.algo, rep.Allowed, rep.Denied)
			}
		})
	}
	// What the skew costs the others: the same histories judged against
	// the bound without skew (reported, not asserted).
	noSkew := map[int]history.Spec{
		1: {Limit: limit, Span: window},
		2: {Limit: limit, Span: window - time.Second},
		3: {Limit: 2 * limit, Span: window},
		4: {Limit: limit, Span: window},
	}
	for i := 1; i < len(algos); i++ {
		spec := noSkew[i]
		rep := history.Check(spec, byAlgo[i], nil, slack)
		fig.add("%s against its bound without skew (%d per %s): %d calls over", algos[i], spec.Limit, spec.Span, rep.Over)
	}
	// What the skew costs a fixed window in real time: the same history
	// judged on the test's clock, without the offsets.
	real := history.Check(history.Spec{Limit: limit, Window: window}, byAlgo[0], nil, slack)
	fig.add("fixed_window on the real clock: %d windows over the limit by %d calls in all (%d allowed)", real.Count(history.OverAdmission), real.Over, real.Allowed)
	t.Logf("fixed_window judged on the real clock: %s", real)
	if real.Over > int64(limit)*int64(real.Count(history.OverAdmission)) {
		t.Errorf("a real window took more than twice the limit:\n%s", real)
	}
}

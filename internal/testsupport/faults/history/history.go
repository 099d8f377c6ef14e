// Package history is the judge of quota's fault tests: a test records every
// check it sent (identity, instance, when it was sent and answered, the
// decision, whether it was enforced) and, after the faults, what the store
// holds; Check then verifies the specification of a limit against that
// record without trusting anything quotad said about itself.
//
// What it verifies, for each identity and window:
//
//   - safety: never more enforced allowances than the limit (an
//     over-admission otherwise). Answers marked unenforced (fail open,
//     Quota-Enforced: false) are counted apart and never judged as
//     allowances: the fail mode promised nothing about them.
//   - no under-serving: while every store was reachable (Op.Healthy), an
//     enforced denial only when the calls that may have counted before it
//     left no room for it.
//   - no lost count, nothing doubled: when the test read the counters back
//     (Final), each holds at least the enforced allowances of its window
//     and at most those plus the calls whose fate is unknown.
//
// A decision's time is not observed from outside: it lies between Sent and
// Answered, read on the test's clock, moved by the deciding instance's clock
// offset when the test knows it (Options.Offsets) and widened by
// Options.Slack. An op whose window is ambiguous (that span crosses a window
// boundary) counts where it can make a violation certain, and nowhere else:
// the checker reports only what cannot be explained by any order of events
// consistent with the record (no false alarms, at the price of missing a
// violation hidden in that ambiguity).
package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Result is what an answer said.
type Result int

const (
	// Unknown: no decision came back (transport error, timeout, a 5xx such
	// as fail closed's 503): the call may or may not have been counted.
	Unknown Result = iota
	// Allowed: answered allowed (enforced or not: see Op.Enforced).
	Allowed
	// Denied: answered denied; a denial counts nothing.
	Denied
)

func (r Result) String() string {
	switch r {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	default:
		return "unknown"
	}
}

// Op is one check of one identity.
type Op struct {
	Identity string
	Instance int // which quotad answered (an index of the test's)
	Cost     int64
	Sent     time.Time // on the test's clock
	Answered time.Time // on the test's clock (for Unknown: when the test gave up)
	Result   Result
	// Enforced is false for an answer the fail mode gave (Quota-Enforced:
	// false): such an allowance is counted apart, never as the limit's.
	Enforced bool
	// Healthy: every store was reachable from Sent to Answered; only such
	// denials are judged for under-serving.
	Healthy bool
}

// Spec is the limit every recorded identity has.
type Spec struct {
	Limit int64
	// Window is the fixed window's length (windows aligned to the Unix
	// epoch). With Span set it is ignored.
	Window time.Duration
	// Span, when set, makes the safety rule "at most Limit enforced
	// allowances decided within any Span" (a sliding log, or a bound the
	// test states for another algorithm); windows, lost counts and
	// under-serving are not judged then.
	Span time.Duration
}

// Options are what the test knows about clocks.
type Options struct {
	// Offsets is each instance's clock offset from the test's clock
	// (QUOTA_TEST_CLOCK_OFFSET): an op decided by instance i at test time t
	// was decided at t+Offsets[i] on the clock that chose its window.
	Offsets map[int]time.Duration
	// Slack widens every op's decision span on both sides (the test's own
	// scheduling noise, an unknown skew).
	Slack time.Duration
}

// Kind names a violation.
type Kind string

// The violations Check reports.
const (
	OverAdmission Kind = "over-admission"
	UnderServe    Kind = "under-serve"
	LostCount     Kind = "lost count"
	Doubled       Kind = "doubled count"
)

// Violation is one finding.
type Violation struct {
	Kind     Kind
	Identity string
	Window   int64 // the window's index (0 with Spec.Span)
	Detail   string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s window %d: %s", v.Kind, v.Identity, v.Window, v.Detail)
}

// WindowKey names one counter: an identity in one window.
type WindowKey struct {
	Identity string
	Window   int64
}

// Report is the verdict on a history.
type Report struct {
	Ops        int
	Allowed    int // enforced allowances
	Denied     int // enforced denials
	Unenforced int // answers of the fail mode (allowed, unenforced)
	Unknown    int // no decision came back
	// Over is how many enforced allowances went over their limits, summed
	// over windows (or spans); Lost how many enforced allowances the store
	// no longer holds.
	Over, Lost int64
	// Tightest (Spec.Span only): the shortest span within which Limit+1
	// enforced allowances of one identity were certainly decided (0: never
	// that many) — the effective window the history shows.
	Tightest   time.Duration
	Violations []Violation
}

// Count is how many violations of kind k were found.
func (r Report) Count(k Kind) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == k {
			n++
		}
	}
	return n
}

// Summary is one line of figures.
func (r Report) Summary() string {
	return fmt.Sprintf("ops %d (allowed %d, denied %d, unenforced %d, unknown %d); over-admissions %d (%d over the limit); under-serves %d; lost counts %d (%d violations); doubled %d",
		r.Ops, r.Allowed, r.Denied, r.Unenforced, r.Unknown, r.Count(OverAdmission), r.Over, r.Count(UnderServe), r.Lost, r.Count(LostCount), r.Count(Doubled))
}

// String lists the summary and the first violations.
func (r Report) String() string {
	var b strings.Builder
	b.WriteString(r.Summary())
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "\n  … %d more", len(r.Violations)-i)
			break
		}
		b.WriteString("\n  " + v.String())
	}
	return b.String()
}

// Recorder collects ops from many goroutines.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
}

// Add records op.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Ops returns a copy of what was recorded.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// span is an op's possible decision times on the deciding clock.
func span(op Op, o Options) (from, to time.Time) {
	off := o.Offsets[op.Instance]
	return op.Sent.Add(off - o.Slack), op.Answered.Add(off + o.Slack)
}

func windowOf(t time.Time, w time.Duration) int64 {
	ms := t.UnixMilli()
	wm := w.Milliseconds()
	if ms < 0 {
		return -((-ms + wm - 1) / wm)
	}
	return ms / wm
}

// Check judges ops against spec. final, when not nil, is what each
// counter held once the test was over (read back through quotad or from
// Redis); a counter absent from it is not judged for lost counts.
func Check(spec Spec, ops []Op, final map[WindowKey]int64, o Options) Report {
	var rep Report
	rep.Ops = len(ops)
	byID := map[string][]Op{}
	for _, op := range ops {
		if op.Cost <= 0 {
			op.Cost = 1
		}
		switch {
		case op.Result == Allowed && op.Enforced:
			rep.Allowed++
		case op.Result == Allowed:
			rep.Unenforced++
		case op.Result == Denied && op.Enforced:
			rep.Denied++
		case op.Result == Denied:
			rep.Unenforced++ // a shadow or fail-closed-like denial: not judged
		default:
			rep.Unknown++
		}
		byID[op.Identity] = append(byID[op.Identity], op)
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if spec.Span > 0 {
			checkSpan(&rep, spec, id, byID[id], o)
		} else {
			checkFixed(&rep, spec, id, byID[id], final, o)
		}
	}
	return rep
}

// checkFixed judges one identity under fixed windows.
func checkFixed(rep *Report, spec Spec, id string, ops []Op, final map[WindowKey]int64, o Options) {
	type win struct {
		sure     int64 // enforced allowances certainly in this window
		maybe    int64 // calls that may have counted here (any outcome but a denial)
		denials  []Op
		possible []Op // ops that may have counted here, for under-serving
	}
	wins := map[int64]*win{}
	get := func(w int64) *win {
		if wins[w] == nil {
			wins[w] = &win{}
		}
		return wins[w]
	}
	for _, op := range ops {
		from, to := span(op, o)
		w0, w1 := windowOf(from, spec.Window), windowOf(to, spec.Window)
		for w := w0; w <= w1; w++ {
			x := get(w)
			if op.Result != Denied {
				x.maybe += op.Cost
				x.possible = append(x.possible, op)
			}
			if w0 == w1 && op.Result == Allowed && op.Enforced {
				x.sure += op.Cost
			}
			if w0 == w1 && op.Result == Denied && op.Enforced && op.Healthy {
				x.denials = append(x.denials, op)
			}
		}
	}
	ws := make([]int64, 0, len(wins))
	for w := range wins {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	for _, w := range ws {
		x := wins[w]
		if x.sure > spec.Limit {
			rep.Over += x.sure - spec.Limit
			rep.Violations = append(rep.Violations, Violation{OverAdmission, id, w,
				fmt.Sprintf("%d enforced allowances, limit %d", x.sure, spec.Limit)})
		}
		for _, d := range x.denials {
			// Calls that may have been counted before this denial was
			// decided: sent before it was answered.
			var before int64
			for _, p := range x.possible {
				if p.Sent.Before(d.Answered.Add(2 * o.Slack)) {
					before += p.Cost
				}
			}
			if before+d.Cost <= spec.Limit {
				rep.Violations = append(rep.Violations, Violation{UnderServe, id, w,
					fmt.Sprintf("denied at %s with at most %d of %d counted before it", d.Answered.Format("15:04:05.000"), before, spec.Limit)})
			}
		}
		if final == nil {
			continue
		}
		got, ok := final[WindowKey{id, w}]
		if !ok {
			continue
		}
		if got < x.sure {
			rep.Lost += x.sure - got
			rep.Violations = append(rep.Violations, Violation{LostCount, id, w,
				fmt.Sprintf("the store holds %d, %d enforced allowances were answered", got, x.sure)})
		}
		if got > x.maybe {
			rep.Violations = append(rep.Violations, Violation{Doubled, id, w,
				fmt.Sprintf("the store holds %d, at most %d calls may have counted", got, x.maybe)})
		}
	}
}

// checkSpan judges one identity under "at most Limit in any Span": a set of
// Limit+1 enforced allowances is a certain over-admission when the latest
// possible decision of the set and the earliest are less than Span apart.
func checkSpan(rep *Report, spec Spec, id string, ops []Op, o Options) {
	type iv struct{ from, to time.Time }
	var al []iv
	for _, op := range ops {
		if op.Result != Allowed || !op.Enforced {
			continue
		}
		f, t := span(op, o)
		for range max(op.Cost, 1) {
			al = append(al, iv{f, t})
		}
	}
	// Windows of Limit+1 allowances in order of their earliest decision:
	// sorted by from, any Limit+1 consecutive ones with the largest `to`
	// among them less than Span after the first's from are certain.
	slices.SortFunc(al, func(a, b iv) int { return cmp.Compare(a.from.UnixNano(), b.from.UnixNano()) })
	n := int(spec.Limit) + 1
	var over int64
	last := -1 // index of the last allowance already blamed
	for i := 0; i+n <= len(al); i++ {
		latest := al[i].to
		for _, x := range al[i : i+n] {
			if x.to.After(latest) {
				latest = x.to
			}
		}
		if d := latest.Sub(al[i].from); rep.Tightest == 0 || d < rep.Tightest {
			rep.Tightest = d
		}
		if latest.Sub(al[i].from) < spec.Span {
			end := i + n - 1
			if end > last {
				if last < i {
					over++
				} else {
					over += int64(end - last)
				}
				if last < i {
					rep.Violations = append(rep.Violations, Violation{OverAdmission, id, 0,
						fmt.Sprintf("%d enforced allowances decided within %s from %s (limit %d per %s)",
							n, latest.Sub(al[i].from).Round(time.Millisecond), al[i].from.Format("15:04:05.000"), spec.Limit, spec.Span)})
				}
				last = end
			}
		}
	}
	rep.Over += over
}

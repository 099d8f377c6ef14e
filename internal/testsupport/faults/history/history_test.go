package history

import (
	"strings"
	"testing"
	"time"
)

// t0 is the start of a one-minute window (index 29,000,000).
var t0 = time.UnixMilli(29_000_000 * 60_000).UTC()

const minute = time.Minute

// op is a check of identity id by instance 0 sent at t0+at and answered 2 ms later.
func op(id string, at time.Duration, r Result) Op {
	return Op{Identity: id, Cost: 1, Sent: t0.Add(at), Answered: t0.Add(at + 2*time.Millisecond),
		Result: r, Enforced: true, Healthy: true}
}

// series is n ops of id every 10 ms from at, each answered r.
func series(id string, at time.Duration, n int, r Result) []Op {
	var out []Op
	for i := range n {
		out = append(out, op(id, at+time.Duration(i)*10*time.Millisecond, r))
	}
	return out
}

func cat(parts ...[]Op) []Op {
	var out []Op
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func unenforced(ops []Op) []Op {
	for i := range ops {
		ops[i].Enforced = false
	}
	return ops
}

func unhealthy(ops []Op) []Op {
	for i := range ops {
		ops[i].Healthy = false
	}
	return ops
}

func TestCheck_ReportsEachPlantedViolation(t *testing.T) {
	t.Parallel()
	spec := Spec{Limit: 5, Window: minute}
	w := windowOf(t0, minute)
	tests := []struct {
		name  string
		ops   []Op
		final map[WindowKey]int64
		opts  Options
		want  map[Kind]int
		over  int64
		lost  int64
	}{
		{
			name:  "an exact history has no violation",
			ops:   cat(series("a", 0, 5, Allowed), series("a", time.Second, 3, Denied), series("b", 0, 2, Allowed)),
			final: map[WindowKey]int64{{"a", w}: 5, {"b", w}: 2},
			want:  map[Kind]int{},
		},
		{
			name:  "one allowance over the limit is an over-admission",
			ops:   cat(series("a", 0, 6, Allowed), series("a", time.Second, 2, Denied)),
			final: map[WindowKey]int64{{"a", w}: 6},
			want:  map[Kind]int{OverAdmission: 1},
			over:  1,
		},
		{
			name:  "a denial with room left while healthy is an under-serve",
			ops:   cat(series("a", 0, 3, Allowed), series("a", time.Second, 1, Denied)),
			final: map[WindowKey]int64{{"a", w}: 3},
			want:  map[Kind]int{UnderServe: 1},
		},
		{
			name:  "a count the store no longer holds is a lost count",
			ops:   series("a", 0, 4, Allowed),
			final: map[WindowKey]int64{{"a", w}: 1},
			want:  map[Kind]int{LostCount: 1},
			lost:  3,
		},
		{
			name:  "a store holding more than was ever sent is a doubled count",
			ops:   series("a", 0, 2, Allowed),
			final: map[WindowKey]int64{{"a", w}: 4},
			want:  map[Kind]int{Doubled: 1},
		},
		{
			name: "a lost count then allowed again is both a lost count and an over-admission",
			// 5 allowed, the store restarts holding 2, 3 more allowed.
			ops:   cat(series("a", 0, 5, Allowed), series("a", 10*time.Second, 3, Allowed), series("a", 20*time.Second, 1, Denied)),
			final: map[WindowKey]int64{{"a", w}: 5},
			want:  map[Kind]int{OverAdmission: 1, LostCount: 1},
			over:  3, lost: 3,
		},
		{
			name: "fail-open allowances are counted apart, never over the limit",
			ops:  cat(series("a", 0, 5, Allowed), unenforced(series("a", time.Second, 10, Allowed))),
			want: map[Kind]int{},
		},
		{
			name: "a denial while a store was unreachable is not an under-serve",
			ops:  cat(series("a", 0, 2, Allowed), unhealthy(series("a", time.Second, 3, Denied))),
			want: map[Kind]int{},
		},
		{
			name: "a call of unknown fate may have taken the room a denial lacked",
			ops:  cat(series("a", 0, 4, Allowed), series("a", 100*time.Millisecond, 1, Unknown), series("a", time.Second, 1, Denied)),
			want: map[Kind]int{},
		},
		{
			name: "allowances on both sides of a boundary are not an over-admission",
			ops:  cat(series("a", minute-time.Second, 5, Allowed), series("a", minute+time.Second, 5, Allowed)),
			want: map[Kind]int{},
		},
		{
			name: "an allowance whose decision may fall either side of a boundary is not counted in both",
			// 5 allowed before, one that spans the boundary, 5 after.
			ops: cat(series("a", minute-2*time.Second, 5, Allowed),
				[]Op{{Identity: "a", Cost: 1, Sent: t0.Add(minute - 10*time.Millisecond), Answered: t0.Add(minute + 10*time.Millisecond), Result: Allowed, Enforced: true, Healthy: true}},
				series("a", minute+time.Second, 5, Allowed)),
			want: map[Kind]int{},
		},
		{
			name: "an instance whose clock is 1 s ahead counts in the next window, as its offset says",
			ops: func() []Op {
				ops := cat(series("a", minute-3*time.Second, 5, Allowed), series("a", minute-500*time.Millisecond, 5, Allowed))
				for i := 5; i < 10; i++ {
					ops[i].Instance = 1
				}
				return ops
			}(),
			opts: Options{Offsets: map[int]time.Duration{1: time.Second}},
			want: map[Kind]int{},
		},
		{
			name: "the same history judged without the offset is an over-admission",
			ops:  cat(series("a", minute-3*time.Second, 5, Allowed), series("a", minute-500*time.Millisecond, 5, Allowed)),
			want: map[Kind]int{OverAdmission: 1},
			over: 5,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := Check(spec, tc.ops, tc.final, tc.opts)
			for _, k := range []Kind{OverAdmission, UnderServe, LostCount, Doubled} {
				if got := rep.Count(k); got != tc.want[k] {
					t.Errorf("%s: %d violations, want %d\n%s", k, got, tc.want[k], rep)
				}
			}
			if rep.Over != tc.over || rep.Lost != tc.lost {
				t.Errorf("over %d lost %d, want %d and %d\n%s", rep.Over, rep.Lost, tc.over, tc.lost, rep)
			}
		})
	}
}

func TestCheck_SpanReportsAllowancesCrowdedIntoOneSpan(t *testing.T) {
	t.Parallel()
	spec := Spec{Limit: 3, Span: 10 * time.Second}
	tests := []struct {
		name string
		ops  []Op
		over int64
	}{
		{"three per ten seconds, spread", cat(series("a", 0, 3, Allowed), series("a", 11*time.Second, 3, Allowed)), 0},
		{"four within a second", series("a", 0, 4, Allowed), 1},
		{"six within a second", series("a", 0, 6, Allowed), 3},
		{"fail-open answers are not judged", unenforced(series("a", 0, 6, Allowed)), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := Check(spec, tc.ops, nil, Options{})
			if tc.over > 0 && (rep.Tightest <= 0 || rep.Tightest >= spec.Span) {
				t.Errorf("tightest span %s; want the span of the crowded allowances", rep.Tightest)
			}
			if rep.Over != tc.over || (tc.over > 0) != (rep.Count(OverAdmission) > 0) {
				t.Errorf("over %d (%d violations), want %d\n%s", rep.Over, rep.Count(OverAdmission), tc.over, rep)
			}
		})
	}
}

func TestReport_SummaryNamesEveryFigure(t *testing.T) {
	t.Parallel()
	rep := Check(Spec{Limit: 1, Window: minute}, series("a", 0, 2, Allowed), nil, Options{})
	for _, want := range []string{"over-admissions 1", "under-serves 0", "lost counts 0", "allowed 2"} {
		if !strings.Contains(rep.Summary(), want) {
			t.Errorf("summary %q lacks %q", rep.Summary(), want)
		}
	}
}

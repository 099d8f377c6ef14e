package decide

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
)

func TestCeilSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 0, time.Nanosecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, time.Hour: 3600} {
		if got := CeilSeconds(d); got != want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestSameToken(t *testing.T) {
	if !SameToken("t0k", "t0k") || SameToken("t0k", "t0K") || SameToken("", "") || SameToken("t0k", "") {
		t.Fatal("SameToken: an equal non-empty pair only")
	}
}

// Every undecided check counts as a store error; one line a second is
// logged, whichever edge the checks came by; fail open answers them (each
// counted unenforced), fail closed does not.
func TestUndecided_FailModeAndOneLogLineASecond(t *testing.T) {
	for _, mode := range []config.FailMode{config.FailOpen, config.FailClosed} {
		var logs bytes.Buffer
		m := metrics.New(prometheus.NewRegistry())
		s := config.Defaults()
		s.FailMode = mode
		c := New(Deps{Settings: s, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		down := errors.New("redis down")
		answered := []bool{c.Undecided(down, 1), c.Undecided(down, 3, "entry", "grpc")}
		for i, a := range answered {
			if a != (mode == config.FailOpen) {
				t.Errorf("%s: call %d answered %v", mode, i, a)
			}
		}
		if got := testutil.ToFloat64(m.StoreErrors.WithLabelValues("hot")); got != 2 {
			t.Errorf("%s: %v store errors, want 2", mode, got)
		}
		wantUnenforced := 0.0
		if mode == config.FailOpen {
			wantUnenforced = 4
		}
		if got := testutil.ToFloat64(m.Unenforced); got != wantUnenforced {
			t.Errorf("%s: %v unenforced, want %v", mode, got, wantUnenforced)
		}
		if n := strings.Count(logs.String(), "check undecided"); n != 1 {
			t.Errorf("%s: %d log lines, want 1: %s", mode, n, logs.String())
		}
	}
}

func TestLogThrottle_OneASecondWithTheCountOfTheOthers(t *testing.T) {
	var l logThrottle
	t0 := time.Unix(1_000_000, 0)
	if ok, n := l.allow(t0); !ok || n != 0 {
		t.Fatalf("first: %v %d", ok, n)
	}
	for i := 1; i <= 3; i++ {
		if ok, _ := l.allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("line %d within the second let through", i)
		}
	}
	if ok, n := l.allow(t0.Add(time.Second)); !ok || n != 3 {
		t.Fatalf("a second later: %v %d, want true 3", ok, n)
	}
}

// Count labels each entry: a limit with room in a denied call was not
// counted.
func TestCount_Decisions(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	c := New(Deps{Settings: config.Defaults(), Metrics: m})
	c.Count(&limiter.Decision{Allowed: false, Entries: []limiter.Entry{
		{Rule: "a", Allowed: true}, {Rule: "b"}, {Rule: "c", Shadow: true},
	}})
	for rule, decision := range map[string]string{"a": "not_counted", "b": "denied", "c": "shadow_denied"} {
		if got := testutil.ToFloat64(m.Checks.WithLabelValues(rule, decision)); got != 1 {
			t.Errorf("%s %s: %v, want 1", rule, decision, got)
		}
	}
}

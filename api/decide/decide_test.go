package decide

import (
	"bytes"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
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

// Counts stay exact per rule and decision under concurrent checks that
// meet rules for the first time together (the resolved series are
// added while others read them).
func TestCount_ExactUnderConcurrentFirstUse(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	c := New(Deps{Settings: config.Defaults(), Metrics: m})
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rule := "r" + strconv.Itoa((w+i)%5)
				c.Count(&limiter.Decision{Allowed: true, Entries: []limiter.Entry{{Rule: rule, Allowed: true}, {Rule: "x", Allowed: true}}})
			}
		}()
	}
	wg.Wait()
	total := 0.0
	for r := range 5 {
		total += testutil.ToFloat64(m.Checks.WithLabelValues("r"+strconv.Itoa(r), "allowed"))
	}
	if total != workers*each || testutil.ToFloat64(m.Checks.WithLabelValues("x", "allowed")) != workers*each {
		t.Fatalf("counted %v and %v, want %d each", total, testutil.ToFloat64(m.Checks.WithLabelValues("x", "allowed")), workers*each)
	}
}

// BenchmarkCount is a check of the two platform rules counted in
// quota_checks_total: by the series' labels for each entry (labels),
// as Count did, against Count's series resolved once (resolved).
func BenchmarkCount(b *testing.B) {
	m := metrics.New(prometheus.NewRegistry())
	c := New(Deps{Settings: config.Defaults(), Metrics: m})
	d := &limiter.Decision{Allowed: true, Entries: []limiter.Entry{{Rule: "app_ip_hourly", Allowed: true}, {Rule: "app_user_iface_hourly", Allowed: true}}}
	b.Run("labels", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				for i := range d.Entries {
					m.Checks.WithLabelValues(d.Entries[i].Rule, "allowed").Inc()
				}
			}
		})
	})
	b.Run("resolved", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Count(d)
			}
		})
	})
}

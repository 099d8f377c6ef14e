package notify_test

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/notify"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

const secret = "webhook-secret-0123456789"

// receiver fails its first `fail` deliveries with a 503, then keeps each
// event it is sent, checking its signature.
type receiver struct {
	t     *testing.T
	fail  atomic.Int64
	calls atomic.Int64
	mu    sync.Mutex
	got   []notify.Event
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.calls.Add(1)
	body, _ := io.ReadAll(req.Body)
	if !hmac.Equal([]byte(req.Header.Get("X-Quota-Signature")), []byte(notify.Sign(secret, body))) {
		r.t.Errorf("bad signature %q", req.Header.Get("X-Quota-Signature"))
	}
	if r.fail.Add(-1) >= 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev notify.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		r.t.Errorf("body %q: %v", body, err)
	}
	r.mu.Lock()
	r.got = append(r.got, ev)
	r.mu.Unlock()
}

// Three instances count one app's monthly quota of 10 under 64 concurrent
// callers: the 80 % and the 100 % thresholds are each crossed by exactly
// one check in the fleet, and the receiver, which fails twice, gets each
// exactly once, signed.
func TestNotifier_EachThresholdOnceAcrossThreeInstances(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.ParseYAML([]byte("rules:\n  - {name: app_monthly, dimensions: [app_id], limit: 10, window: month, algorithm: fixed_window}\n  - {name: app_user_daily, dimensions: [app_id, user_id], limit: 100, window: day, algorithm: fixed_window}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &receiver{t: t}
	rec.fail.Store(2)
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	var lims []*limiter.Limiter
	var regs []*prometheus.Registry
	var runs sync.WaitGroup
	for range 3 {
		reg := prometheus.NewRegistry()
		n := notify.New(notify.Options{URL: srv.URL, Secret: secret, Redis: rdb, Prefix: prefix, Backoff: 10 * time.Millisecond, Registerer: reg, Clock: clk})
		runs.Add(1)
		go func() { defer runs.Done(); n.Run(ctx) }()
		lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clk, set, limiter.WithQuotaWatcher(n))
		if err != nil {
			t.Fatal(err)
		}
		lims, regs = append(lims, lim), append(regs, reg)
	}
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := lims[g%3].Check(ctx, &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "app_id", Value: "a1"}, {Name: "user_id", Value: fmt.Sprint("u", g)}}})
			if err != nil {
				t.Error(err)
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 10 {
		t.Fatalf("%d allowed, want 10", allowed.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec.mu.Lock()
		n := len(rec.got)
		rec.mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a duplicate would arrive by now
	cancel()
	runs.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := map[float64]int{}
	for _, ev := range rec.got {
		seen[ev.Threshold]++
		if ev.AppID != "a1" || ev.Rule != "app_monthly" || ev.Window != "month" || ev.Limit != 10 ||
			!ev.PeriodEnd.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || ev.Used != int64(ev.Threshold*10) {
			t.Errorf("event %+v", ev)
		}
	}
	if len(rec.got) != 2 || seen[0.8] != 1 || seen[1] != 1 {
		t.Fatalf("events %+v, want one at 0.8 and one at 1", rec.got)
	}
	if rec.calls.Load() != 4 {
		t.Errorf("%d posts, want 4 (two refused, two delivered)", rec.calls.Load())
	}
	var crossings float64
	for _, reg := range regs {
		n, err := testutil.GatherAndCount(reg, "quota_quota_crossings_total")
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "quota_quota_crossings_total" {
					for _, m := range mf.GetMetric() {
						crossings += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if crossings != 2 {
		t.Fatalf("quota_quota_crossings_total over the fleet %v, want 2", crossings)
	}
}

// A receiver that never answers holds no check: crossings are handed off
// without waiting, and those beyond the queue are dropped and counted.
func TestNotifier_AHangingWebhookNeverHoldsTheCaller(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	t.Cleanup(func() { close(hang); srv.Close() })
	reg := prometheus.NewRegistry()
	n := notify.New(notify.Options{URL: srv.URL, Secret: secret, Registerer: reg, Client: &http.Client{Timeout: time.Minute}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	start := time.Now()
	for i := range 10_000 {
		n.Crossed(limiter.Crossing{App: fmt.Sprint("a", i), Rule: "r", Window: rules.Month, Limit: 10, Used: 8, Threshold: 0.8, PeriodEnd: time.Now().Add(time.Hour)})
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("10,000 crossings took %s with the webhook hanging", took)
	}
	if dropped := testutil.ToFloat64(mustCounter(t, reg, "dropped")); dropped == 0 {
		t.Fatal("nothing dropped with the queue full")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		// Run waits for its deliveries, each bounded by the request's context.
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "quota_webhook_deliveries_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetValue() == result {
						c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
						c.Add(m.GetCounter().GetValue())
						return c
					}
				}
			}
		}
	}
	t.Fatalf("no quota_webhook_deliveries_total{result=%q}", result)
	return nil
}

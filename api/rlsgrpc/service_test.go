package rlsgrpc_test

import (
	"context"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/api/decide"
	"github.com/quota-platform/quota/api/rlsgrpc"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/coalesce"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/metrics"
)

// rlsHarness is the Envoy rate limit service of an in-process quotad
// (the service over a real Redis), served on a loopback port, with envoy
// ratelimit's example configurations (envoyconf/testdata).
type rlsHarness struct {
	t      *testing.T
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	rdb    redis.UniversalClient
	prefix string
	clk    *clock.Fake
	reg    *prometheus.Registry
	usage  *usageLog
	an     *analytics.Analytics // rlsConfig.analytics only
}

type usageLog struct {
	mu    sync.Mutex
	calls []string
}

func (u *usageLog) Record(app, iface, user string, allowed bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := app + "/" + iface + "/" + user + "/denied"
	if allowed {
		s = app + "/" + iface + "/" + user + "/allowed"
	}
	u.calls = append(u.calls, s)
}

func newRLS(t *testing.T, edit ...func(*rlsConfig)) *rlsHarness {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	hc := rlsConfig{settings: config.Defaults(), client: rdb}
	for _, e := range edit {
		e(&hc)
	}
	conf, err := envoyconf.Load("../../envoyconf/testdata")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(start)
	lim := newLimiter(t, hc.client, prefix, clk)
	reg := prometheus.NewRegistry()
	h := &rlsHarness{t: t, rdb: rdb, prefix: prefix, clk: clk, reg: reg, usage: &usageLog{}}
	// quotad's path: single checks through the coalescer (QUOTA_COALESCE, 4 by default).
	co := coalesce.New(lim, hc.settings.Coalesce, 64)
	t.Cleanup(co.Close)
	deps := decide.Deps{Settings: hc.settings, Limiter: lim, Checks: co, Metrics: metrics.New(reg), Usage: h.usage}
	if hc.analytics {
		h.an, err = analytics.New(analytics.Options{DBs: testenv.MySQLShards(t, 1), Redis: rdb, KeyPrefix: prefix, Clock: clk, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		deps.Usage, deps.Throttled = h.an.Recorder, h.an.Throttled
	}
	gs, _ := rlsgrpc.NewServer(decide.New(deps), rlsgrpc.NewEnvoyConfig(conf))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	h.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.conn.Close() })
	h.client = rlsv3.NewRateLimitServiceClient(h.conn)
	return h
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (h *rlsHarness) call(domain string, hits uint32, descs ...*rlcommon.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hits})
}

func (h *rlsHarness) must(domain string, hits uint32, descs ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	h.t.Helper()
	r, err := h.call(domain, hits, descs...)
	if err != nil {
		h.t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(r.Statuses) != len(descs) {
		h.t.Fatalf("%d statuses for %d descriptors", len(r.Statuses), len(descs))
	}
	return r
}

func (h *rlsHarness) keys() int {
	return testenv.CountKeys(context.Background(), h.rdb, h.prefix)
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func TestShouldRateLimit_CountsAsEnvoyRatelimit(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	// example.yaml: foo → bar is 3 a minute. start is 250 ms into a minute,
	// so the window resets in 60 s, as envoy ratelimit reports it
	// (unit - now % unit, in whole seconds).
	for i, wantRemaining := range []uint32{2, 1, 0} {
		r := h.must("rl", 0, desc("foo", "f", "bar", "b"))
		st := r.Statuses[0]
		if r.OverallCode != ok || st.Code != ok || st.LimitRemaining != wantRemaining {
			t.Fatalf("call %d: %v", i, r)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("call %d: current_limit %v", i, st.CurrentLimit)
		}
		if st.DurationUntilReset.AsDuration() != time.Minute {
			t.Fatalf("call %d: duration_until_reset %v", i, st.DurationUntilReset.AsDuration())
		}
	}
	r := h.must("rl", 0, desc("foo", "f", "bar", "b"))
	if r.OverallCode != over || r.Statuses[0].Code != over || r.Statuses[0].LimitRemaining != 0 || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("4th call: %v", r)
	}
	// The next window starts afresh.
	h.clk.Advance(time.Minute)
	if r := h.must("rl", 0, desc("foo", "f", "bar", "b")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("next minute: %v", r)
	}
	if got := testutil.ToFloat64(metricsChecks(t, h.reg, "rl.foo.bar", "denied")); got != 1 {
		t.Fatalf("quota_checks_total denied = %v, want 1", got)
	}
	// Each call is timed beside the HTTP checks, under its gRPC method.
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var timed uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "quota_check_duration_seconds" && m.GetLabel()[0].GetValue() == "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
				timed = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if timed != 5 {
		t.Fatalf("quota_check_duration_seconds of ShouldRateLimit: %d samples, want the 5 calls", timed)
	}
}

func metricsChecks(t *testing.T, reg *prometheus.Registry, rule, decision string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "quota_checks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["rule"] == rule && labels["decision"] == decision {
				g.Set(m.GetCounter().GetValue())
			}
		}
	}
	return g
}

func TestShouldRateLimit_MatchingSemantics(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	cases := []struct {
		name      string
		domain    string
		d         *rlcommon.RateLimitDescriptor
		code      rlsv3.RateLimitResponse_Code
		perUnit   uint32 // 0 with hasLimit false: no current_limit
		hasLimit  bool
		remaining uint32
	}{
		{"value-specific entry wins over key-only", "test-domain", desc("key1", "value1", "subkey1", "subvalue1"), ok, 10, true, 9},
		{"key-only entry for any other value", "test-domain", desc("key1", "value1", "subkey1", "other"), ok, 5, true, 4},
		{"node without rate_limit: OK, not counted", "test-domain", desc("key1", "value1"), ok, 0, false, 0},
		{"more entries than levels: OK, not counted", "test-domain", desc("key2", "value2", "extra", "x"), ok, 0, false, 0},
		{"whitelisted value: OK, not counted", "test-domain", desc("key2", "value3"), ok, 0, false, 0},
		{"unknown domain: OK, not counted", "nodomain", desc("key2", "x"), ok, 0, false, 0},
		{"no match: OK, not counted", "test-domain", desc("nokey", "x"), ok, 0, false, 0},
		{"limit 0 denies at once", "rl", desc("foo", "f", "bar", "banned"), over, 0, true, 0},
		{"unlimited: OK, remaining MaxUint32, not counted", "rl", desc("qux", "q"), ok, 0, false, math.MaxUint32},
		{"last entry's node, not its parent's limit", "test-domain", desc("key5", "value5", "subkey5", "subvalue5"), ok, 25, true, 24},
		{"wildcard value", "wildcard-domain", desc("wild", "foo-anything"), ok, 20, true, 19},
	}
	for _, tc := range cases {
		r := h.must(tc.domain, 0, tc.d)
		st := r.Statuses[0]
		// A counted descriptor shows it in limit_remaining (limit - 1).
		if r.OverallCode != tc.code || st.Code != tc.code || st.LimitRemaining != tc.remaining ||
			(st.CurrentLimit != nil) != tc.hasLimit || st.CurrentLimit.GetRequestsPerUnit() != tc.perUnit {
			t.Errorf("%s: %v", tc.name, r)
		}
		if tc.hasLimit {
			continue
		}
		// Not counted: no key at all, on a quotad of its own (a key of a
		// 1 s window could expire between two looks on a loaded machine).
		alone := newRLS(t)
		alone.must(tc.domain, 0, tc.d)
		if n := alone.keys(); n != 0 {
			t.Errorf("%s: counted (%d keys)", tc.name, n)
		}
	}
}

func TestShouldRateLimit_ShadowModeAnswersOKAndCounts(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	// example.yaml: foo → baz=shady is 1 a minute in shadow mode.
	for i := range 3 {
		r := h.must("rl", 0, desc("foo", "f", "baz", "shady"))
		want := uint32(0)
		if r.OverallCode != ok || r.Statuses[0].Code != ok || r.Statuses[0].LimitRemaining != want || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
			t.Fatalf("call %d: %v", i, r)
		}
	}
	if got := testutil.ToFloat64(metricsChecks(t, h.reg, "rl.foo.baz_shady", "shadow_denied")); got != 2 {
		t.Fatalf("shadow_denied = %v, want 2", got)
	}
}

func TestShouldRateLimit_ReplacesDropsTheNamedLimit(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	// README example 7: with both descriptors, specific_limit (5 a minute here) is
	// replaced and only the 10 a minute applies; alone, the 5 do.
	d1, d2 := desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")
	for i := range 10 {
		r := h.must("example7", 0, d1, d2)
		if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil || r.Statuses[0].Code != ok || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("call %d: %v", i, r)
		}
	}
	if r := h.must("example7", 0, d1, d2); r.OverallCode != over || r.Statuses[1].Code != over {
		t.Fatalf("11th call: %v", r)
	}
	// The replaced limit was not counted: alone it still has its 5.
	if r := h.must("example7", 0, d1); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 4 || r.Statuses[0].CurrentLimit.GetName() != "specific_limit" {
		t.Fatalf("alone: %v", r)
	}
}

func TestShouldRateLimit_HitsAddend(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	// 3 a minute: hits_addend 2 leaves 1, another 2 is over and counts nothing.
	if r := h.must("rl", 2, desc("foo", "h", "bar", "b")); r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("%v", r)
	}
	if r := h.must("rl", 2, desc("foo", "h", "bar", "b")); r.OverallCode != over {
		t.Fatalf("%v", r)
	}
	// hits_addend 0 is 1.
	if r := h.must("rl", 0, desc("foo", "h", "bar", "b")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("%v", r)
	}
	// A descriptor's own hits_addend wins over the request's.
	d := desc("foo", "h2", "bar", "b")
	d.HitsAddend = wrapperspb.UInt64(3)
	if r := h.must("rl", 1, d); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("descriptor hits_addend: %v", r)
	}
	// Descriptors of different costs in one request: each counts its own
	// (rl.foo is 2 a minute, rl.foo.bar 3).
	d2 := desc("foo", "h5", "bar", "b")
	d2.HitsAddend = wrapperspb.UInt64(2)
	r := h.must("rl", 1, desc("foo", "h5"), d2)
	if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 || r.Statuses[1].LimitRemaining != 1 {
		t.Fatalf("mixed costs: %v", r)
	}
	if r := h.must("rl", 0, desc("foo", "h5"), desc("foo", "h5", "bar", "b")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 || r.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("after mixed costs: %v", r)
	}
}

// TestShouldRateLimit_DeniedRequestConsumesNothing: descriptors of one
// request are decided together (quota's deliberate difference from envoy
// ratelimit, which counts each descriptor on its own).
func TestShouldRateLimit_DeniedRequestConsumesNothing(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	bar := desc("foo", "a", "bar", "b")                                    // 3 a minute
	mock := desc("source_cluster", "proxy", "destination_cluster", "mock") // 1 a minute
	if r := h.must("rl", 0, bar, mock); r.OverallCode != ok {
		t.Fatalf("first: %v", r)
	}
	for i := range 3 {
		r := h.must("rl", 0, bar, mock)
		if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over {
			t.Fatalf("call %d: %v", i, r)
		}
		if r.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("call %d: the allowed descriptor reports %d remaining, want 2 (nothing taken)", i, r.Statuses[0].LimitRemaining)
		}
	}
	if r := h.must("rl", 0, bar); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("bar alone after 3 denied requests: %v (want 1 left: only the first request counted)", r)
	}
}

// TestShouldRateLimit_CounterBelongsToEveryEntry: a key-only node counts
// each value apart, and a descriptor's earlier entries are part of its
// counter too.
func TestShouldRateLimit_CounterBelongsToEveryEntry(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	for range 3 {
		h.must("rl", 0, desc("foo", "a", "bar", "x"))
	}
	for _, d := range []*rlcommon.RateLimitDescriptor{desc("foo", "a", "bar", "y"), desc("foo", "b", "bar", "x")} {
		if r := h.must("rl", 0, d); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 2 {
			t.Fatalf("%v shares a counter: %v", d, r)
		}
	}
	// Same entries in another domain: another counter.
	if r := h.must("test-domain", 0, desc("key2", "a")); r.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("%v", r)
	}
}

func TestShouldRateLimit_BadInputIsInvalidArgumentAndCountsNothing(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	good := desc("foo", "a", "bar", "b")
	negative := desc("foo", "a", "bar", "b")
	negative.IsNegativeHits = true
	zero := desc("foo", "a", "bar", "b")
	zero.HitsAddend = wrapperspb.UInt64(0)
	cases := []struct {
		name   string
		domain string
		descs  []*rlcommon.RateLimitDescriptor
	}{
		{"empty domain", "", []*rlcommon.RateLimitDescriptor{good}},
		{"no descriptors", "rl", nil},
		{"descriptor without entries", "rl", []*rlcommon.RateLimitDescriptor{good, {}}},
		{"empty key", "rl", []*rlcommon.RateLimitDescriptor{good, desc("", "v")}},
		{"empty value", "rl", []*rlcommon.RateLimitDescriptor{good, desc("foo", "")}},
		{"negative hits", "rl", []*rlcommon.RateLimitDescriptor{good, negative}},
		{"zero per-descriptor hits_addend", "rl", []*rlcommon.RateLimitDescriptor{good, zero}},
		{"too many descriptors", "rl", slices.Repeat([]*rlcommon.RateLimitDescriptor{good}, 65)},
		{"too many entries", "rl", []*rlcommon.RateLimitDescriptor{good, desc(slices.Repeat([]string{"k", "v"}, 33)...)}},
		{"value too long", "rl", []*rlcommon.RateLimitDescriptor{good, desc("foo", strings.Repeat("v", 4097))}},
	}
	for _, tc := range cases {
		_, err := h.call(tc.domain, 0, tc.descs...)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
		}
	}
	if n := h.keys(); n != 0 {
		t.Fatalf("bad input counted: %d keys", n)
	}
}

func TestShouldRateLimit_ConcurrentExactlyLimit(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	// platform.yaml: app_id → user_id → interface_id is 1,000 an hour.
	const workers, each = 64, 25
	var okCount, overCount atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				r, err := h.call("platform", 0, desc("app_id", "app1", "user_id", "u1", "interface_id", "i1"))
				if err != nil {
					errs <- err
					return
				}
				if r.OverallCode == ok {
					okCount.Add(1)
				} else {
					overCount.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if okCount.Load() != 1000 || overCount.Load() != workers*each-1000 {
		t.Fatalf("OK %d, OVER_LIMIT %d; want exactly 1000 OK of %d", okCount.Load(), overCount.Load(), workers*each)
	}
}

func TestShouldRateLimit_AnalyticsAppFromTheAppKey(t *testing.T) {
	t.Parallel()
	h := newRLS(t, func(c *rlsConfig) { c.settings.EnvoyAppKey = "tenant" })
	h.must("platform", 0, desc("app_id", "not-the-app", "ip", "1.2.3.4"), desc("tenant", "t1"), desc("user_id", "u", "interface_id", "i"))
	h.must("platform", 0, desc("app_id", "a", "ip", "1.2.3.4"))
	h.usage.mu.Lock()
	defer h.usage.mu.Unlock()
	if len(h.usage.calls) != 1 || h.usage.calls[0] != "t1/i/u/allowed" {
		t.Fatalf("usage %v, want one call of app t1", h.usage.calls)
	}
}

func TestShouldRateLimit_StoreDownFollowsFailMode(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { down.Close() })
	open := newRLS(t, func(c *rlsConfig) { c.client, c.settings.FailMode = down, config.FailOpen })
	r, err := open.call("rl", 0, desc("foo", "a", "bar", "b"))
	if err != nil || r.OverallCode != ok {
		t.Fatalf("fail open: %v %v", r, err)
	}
	closed := newRLS(t, func(c *rlsConfig) { c.client, c.settings.FailMode = down, config.FailClosed })
	if _, err := closed.call("rl", 0, desc("foo", "a", "bar", "b")); status.Code(err) != codes.Unavailable {
		t.Fatalf("fail closed: %v, want Unavailable", err)
	}
}

// A request with more descriptors, and more entries, than a call holds in
// its own memory is answered like a small one, every status filled in.
func TestShouldRateLimit_ManyDescriptors(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	var descs []*rlcommon.RateLimitDescriptor
	for i := range 7 {
		descs = append(descs, desc("foo", "many"+strconv.Itoa(i), "bar", "b")) // rl.foo.bar: 3 a minute
	}
	descs = append(descs, desc(slices.Repeat([]string{"k", "v"}, 12)...), desc("qux", "q")) // no limit; unlimited
	for round := range 4 {
		r := h.must("rl", 0, descs...)
		for i, st := range r.Statuses[:7] {
			wantCode, wantLeft := ok, uint32(2-round)
			if round == 3 {
				wantCode, wantLeft = over, 0
			}
			if st.Code != wantCode || st.LimitRemaining != wantLeft || st.CurrentLimit.GetRequestsPerUnit() != 3 ||
				st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.DurationUntilReset.GetSeconds() < 1 {
				t.Fatalf("round %d, status %d: %v, want %v with %d left", round, i, st, wantCode, wantLeft)
			}
		}
		if st := r.Statuses[7]; st.Code != ok || st.CurrentLimit != nil {
			t.Fatalf("round %d: descriptor without a limit: %v", round, st)
		}
		if st := r.Statuses[8]; st.Code != ok || st.LimitRemaining != math.MaxUint32 {
			t.Fatalf("round %d: unlimited descriptor: %v", round, st)
		}
	}
	// Under fail open, a store failure answers each of them OK.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { down.Close() })
	r := newRLS(t, func(c *rlsConfig) { c.client, c.settings.FailMode = down, config.FailOpen }).must("rl", 0, descs...)
	for i, st := range r.Statuses {
		if st.Code != ok || st.CurrentLimit != nil {
			t.Fatalf("fail open, status %d: %v", i, st)
		}
	}
}

func TestGRPC_HealthIsServing(t *testing.T) {
	t.Parallel()
	h := newRLS(t)
	hc := healthpb.NewHealthClient(h.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, r, err)
		}
	}
}

func TestShouldRateLimit_LimitOverrideAndCheckToken(t *testing.T) {
	t.Parallel()
	h := newRLS(t, func(c *rlsConfig) { c.settings.CheckToken = "grpc-check-token-0123456789" })
	d := desc("key2", "o")
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	if _, err := h.call("test-domain", 0, d); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want Unauthenticated", err)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer grpc-check-token-0123456789")
	req := &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlcommon.RateLimitDescriptor{d}}
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
		r, err := h.client.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != want || r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("override call %d: %v %v", i, r, err)
		}
	}
	// In an unknown domain the override is not applied (envoy ratelimit: no domain, no limit).
	req.Domain = "nodomain"
	if r, err := h.client.ShouldRateLimit(ctx, req); err != nil || r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("override in unknown domain: %v %v", r, err)
	}
}

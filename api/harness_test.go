package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/appplans"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/coalesce"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/nearquota"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

const adminToken = "test-admin-token-0123456789"

// start is a fixed instant 250 ms into an hour, so hourly windows have a
// known reset.
var start = time.Date(2026, 11, 23, 10, 0, 0, 250_000_000, time.UTC)

type harness struct {
	t      *testing.T
	srv    *edgeServer
	clk    *clock.Fake
	rdb    redis.UniversalClient
	prefix string
	lim    *limiter.Limiter
	reg    *prometheus.Registry
	server *api.Server
}

// harnessConfig is what a harnessOption may change before the server is built.
type harnessConfig struct {
	settings config.Settings
	hot      hot.Options
	client   redis.UniversalClient
	ready    []api.ReadinessCheck // after the harness's own redis check
	plans    bool                 // serve the plans admin API over the shared store
	loc      *time.Location       // of calendar windows; nil: UTC
	nearest  bool                 // record identities near their quotas (nearquota)
}

// withNearest records identities' quota crossings and serves
// GET /v1/apps/{app_id}/usage/nearest.
func withNearest() harnessOption { return func(c *harnessConfig) { c.nearest = true } }

// withPlans serves the plans admin API (appplans over the test's Redis).
func withPlans() harnessOption { return func(c *harnessConfig) { c.plans = true } }

// inZone counts calendar windows in loc.
func inZone(loc *time.Location) harnessOption { return func(c *harnessConfig) { c.loc = loc } }

type harnessOption func(*harnessConfig)

func failMode(m config.FailMode) harnessOption {
	return func(c *harnessConfig) { c.settings.FailMode = m }
}

func splitBySlot() harnessOption {
	return func(c *harnessConfig) { c.hot.SplitBySlot = true }
}

func settings(fn func(*config.Settings)) harnessOption {
	return func(c *harnessConfig) { fn(&c.settings) }
}

func keyPrefix(p string) harnessOption {
	return func(c *harnessConfig) { c.hot.Prefix = p }
}

func redisClient(rc redis.UniversalClient) harnessOption {
	return func(c *harnessConfig) { c.client = rc }
}

// readiness adds a readiness check to GET /readyz (e.g. one that blocks,
// to hold an in-flight slot with work in progress).
func readiness(rc api.ReadinessCheck) harnessOption {
	return func(c *harnessConfig) { c.ready = append(c.ready, rc) }
}

func newHarness(t *testing.T, rulesYAML string, opts ...harnessOption) *harness {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.ParseYAML([]byte(rulesYAML))
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	hc := harnessConfig{settings: config.Defaults(), hot: hot.Options{Prefix: prefix, Jitter: time.Second}, client: rdb}
	hc.settings.AdminToken = adminToken
	hc.settings.Coalesce = 0
	for _, o := range opts {
		o(&hc)
	}
	s, ho, client := hc.settings, hc.hot, hc.client
	clk := clock.NewFake(start)
	hot := hot.NewStore(client, ho)
	if hc.loc == nil {
		hc.loc = time.UTC
	}
	limOpts := []limiter.Option{limiter.InLocation(hc.loc)}
	var nearest api.NearestIdentities
	if hc.nearest {
		rec := nearquota.New(nearquota.Options{Redis: client, Prefix: ho.Prefix})
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go rec.Run(ctx)
		nearest, limOpts = rec, append(limOpts, limiter.WithIdentityQuotaWatcher(rec))
	}
	lim, err := limiter.New(hot, clk, set, limOpts...)
	if err != nil {
		t.Fatalf("limiter: %v", err)
	}
	var plans api.AppPlans
	if hc.plans {
		store := appplans.NewStore(client, ho.Prefix)
		plans = &appplans.Shared{Store: store, Syncer: &appplans.Syncer{Store: store, Apply: lim.SetAssignments, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	}
	reg := prometheus.NewRegistry()
	var checks api.SingleChecker = lim
	if s.Coalesce > 0 {
		co := coalesce.New(lim, s.Coalesce, 64)
		t.Cleanup(co.Close)
		checks = co
	}
	server := api.New(api.Deps{
		Settings: s,
		Limiter:  lim,
		Checks:   checks,
		Metrics:  metrics.New(reg),
		Gatherer: reg,
		Ready:    append([]api.ReadinessCheck{{Name: "redis", Check: hot.Ping}}, hc.ready...),
		AppPlans: plans,
		Nearest:  nearest,
	})
	srv := serveEdge(t, server)
	return &harness{t: t, srv: srv, clk: clk, rdb: rdb, prefix: prefix, lim: lim, reg: reg, server: server}
}

type reply struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

func (h *harness) do(method, path, contentType, body string, header ...string) reply {
	h.t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			h.t.Fatalf("%s %s: answer is not a JSON object: %q", method, path, raw)
		}
	}
	return r
}

func (h *harness) check(body string) reply {
	h.t.Helper()
	return h.do("POST", "/v1/check", "application/json", body)
}

// snapshot returns every key under the test's prefix with its value, to
// prove a request changed no count.
func (h *harness) snapshot() map[string]string {
	h.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := h.rdb.Scan(ctx, 0, h.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		v, err := h.rdb.Get(ctx, k).Result()
		if err != nil {
			v = "<" + h.rdb.Type(ctx, k).Val() + ">"
			if m, err := h.rdb.HGetAll(ctx, k).Result(); err == nil {
				keys := make([]string, 0, len(m))
				for f, fv := range m {
					keys = append(keys, f+"="+fv)
				}
				sort.Strings(keys)
				v += strings.Join(keys, ",")
			}
		}
		out[k] = v
	}
	return out
}

func (r reply) allowed() bool {
	a, _ := r.body["allowed"].(bool)
	return a
}

// entry returns the rules entry of rule name (and window, if given).
func (r reply) entry(t *testing.T, name string) map[string]any {
	t.Helper()
	list, _ := r.body["rules"].([]any)
	for _, e := range list {
		m := e.(map[string]any)
		if m["rule"] == name {
			return m
		}
	}
	t.Fatalf("no entry for rule %s in %s", name, r.raw)
	return nil
}

func (r reply) remaining(t *testing.T, name string) int64 {
	t.Helper()
	return int64(r.entry(t, name)["remaining"].(float64))
}

func (r reply) errorCode() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }

// edgeServer is quotad's HTTP server (Server.NewHTTPServer) on a loopback
// port: the tests reach the check routes the way clients of quotad do.
type edgeServer struct{ URL string }

func serveEdge(t *testing.T, server *api.Server) *edgeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := server.NewHTTPServer(api.EdgeOptions{})
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Shutdown() })
	return &edgeServer{URL: "http://" + ln.Addr().String()}
}

// Package quotatest runs quotad's real HTTP API (api.Server over the real
// test Redis, hot tier only) in-process at a fixed instant, for tests and
// runnable examples of packages that call quota over HTTP. It needs no
// testing.T, so a TestMain can start one for a package's Example tests.
package quotatest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// Instant is the server's clock: 250 ms into an hour, so an hourly window
// resets in 3600 s (rounded up) on every run.
var Instant = time.Date(2026, 11, 23, 10, 0, 0, 250_000_000, time.UTC)

// Server is a running quota HTTP API.
type Server struct {
	URL     string
	Handler http.Handler // the api.Server, to serve from another listener
	srv     *httptest.Server
	rdb     *redis.Client
	prefix  string
}

// Start serves rulesYAML with settings s (config.Defaults() when zero) on
// a loopback port, counting under a fresh Redis key prefix.
func Start(rulesYAML string, s *config.Settings) (*Server, error) {
	set, err := rules.ParseYAML([]byte(rulesYAML))
	if err != nil {
		return nil, fmt.Errorf("quotatest: rules: %w", err)
	}
	settings := config.Defaults()
	if s != nil {
		settings = *s
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("quotatest: redis at %s: %w (run deploy/ensure-services.sh)", testenv.RedisAddr(), err)
	}
	prefix := "t:" + testenv.RandomHex(6) + ":"
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second})
	lim, err := limiter.New(hot, clock.NewFake(Instant), set)
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("quotatest: limiter: %w", err)
	}
	reg := prometheus.NewRegistry()
	h := api.New(api.Deps{Settings: settings, Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg,
		Ready: []api.ReadinessCheck{{Name: "redis", Check: hot.Ping}}})
	srv := httptest.NewServer(h)
	return &Server{URL: srv.URL, Handler: h, srv: srv, rdb: rdb, prefix: prefix}, nil
}

// Close stops the server and deletes its keys.
func (s *Server) Close() {
	s.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	testenv.DeletePrefix(ctx, s.rdb, s.prefix)
	s.rdb.Close()
}

// ExampleRules: one user may call twice an hour; one app from one IP ten
// times.
const ExampleRules = `
rules:
  - name: user_hourly
    dimensions: [user_id]
    limit: 2
    window: 1h
    algorithm: fixed_window
  - name: app_ip_hourly
    dimensions: [app_id, ip]
    limit: 10
    window: 1h
    algorithm: fixed_window
`

// Main is a TestMain: it serves ExampleRules, points *srv and *url at the
// server for the package's tests and examples, runs them and exits.
func Main(m *testing.M, srv **Server, url *string) {
	s, err := Start(ExampleRules, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*srv, *url = s, s.URL
	code := m.Run()
	s.Close()
	os.Exit(code)
}

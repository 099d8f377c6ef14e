package main

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// rulesServer is quotad's HTTP API with one rule of the given limit.
func rulesServer(t *testing.T, limit int) (*httptest.Server, string) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	set, err := rules.ParseYAML(fmt.Appendf(nil, "rules:\n  - {name: r, dimensions: [user_id], limit: %d, window: 1h, algorithm: fixed_window}\n", limit))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(hot.NewStore(rdb, hot.Options{Prefix: prefix}), clock.Real{}, set)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(api.New(api.Deps{Settings: config.Defaults(), Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg}))
	t.Cleanup(srv.Close)
	return srv, set.Version
}

func TestRulesVersions_ShowsEachInstanceAndFailsWhenTheyDiffer(t *testing.T) {
	t.Parallel()
	a, va := rulesServer(t, 5)
	b, _ := rulesServer(t, 5)
	c, vc := rulesServer(t, 6)
	dead := httptest.NewServer(nil)
	dead.Close()
	cases := []struct {
		name      string
		instances string
		code      int
		want      []string
	}{
		{"all alike", a.URL + "," + strings.TrimPrefix(b.URL, "http://"), 0, []string{a.URL + " ", va, "all 2 instances on version " + va}},
		{"one differs", a.URL + "," + b.URL + "," + c.URL, 1, []string{c.URL, vc, "instances differ: 2 versions in force"}},
		{"one down", a.URL + "," + dead.URL, 1, []string{dead.URL + " ", "ERROR", "1 of 2 instances did not answer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run([]string{"rules", "versions", "--instances", tc.instances}, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s %s", code, tc.code, out.String(), errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

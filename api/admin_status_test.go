package api_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/fleet"
	"github.com/quota-platform/quota/metrics"
)

// GET /v1/admin/status answers the instance with its readiness and why
// (as /readyz), needs the admin token, and refuses an unknown scope.
func TestAdminStatus_AnswersTheInstanceWithItsReadinessAndRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failMode config.FailMode
		status   api.StatusSource
		ready    []api.ReadinessCheck
		path     string
		token    string
		code     int
		want     map[string]any // of "instance"
	}{
		{"ready", config.FailOpen, &fleet.Source{Self: func() fleet.Instance { return fleet.Instance{URL: "http://x:1", Version: "v9"} }},
			[]api.ReadinessCheck{{Name: "redis", Check: func(context.Context) error { return nil }}},
			"/v1/admin/status?scope=instance", "tok", 200, map[string]any{"ready": true, "state": "serving", "version": "v9"}},
		{"a dependency down, closed", config.FailClosed, &fleet.Source{Self: func() fleet.Instance { return fleet.Instance{} }},
			[]api.ReadinessCheck{{Name: "mysql_shard_1", Check: func(context.Context) error { return errors.New("refused") }}},
			"/v1/admin/status?scope=instance", "tok", 200, map[string]any{"ready": false, "not_ready": "mysql_shard_1 unreachable"}},
		{"a dependency down, open", config.FailOpen, &fleet.Source{Self: func() fleet.Instance { return fleet.Instance{} }},
			[]api.ReadinessCheck{{Name: "redis", Check: func(context.Context) error { return errors.New("refused") }}},
			"/v1/admin/status?scope=instance", "tok", 200, map[string]any{"ready": true, "not_ready": "degraded: redis unreachable (fail mode open: checks answered unenforced)"}},
		{"an unknown scope", config.FailOpen, &fleet.Source{Self: func() fleet.Instance { return fleet.Instance{} }}, nil,
			"/v1/admin/status?scope=everything", "tok", 400, nil},
		{"no token", config.FailOpen, &fleet.Source{Self: func() fleet.Instance { return fleet.Instance{} }}, nil,
			"/v1/admin/status", "", 401, nil},
		{"no status source", config.FailOpen, nil, nil, "/v1/admin/status", "tok", 404, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := config.Defaults()
			s.AdminToken, s.FailMode = "tok", tc.failMode
			reg := prometheus.NewRegistry()
			srv := httptest.NewServer(api.New(api.Deps{Settings: s, Metrics: metrics.New(reg), Gatherer: reg, Status: tc.status, Ready: tc.ready}))
			defer srv.Close()
			code, body := adminCall(t, srv, "GET", tc.path, tc.token)
			if code != tc.code {
				t.Fatalf("%s: %d %v, want %d", tc.path, code, body, tc.code)
			}
			in, _ := body["instance"].(map[string]any)
			for k, v := range tc.want {
				if in[k] != v {
					t.Errorf("instance.%s = %v, want %v (%v)", k, in[k], v, body)
				}
			}
		})
	}
}

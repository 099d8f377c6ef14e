package fleet_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quota-platform/quota/fleet"
)

// Render writes each section, and each state of an instance, of a view
// (quotactl status' screen).
func TestView_Render(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		view string
		want []string
	}{
		{"a fleet in every state", `{"from":"http://a:8080","at":"2026-11-29T10:00:00Z","instances":[
 {"url":"http://a:8080","heartbeat":{"version":"v1","rules_version":"abcdef0123456789","state":"serving","seen_at":"2026-11-29T09:59:58Z"},"status":{"version":"v1","uptime_seconds":3700,"rules_version":"abcdef0123456789","ready":true,"state":"serving","analytics":{"last_flush_at":"2026-11-29T09:59:50Z","lag_seconds":10,"pending_rows":12345}}},
 {"url":"http://b:8080","status":{"version":"v1","uptime_seconds":20,"rules_version":"zzz","ready":false,"state":"serving","not_ready":"redis down","analytics":{"last_flush_at":null,"pending_rows":5}}},
 {"url":"http://c:8080","heartbeat":{"version":"v0","rules_version":"old","state":"draining","seen_at":"2026-11-29T09:50:00Z"},"error":"connection refused"},
 {"url":"http://d:8080","heartbeat":{"version":"v1","rules_version":"x","state":"serving","seen_at":"2026-11-29T09:40:00Z"},"status":{"version":"v1","uptime_seconds":1,"rules_version":"x","ready":true,"state":"draining","not_ready":"draining"}}],
 "rules_versions":{"abcdef0123456789":["http://a:8080"],"zzz":["http://b:8080"]},
 "fleet":{"registry_error":"boom","redis_mode":"cluster","redis":[{"name":"master","addr":"r1:7000","slots":"0-5460","ok":true},{"name":"master","addr":"r2:7000","ok":false,"error":"down"}],
  "mysql":[{"name":"shard 0","addr":"db:3306/q0","ok":true}],
  "tiers":{"counted_at":"2026-11-29T09:00:00Z","age_seconds":3600,"hot":{"identities":1000000,"bytes":123456789},"warm":{"identities":2000,"bytes":1000},"cold":{"identities":3,"bytes":10}},
  "cycle":{"cycle":"c1","state":"running","instances":{"http://a:8080":{"parts_done":3,"parts_running":1,"cells_scanned":100,"cells_moved":4}},"parts_done":3,"parts_total":10,"fraction":0.3,"cells_scanned":100000,"cells_total":5000000,"cells_moved":400,"cells_per_second":1234.4,"elapsed_seconds":100,"eta_seconds":300}}}`,
			[]string{
				"quota fleet, as http://a:8080 sees it at 2026-11-29 10:00:00 UTC",
				"INSTANCES (4)", "1h01m   abcdef012345  ready\n",
				"NOT READY: redis down (no heartbeat in Redis)",
				"UNREACHABLE: connection refused; last heartbeat 10m00s ago (draining)",
				"DRAINING: draining (heartbeat 20m00s old)",
				"rules: INSTANCES DISAGREE:", "fleet registry: boom",
				"REDIS (cluster)", "slots 0-5460  ok", "DOWN: down", "MYSQL (1 shards)",
				"TIERS (counted 1h00m ago", "hot  1,000,000  99.8%  123,456,789",
				"CYCLE c1: running", "3/10 parts (30.0%), 100,000/5,000,000+ cells scanned", "by http://a:8080: 3 parts done, 1 running",
				"ANALYTICS", "http://a:8080: lag 10s, 12,345 rows pending", "http://b:8080: no flush since start, 5 rows pending", "http://c:8080: unknown (unreachable)", "http://d:8080: off",
			}},
		{"tiering off, one rules version", `{"from":"a","at":"2026-11-29T10:00:00Z","rules_versions":{"v9":["a"]},"fleet":{"redis_mode":"single","tiering_off":true}}`,
			[]string{"rules: every instance has v9 in force", "REDIS (single)", "TIERS: tiering off", "CYCLE: none (tiering off)"}},
		{"tiers and cycle unavailable", `{"from":"a","at":"2026-11-29T10:00:00Z","fleet":{"tiers_error":"x","cycle_error":"y"}}`,
			[]string{"TIERS: unavailable: x", "CYCLE: unavailable: y"}},
		{"a compaction holds the cycle key", `{"from":"a","at":"2026-11-29T10:00:00Z","fleet":{"cycle":{"cycle":"c2","state":"compaction"}}}`,
			[]string{"TIERS: never counted", "CYCLE: a cold filter compaction holds the cycle key (c2)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v fleet.View
			if err := json.Unmarshal([]byte(tc.view), &v); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			v.Render(&b)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
		})
	}
}

package limiter

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/rules"
)

// buildOpCase is a request of buildOpFixture's.
type buildOpCase struct {
	name string
	req  Request
}

// buildOpFixture is a compiled rule set with every kind of cell (fixed and
// other algorithms, calendar windows, several limits, plans), a time, and
// requests that meet each kind, explicit counters too.
func buildOpFixture(t *testing.T) (*compiledSet, time.Time, []buildOpCase) {
	t.Helper()
	set, err := rules.ParseYAML([]byte(`
rules:
  - {name: app_ip_hourly, dimensions: [app_id, ip], limit: 10000, window: 1h, algorithm: fixed_window}
  - {name: app_user_iface_hourly, dimensions: [app_id, user_id, interface_id], limit: 1000, window: 1h, algorithm: fixed_window}
  - {name: app_daily, dimensions: [app_id], limit: 100, window: day, algorithm: fixed_window}
  - {name: session_sliding, dimensions: [session_id], limits: [{limit: 5, window: 1s}, {limit: 50, window: 1m}], algorithm: sliding_window}
  - {name: ip_bucket, dimensions: [ip], limit: 10, window: 1m, algorithm: token_bucket}
plans:
  pro: {app_daily: 1000}
`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := compile(set, &rules.Assignments{Plans: map[string]string{"a2": "pro"}})
	if err != nil {
		t.Fatal(err)
	}
	return cs, time.Date(2026, 11, 29, 10, 17, 3, 0, time.UTC), []buildOpCase{
		{"two fixed rules", Request{Cost: 1, Dims: []Dim{{"app_id", "a1"}, {"ip", "10.0.0.1"}, {"user_id", "u"}, {"interface_id", "i"}}}},
		{"plan and calendar", Request{Cost: 2, Dims: []Dim{{"app_id", "a2"}}}},
		{"several limits", Request{Cost: 1, DryRun: true, Dims: []Dim{{"session_id", "s"}}}},
		{"token bucket", Request{Cost: 3, Dims: []Dim{{"ip", "10.0.0.2"}}}},
		{"counters", Request{Cost: 1, Scope: "envoy:platform", Counters: []Counter{
			{Name: "c1", Identity: []string{"app_id", "a1"}, Limit: 10, Window: time.Minute, App: "a1"},
			{Name: "c2", Identity: []string{"ip", "x"}, Limit: 20, Window: time.Hour},
		}}},
	}
}

// An op built for the denial cache alone (Denied) has the cache key and
// the answer of the op the store would be given, for every kind of cell:
// fixed and other algorithms, calendar windows, several limits, plans and
// explicit counters.
func TestBuildOp_CacheOnlyKeepsTheDenialKeyAndTheAnswer(t *testing.T) {
	cs, now, cases := buildOpFixture(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			full, fullOwners := buildOp(cs, &c.req, now, time.UTC, false)
			lean, leanOwners := buildOp(cs, &c.req, now, time.UTC, true)
			fk, fok := denialKey(nil, full)
			lk, lok := denialKey(nil, lean)
			if !fok || !lok || string(fk) != string(lk) {
				t.Fatalf("cache key %x (%v), want %x (%v)", lk, lok, fk, fok)
			}
			for i := range full.Out {
				full.Out[i].Remaining, lean.Out[i].Remaining = int64(i), int64(i)
			}
			fd, ld := decision(full, fullOwners), decision(lean, leanOwners)
			if len(fd.Entries) != len(ld.Entries) {
				t.Fatalf("%d entries, want %d", len(ld.Entries), len(fd.Entries))
			}
			for i := range fd.Entries {
				if fd.Entries[i] != ld.Entries[i] {
					t.Fatalf("entry %d: %+v, want %+v", i, ld.Entries[i], fd.Entries[i])
				}
			}
		})
	}
}

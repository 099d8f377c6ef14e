package limiter

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// Every fixed-window cell the limiter makes, of a rule, a calendar window,
// a plan or an explicit counter, carries the id of its identity and window
// (the directory and the activity count take it instead of hashing it
// again), and a cell of another algorithm none.
func TestBuildOp_FixedCellsCarryTheirCellID(t *testing.T) {
	t.Parallel()
	set, err := rules.ParseYAML([]byte(`
rules:
  - {name: app_ip_hourly, dimensions: [app_id, ip], limit: 10000, window: 1h, algorithm: fixed_window}
  - {name: app_daily, dimensions: [app_id], limit: 100, window: day, algorithm: fixed_window}
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
	now := time.Date(2026, 11, 29, 10, 17, 3, 0, time.UTC)
	for _, c := range []struct {
		name  string
		req   Request
		fixed int
	}{
		{"rules, calendar and bucket", Request{Cost: 1, Dims: []Dim{{"app_id", "a1"}, {"ip", "10.0.0.1"}}}, 2},
		{"plan", Request{Cost: 1, Dims: []Dim{{"app_id", "a2"}}}, 1},
		{"counters", Request{Cost: 1, Scope: "envoy:platform", Counters: []Counter{
			{Name: "c1", Identity: []string{"app_id", "a1"}, Limit: 10, Window: time.Minute, App: "a1"},
			{Name: "c2", Identity: []string{"ip", "x"}, Limit: 20, Window: time.Hour},
		}}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			op, _ := buildOp(cs, &c.req, now, time.UTC, false)
			fixed := 0
			for i, cell := range op.Cells {
				want := tiers.CellID{}
				if cell.Algorithm == rules.FixedWindow {
					want = tiers.CellIDOf(cell.Identity, cell.Window)
					fixed++
				}
				if cell.ID != want {
					t.Errorf("cell %d (%s, %s): id %x, want %x", i, cell.Algorithm, cell.Window, cell.ID, want)
				}
			}
			if fixed != c.fixed {
				t.Fatalf("%d fixed-window cells, want %d", fixed, c.fixed)
			}
		})
	}
}

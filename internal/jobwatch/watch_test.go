package jobwatch

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/migrate/jobs"
)

func TestSummary_SaysWhatIsDoneAndLeft(t *testing.T) {
	t.Parallel()
	eta := 7.0
	for _, tc := range []struct {
		name string
		v    jobs.JobView
		want string
	}{
		{"nothing yet", jobs.JobView{Kind: "migrate", Progress: jobs.Progress{PartsTotal: 32}},
			"migrate: 0/32 parts, 0 cells, 0 moved, 0/s, 0s elapsed, ETA ?"},
		{"a rebuild, cells not all counted", jobs.JobView{Kind: "rebuild-filters", Progress: jobs.Progress{PartsDone: 1, PartsTotal: 2, CellsScanned: 1234567, CellsTotal: 2000000, CellsMoved: 10, CellsPerSecond: 999.6, ElapsedSeconds: 125, ETASeconds: &eta}},
			"rebuild-filters: 1/2 parts, 1,234,567/2,000,000+ cells, 10 put back, 1,000/s, 2m05s elapsed, ETA 7s"},
		{"a cycle shows the fleet's figures", jobs.JobView{Kind: "migrate", State: "running",
			Progress: jobs.Progress{PartsDone: 3, PartsTotal: 32, CellsScanned: 300, Fraction: 0.5, ETASeconds: &eta},
			Fleet: &jobs.FleetProgress{Progress: jobs.Progress{PartsDone: 16, PartsTotal: 32, CellsScanned: 1600, CellsTotal: 3200, CellsCounted: true, CellsMoved: 5, CellsPerSecond: 100, ElapsedSeconds: 16},
				Instances: map[string]jobs.InstanceProgress{"a": {}, "b": {}}}},
			"migrate: 16/32 parts, 1,600/3,200 cells, 5 moved, 100/s, 16s elapsed, ETA 7s (fleet of 2 instances; this one: 3 parts, 300 cells)"},
	} {
		if got := Summary(tc.v); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// Off a terminal, Watch prints a line at once, one every Every while the
// job runs, and the last when it ends; it stops when ctx does.
func TestWatch_PlainLinesEveryIntervalUntilTheJobEnds(t *testing.T) {
	t.Parallel()
	views := []jobs.JobView{}
	for i := range 6 {
		v := jobs.JobView{ID: "migrate-x", Kind: "migrate", State: "running", Progress: jobs.Progress{PartsDone: i, PartsTotal: 5, Fraction: float64(i) / 5}}
		if i == 5 {
			v.State = "done"
		}
		views = append(views, v)
	}
	n := 0
	fetch := func(context.Context) (jobs.JobView, error) { n++; return views[min(n, 5)], nil }
	var out bytes.Buffer
	v, err := Watch(context.Background(), &out, views[0], fetch, Options{Poll: time.Millisecond, Every: time.Hour})
	if err != nil || v.State != "done" {
		t.Fatalf("Watch: %+v, %v", v, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " 0.0% migrate: 0/5 parts") || !strings.Contains(lines[1], " done migrate: 5/5 parts") {
		t.Fatalf("lines %q: want the first and the last (every hour between)", lines)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Watch(ctx, &out, views[0], fetch, Options{Poll: time.Millisecond}); err == nil {
		t.Fatal("Watch after ctx ended: no error")
	}
}

package routing

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// BenchmarkHotCheck_FirstCallInATagWithColdCells is the check path at a
// window's start once tiering has sent cells cold: a cell's first call of
// a window finds no key, so the hot script reads its tag's header and,
// when the tag has cold cells, probes the tag's cold filter (a GETRANGE a
// layer). One cell an op, a new one each time, over 64 tags whose filters
// hold no cell, 2,000 cells in one layer, or 2,000 cells in the layers 8
// switches of 250 without an estimate leave. It reports the Redis CPU an
// op (a private redis-server) and the share of ops the filter answered
// "may be cold" (false positives: the router would look them up).
func BenchmarkHotCheck_FirstCallInATagWithColdCells(b *testing.B) {
	for _, tc := range []struct {
		name     string
		switches int // calls of SwitchToCold a tag, 2,000 cells in all
		estimate bool
		compact  bool // then ReplaceColdFilter with the same cells
	}{
		{"no-cold-cells", 0, false, false},
		{"one-layer", 1, true, false},
		{"grown-layers", 8, false, false},
		{"grown-layers-compacted", 8, false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rdb := testenv.BenchRedis(b)
			ws := warm.NewStore(rdb, warm.Options{})
			hot := NewRouter(hot.NewStore(rdb, hot.Options{}), ws, nil).Hot()
			ctx := context.Background()
			apps := make([]string, 64)
			for i := range apps {
				apps[i] = "app-" + strconv.Itoa(i)
			}
			cells := fillColdFilters(b, ws, apps, tc.switches, tc.estimate)
			if tc.compact {
				compactColdFilters(b, ws, cells)
			}
			now := time.Now()
			maybe := 0
			i := 0
			cpu0 := testenv.RedisCPU(b, rdb)
			for b.Loop() {
				c := newConfCell(1000, time.Hour)
				c.App = apps[i%len(apps)]
				i++
				op := &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(now)}}
				if err := hot.Check(ctx, now, []*tiers.Op{op}); err != nil {
					b.Fatal(err)
				}
				if len(op.Route) > 0 && op.Route[0].Where == tiers.RouteUnknown {
					maybe++
				}
			}
			b.ReportMetric(float64((testenv.RedisCPU(b, rdb)-cpu0).Nanoseconds())/1000/float64(b.N), "redis-us/op")
			b.ReportMetric(float64(maybe)/float64(b.N), "maybe-cold/op")
		})
	}
}

// fillColdFilters adds 2,000 cells to each app's cold filter in switches
// calls (none: no filter), with the cycle's estimate of 2,000 or without,
// and returns them by tag.
func fillColdFilters(b *testing.B, ws *warm.Store, apps []string, switches int, estimate bool) map[tiers.Tag][]warm.FilterCell {
	ctx := context.Background()
	cells := map[tiers.Tag][]warm.FilterCell{}
	for _, app := range apps {
		for s := range switches {
			swaps := make([]warm.DirSwap, 2000/switches)
			for k := range swaps {
				c := newConfCell(10, time.Hour)
				c.App = app
				swaps[k].Ref = c.Ref()
				cells[swaps[k].Tag] = append(cells[swaps[k].Tag], warm.FilterCellOf(swaps[k].ID()))
			}
			var capacity func(tiers.Tag) int
			if estimate {
				capacity = func(tiers.Tag) int { return 2000 }
			}
			if _, err := ws.SwitchToCold(ctx, swaps, capacity); err != nil {
				b.Fatalf("switch %d of %s: %v", s, app, err)
			}
		}
	}
	return cells
}

// compactColdFilters replaces each tag's filter with one layer of its
// cells, as worker.Worker.CompactColdFilters does when they are all cold.
func compactColdFilters(b *testing.B, ws *warm.Store, cells map[tiers.Tag][]warm.FilterCell) {
	ctx := context.Background()
	for tag, cs := range cells {
		f, err := ws.ColdFilters(ctx, []tiers.Tag{tag})
		if err != nil {
			b.Fatal(err)
		}
		if ok, _, err := ws.ReplaceColdFilter(ctx, tag, f[0].Version, cs); err != nil || !ok {
			b.Fatalf("replace: %v %v", ok, err)
		}
	}
}

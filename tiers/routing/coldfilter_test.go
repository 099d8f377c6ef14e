package routing

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/warm"
)

// filterRouter is a router whose Redis commands and MySQL round trips are
// counted, with its hot scripts already loaded.
func filterRouter(t *testing.T) (r *Router, calls *testenv.RedisCalls, mysqlTrips func() int64) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	dbs, trips := testenv.CountedShards(t, 2)
	r = NewRouter(hot.NewStore(rdb, hot.Options{Prefix: prefix}), warm.NewStore(rdb, warm.Options{Prefix: prefix}), cold.NewStore(dbs, cold.Options{}))
	if err := r.Hot().Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	calls = &testenv.RedisCalls{}
	rdb.AddHook(calls)
	return r, calls, func() int64 { return trips.Swap(0) }
}

// inFilter reports whether the cold filter of c's tag says "may be cold".
func inFilter(t *testing.T, r *Router, c confCell) bool {
	t.Helper()
	in, err := r.warm.MayBeCold(context.Background(), []tiers.Ref{c.Ref()})
	if err != nil {
		t.Fatal(err)
	}
	return in[0]
}

// sameApp is a new cell of c's app (so of its tag and cold filter) that
// the filter does not hold.
func sameApp(t *testing.T, r *Router, c confCell) confCell {
	t.Helper()
	for range 100 {
		n := newConfCell(c.Limit, c.Window)
		n.App, n.Vals[0] = c.App, c.App
		if !inFilter(t, r, n) {
			return n
		}
	}
	t.Fatal("every cell tried is in the filter")
	return confCell{}
}

// A cell never seen before costs what a hot check costs: one script call
// in one round trip, no MySQL statement, nothing written to the directory
// - also in an app with cold cells (a filter to probe), and in a batch,
// whose checks share script calls of up to 32 (hot.fixedPerCall).
func TestRouter_NewCellCostsOneScriptCallAndNoMySQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		appWithCold  bool
		ops, perOp   int
		wantRedisCmd int64
	}{
		{"one op, app without cold cells", false, 1, 2, 1},
		{"one op, app with cold cells", true, 1, 2, 1},
		{"a batch of 20, app with cold cells", true, 20, 2, 1},
		{"a batch of 40, app with cold cells", true, 40, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, calls, mysqlTrips := filterRouter(t)
			ctx := context.Background()
			app := newConfCell(3, time.Hour)
			if tc.appWithCold {
				makeCold(t, r, app)
			}
			var ops []*tiers.Op
			var cells []confCell
			for range tc.ops {
				var cs []confCell
				for range tc.perOp {
					cs = append(cs, sameApp(t, r, app))
				}
				cells = append(cells, cs...)
				ops = append(ops, confOp(confT0, 1, tiers.Enforce, cs...))
			}
			mysqlTrips()
			calls.Reset()
			routerCheck(t, r, ops...)
			if n := mysqlTrips(); n != 0 {
				t.Errorf("%d MySQL round trips, want 0", n)
			}
			if trips, cmds := calls.Trips.Load(), calls.Cmds.Load(); trips != 1 || cmds != tc.wantRedisCmd {
				t.Errorf("%d Redis round trips of %d commands, want 1 of %d", trips, cmds, tc.wantRedisCmd)
			}
			for i, op := range ops {
				if !op.Committed || op.Out[0].Tier != tiers.Hot || op.Out[0].Remaining != 2 {
					t.Fatalf("op %d: committed %v %+v, want counted in hot", i, op.Committed, op.Out)
				}
			}
			for _, c := range cells {
				ref := c.Ref()
				raw, err := r.warm.DirRaw(ctx, []tiers.Ref{ref})
				if err != nil || raw[0] != "" {
					t.Fatalf("directory field %q (%v), want none: a hot cell has no marker", raw, err)
				}
			}
		})
	}
}

// A cell the cold filter holds is looked up, never counted as new while
// it is cold: a cold cell counts in its row; a false positive (in the
// filter, no row) costs one lookup on its first check of a window and is
// then hot; a "not cold" found before a switch to cold in its tag is not
// taken after it.
func TestRouter_ColdCellIsNeverCountedAsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("cold cell counts in its row", func(t *testing.T) {
		t.Parallel()
		r, _, _ := filterRouter(t)
		c := newConfCell(3, time.Hour)
		rec := tiers.Record{Ref: c.Ref(), Count: 2, First: confT0.Unix(), Last: confT0.Unix()}
		if err := r.cold.Import(ctx, []tiers.Record{rec}); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.warm.SwitchToCold(ctx, []warm.DirSwap{{Ref: c.Ref()}}, nil); err != nil || !ok[0] {
			t.Fatal(ok, err)
		}
		first, second := confOp(confT0, 1, tiers.Enforce, c), confOp(confT0, 1, tiers.Enforce, c)
		routerCheck(t, r, first)
		routerCheck(t, r, second)
		if !first.Committed || first.Out[0].Tier != tiers.Cold || first.Out[0].Remaining != 0 || second.Allowed() {
			t.Fatalf("3rd call of 3: %+v; 4th allowed %v; want the cold count kept", first.Out, second.Allowed())
		}
	})

	t.Run("false positive: one lookup, then hot", func(t *testing.T) {
		t.Parallel()
		r, _, mysqlTrips := filterRouter(t)
		c := newConfCell(3, time.Hour)
		// In the filter without a row: what a false positive, or a cell
		// moved out of cold, looks like.
		if ok, err := r.warm.SwitchToCold(ctx, []warm.DirSwap{{Ref: c.Ref()}}, nil); err != nil || !ok[0] {
			t.Fatal(ok, err)
		}
		mysqlTrips()
		var trips []int64
		var allowed []bool
		for range 4 {
			op := confOp(confT0, 1, tiers.Enforce, c)
			routerCheck(t, r, op)
			trips = append(trips, mysqlTrips())
			allowed = append(allowed, op.Allowed())
			if op.Committed && op.Out[0].Tier != tiers.Hot {
				t.Fatalf("counted in %s, want hot", op.Out[0].Tier)
			}
		}
		if !slices.Equal(trips, []int64{1, 0, 0, 0}) || !slices.Equal(allowed, []bool{true, true, true, false}) {
			t.Fatalf("MySQL round trips %v, allowed %v; want [1 0 0 0], 3 of 3 allowed", trips, allowed)
		}
	})

	t.Run("switched to cold after the lookup", func(t *testing.T) {
		t.Parallel()
		r, _, _ := filterRouter(t)
		c := newConfCell(3, time.Hour)
		if ok, err := r.warm.SwitchToCold(ctx, []warm.DirSwap{{Ref: c.Ref()}}, nil); err != nil || !ok[0] {
			t.Fatal(ok, err)
		}
		op := confOp(confT0, 1, tiers.Enforce, c)
		if err := r.hot.Run(ctx, confT0, r.hot.Plan([]*tiers.Op{op})); err != nil {
			t.Fatal(err)
		}
		if op.Route == nil || op.Route[0].Where != tiers.RouteUnknown {
			t.Fatalf("route %v, want may-be-cold", op.Route)
		}
		seen := op.Route[0].Raw
		// Now the cell goes cold with 2 calls counted (its row, then the
		// switch), after the router found no row at version seen.
		rec := tiers.Record{Ref: c.Ref(), Count: 2, First: confT0.Unix(), Last: confT0.Unix()}
		if err := r.cold.Import(ctx, []tiers.Record{rec}); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.warm.SwitchToCold(ctx, []warm.DirSwap{{Ref: c.Ref()}}, nil); err != nil || !ok[0] {
			t.Fatal(ok, err)
		}
		stale := confOp(confT0, 1, tiers.Enforce, c)
		stale.NotCold = []string{seen}
		if err := r.hot.Run(ctx, confT0, r.hot.Plan([]*tiers.Op{stale})); err != nil {
			t.Fatal(err)
		}
		if stale.Route == nil || stale.Route[0].Where != tiers.RouteUnknown || stale.Route[0].Raw == seen {
			t.Fatalf("route %+v after the switch: a stale not-cold was taken", stale.Route)
		}
		// Through the router: the cold count holds.
		a, b := confOp(confT0, 1, tiers.Enforce, c), confOp(confT0, 1, tiers.Enforce, c)
		routerCheck(t, r, a)
		routerCheck(t, r, b)
		if !a.Committed || a.Out[0].Tier != tiers.Cold || b.Allowed() {
			t.Fatalf("3rd call %+v, 4th allowed %v: want the cold count of 2 kept", a.Out, b.Allowed())
		}
	})
}

// A new cell's check needs no MySQL at all: with the shards unreachable,
// new cells are still decided and counted.
func TestRouter_NewCellsNeedNoMySQL(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cfg := testenv.MySQLConfig(t, "quota_none")
	cfg.Addr, cfg.Timeout = addr, time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	r := NewRouter(hot.NewStore(rdb, hot.Options{Prefix: prefix}), warm.NewStore(rdb, warm.Options{Prefix: prefix}), cold.NewStore([]*sql.DB{db}, cold.Options{}))
	op := confOp(confT0, 1, tiers.Enforce, newConfCell(2, time.Hour), newConfCell(2, time.Minute))
	routerCheck(t, r, op)
	if !op.Committed || op.Out[0].Remaining != 1 || op.Out[1].Remaining != 1 {
		t.Fatalf("committed %v %+v, want both counted", op.Committed, op.Out)
	}
}

// The cold filter holds every cell switched to cold (a miss would count a
// cold cell as new), whatever the batches, and few others: with the
// cycle's estimate of the tag's cold cells it is one layer of about a
// byte a cell; without it, layers grow with the cells and the false
// positives with the layers.
func TestColdFilter_HoldsEveryCellSwitchedAndFewOthers(t *testing.T) {
	t.Parallel()
	const cells, batch = 4000, 100
	for _, tc := range []struct {
		name      string
		capacity  func(tiers.Tag) int
		maxFP     float64 // share of other cells of the tag found "maybe"
		maxLayers int
	}{
		{"estimate of the tag's cells", func(tiers.Tag) int { return cells }, 0.06, 1},
		{"no estimate", nil, 0.25, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			ws := warm.NewStore(rdb, warm.Options{Prefix: prefix})
			ctx := context.Background()
			app := "app-" + testenv.RandomHex(4)
			ref := func(i int) tiers.Ref {
				c := confCell{Rule: "f", Vals: []string{app, "u" + string(rune('a'+i%26)), testenv.RandomHex(4)}, Window: time.Hour, App: app, User: "u"}
				return c.Ref()
			}
			var in []tiers.Ref
			for range cells / batch {
				var swaps []warm.DirSwap
				for range batch {
					r := ref(len(in))
					in = append(in, r)
					swaps = append(swaps, warm.DirSwap{Ref: r})
				}
				if ok, err := ws.SwitchToCold(ctx, swaps, tc.capacity); err != nil || slices.Contains(ok, false) {
					t.Fatalf("switch: %v", err)
				}
			}
			got, err := ws.MayBeCold(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if k := slices.Index(got, false); k >= 0 {
				t.Fatalf("cell %d of %d switched to cold is not in the filter", k, len(in))
			}
			var others []tiers.Ref
			for range cells {
				others = append(others, ref(0))
			}
			got, err = ws.MayBeCold(ctx, others)
			if err != nil {
				t.Fatal(err)
			}
			fp := 0
			for _, b := range got {
				if b {
					fp++
				}
			}
			key := ws.HeaderKey(&in[0])
			head, err := rdb.GetRange(ctx, key, 0, 12).Result()
			if err != nil || len(head) != 13 {
				t.Fatalf("header %q: %v", head, err)
			}
			layers := int(head[12])
			size, _ := rdb.StrLen(ctx, key).Result()
			t.Logf("%d layers, %d bytes (%.2f a cell), false positives %d of %d", layers, size, float64(size)/cells, fp, len(others))
			if share := float64(fp) / float64(len(others)); share > tc.maxFP || layers > tc.maxLayers {
				t.Fatalf("%d layers (max %d), false positives %.3f (max %.2f)", layers, tc.maxLayers, share, tc.maxFP)
			}
			if tc.capacity != nil && float64(size) > 1.1*cells {
				t.Fatalf("%d bytes for %d cells with the estimate, want about one a cell", size, cells)
			}
		})
	}
}

// The bits a switch sets are those of the layout directory.lua documents
// (block hash from the field's bytes 1-3, four 6-bit positions from bytes
// 4-6, a byte's high bit first): filters written by earlier builds stay
// readable only while every build probes the same bits.
func TestColdFilter_StoredBitsFollowTheDocumentedLayout(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ws := warm.NewStore(rdb, warm.Options{Prefix: prefix})
	ctx := context.Background()
	for i := range 8 {
		c := newConfCell(10, time.Hour) // a tag of its own: a fresh filter
		r := c.Ref()
		// Capacity 8: a layer of one 8-byte block, so the cell's block is it.
		if ok, err := ws.SwitchToCold(ctx, []warm.DirSwap{{Ref: r}}, func(tiers.Tag) int { return 8 }); err != nil || !ok[0] {
			t.Fatal(ok, err)
		}
		_, field := ws.Location(&r)
		raw, err := rdb.Get(ctx, ws.HeaderKey(&r)).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		const header = 13
		if len(raw) != header+4+8 || raw[header-1] != 1 {
			t.Fatalf("cell %d: header of %d bytes, %d layers; want one layer of one block", i, len(raw), raw[header-1])
		}
		f := []byte(field)
		var want [8]byte
		for _, p := range []byte{f[3] >> 2, f[3]&3<<4 | f[4]>>4, f[4]&15<<2 | f[5]>>6, f[5] & 63} {
			want[p/8] |= 0x80 >> (p % 8)
		}
		if got := raw[header+4:]; !bytes.Equal(got, want[:]) {
			t.Fatalf("cell %d (field %x): block %08b, want %08b", i, f, got, want)
		}
	}
}

// ReplaceColdFilter writes one layer that holds exactly the cells given
// with the bits the scripts probe, keeps the header's warm layout, changes
// the version, and writes nothing if a switch changed the version since
// it was read (worker.Worker.CompactColdFilters).
func TestReplaceColdFilter_WritesOneLayerOfItsCellsUnlessTheVersionChanged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		keep  int  // of the 2,000 cells switched, those the new filter holds
		stale bool // a switch between the read and the replace
	}{
		{"a thousand of the cells", 1000, false},
		{"none of them", 0, false},
		{"a switch meanwhile", 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			ws := warm.NewStore(rdb, warm.Options{Prefix: prefix})
			ctx := context.Background()
			app := "app-" + testenv.RandomHex(4)
			refs := func(n int) []tiers.Ref {
				out := make([]tiers.Ref, n)
				for i := range out {
					c := confCell{Rule: "f", Vals: []string{app, testenv.RandomHex(6)}, Window: time.Hour, App: app, User: "u"}
					out[i] = c.Ref()
				}
				return out
			}
			switched := refs(2000)
			for batch := range slices.Chunk(switched, 100) { // no estimate: layers grow
				swaps := make([]warm.DirSwap, len(batch))
				for i := range batch {
					swaps[i] = warm.DirSwap{Ref: batch[i]}
				}
				if ok, err := ws.SwitchToCold(ctx, swaps, nil); err != nil || slices.Contains(ok, false) {
					t.Fatalf("switch: %v", err)
				}
			}
			key, tag := ws.HeaderKey(&switched[0]), switched[0].Tag
			if err := rdb.SetRange(ctx, key, 0, "\x01\x02\x00\x03").Err(); err != nil { // a ws layout
				t.Fatal(err)
			}
			before, err := ws.ColdFilters(ctx, []tiers.Tag{tag})
			// A cell whose bits were all set already is not counted in.
			if err != nil || before[0].Layers < 2 || before[0].Cells < 1000 || before[0].Cells > 2000 {
				t.Fatalf("filter before %+v, %v; want several layers of up to 2,000 cells", before, err)
			}
			if tc.stale {
				if _, err := ws.SwitchToCold(ctx, []warm.DirSwap{{Ref: refs(1)[0]}}, nil); err != nil {
					t.Fatal(err)
				}
			}
			raw, _ := rdb.Get(ctx, key).Bytes()
			cells := make([]warm.FilterCell, tc.keep)
			for i := range cells {
				cells[i] = warm.FilterCellOf(switched[i].ID())
			}
			ok, size, err := ws.ReplaceColdFilter(ctx, tag, before[0].Version, cells)
			if err != nil || ok == tc.stale {
				t.Fatalf("replaced %v, %v; want %v", ok, err, !tc.stale)
			}
			after, _ := rdb.Get(ctx, key).Bytes()
			if tc.stale {
				if !bytes.Equal(after, raw) {
					t.Fatal("the header changed although the version had")
				}
				return
			}
			if string(after[:4]) != "\x01\x02\x00\x03" {
				t.Fatalf("warm layout %x, want 01020003", after[:4])
			}
			got, err := ws.ColdFilters(ctx, []tiers.Tag{tag})
			wantLayers := min(tc.keep, 1)
			if err != nil || got[0].Layers != wantLayers || got[0].Cells != tc.keep || got[0].Bytes != len(after) || size != len(after) ||
				binary.BigEndian.Uint32(got[0].Version[:]) != binary.BigEndian.Uint32(before[0].Version[:])+1 {
				t.Fatalf("filter after %+v (before %+v), %v; want %d layer(s) of %d cells and the next version", got, before, err, wantLayers, tc.keep)
			}
			held, err := ws.MayBeCold(ctx, switched)
			if err != nil {
				t.Fatal(err)
			}
			if k := slices.Index(held[:tc.keep], false); k >= 0 {
				t.Fatalf("cell %d of those kept is not in the new filter", k)
			}
			fp := 0
			for _, h := range held[tc.keep:] {
				if h {
					fp++
				}
			}
			if share := float64(fp) / float64(len(held)-tc.keep); share > 0.06 {
				t.Fatalf("%d of the %d cells left out still maybe cold (%.3f)", fp, len(held)-tc.keep, share)
			}
		})
	}
}

// A script call over checks of several apps reads the directory only
// when one of their tags has a header (one EXISTS for all): new cells in
// apps of hot cells only are counted as new, and among them a warm cell
// and a cold cell of other apps still count where they live.
func TestRouter_OneScriptCallOverAppsWithAndWithoutHeadersPlacesEachCell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newOps := func(n int) []*tiers.Op {
		var ops []*tiers.Op
		for range n {
			ops = append(ops, confOp(confT0, 1, tiers.Enforce, newConfCell(3, time.Hour)))
		}
		return ops
	}
	wantHot := func(t *testing.T, ops []*tiers.Op) {
		t.Helper()
		for i, op := range ops {
			if !op.Committed || op.Route != nil || op.Out[0].Tier != tiers.Hot || op.Out[0].Remaining != 2 {
				t.Errorf("new cell %d: committed %v, route %v, %+v; want counted in hot", i, op.Committed, op.Route, op.Out)
			}
		}
	}

	t.Run("no app has a header", func(t *testing.T) {
		t.Parallel()
		r, calls, _ := filterRouter(t)
		ops := newOps(6)
		calls.Reset()
		routerCheck(t, r, ops...)
		if trips, cmds := calls.Trips.Load(), calls.Cmds.Load(); trips != 1 || cmds != 1 {
			t.Errorf("%d round trips of %d commands, want one script call", trips, cmds)
		}
		wantHot(t, ops)
	})

	t.Run("a warm and a cold cell among new ones", func(t *testing.T) {
		t.Parallel()
		r, _, _ := filterRouter(t)
		warmCell, coldCell := newConfCell(3, time.Hour), newConfCell(3, time.Hour)
		rec := func(c confCell) tiers.Record {
			return tiers.Record{Ref: c.Ref(), Count: 2, First: confT0.Unix(), Last: confT0.Unix()}
		}
		if err := r.warm.Import(ctx, []tiers.Record{rec(warmCell)}); err != nil {
			t.Fatal(err)
		}
		if err := r.cold.Import(ctx, []tiers.Record{rec(coldCell)}); err != nil {
			t.Fatal(err)
		}
		if ok, err := r.warm.SwitchToCold(ctx, []warm.DirSwap{{Ref: coldCell.Ref()}}, nil); err != nil || !ok[0] {
			t.Fatal(ok, err)
		}
		fresh := newOps(4)
		w, c := confOp(confT0, 1, tiers.Enforce, warmCell), confOp(confT0, 1, tiers.Enforce, coldCell)
		routerCheck(t, r, fresh[0], w, fresh[1], c, fresh[2], fresh[3])
		wantHot(t, fresh)
		for _, tc := range []struct {
			op   *tiers.Op
			tier tiers.Tier
		}{{w, tiers.Warm}, {c, tiers.Cold}} {
			if !tc.op.Committed || tc.op.Out[0].Tier != tc.tier || tc.op.Out[0].Remaining != 0 {
				t.Errorf("%s cell with 2 of 3 used: committed %v, %+v; want its 3rd call counted in %s", tc.tier, tc.op.Committed, tc.op.Out, tc.tier)
			}
		}
	})
}

package throttled_test

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/analytics/throttled"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// deny is one denial of the model's stream.
type deny struct {
	rule, dim, value string
}

// zipfDenials is n denials of app a1 by two rules, the identities drawn
// from a Zipf law (exponent s over imax identities each), and the exact
// count of each (rule, value).
func zipfDenials(seed int64, n int, s float64, imax uint64) ([]deny, map[[2]string]int64) {
	r := rand.New(rand.NewSource(seed))
	users := rand.NewZipf(r, s, 1, imax-1)
	ips := rand.NewZipf(r, s+0.3, 1, imax-1)
	out := make([]deny, n)
	model := map[[2]string]int64{}
	for i := range out {
		if i%3 == 2 {
			out[i] = deny{"app_ip", "ip", fmt.Sprintf("10.0.%d.%d", ips.Uint64()/256, ips.Uint64()%256)}
		} else {
			out[i] = deny{"app_user", "user_id", fmt.Sprintf("u%d", users.Uint64())}
		}
		model[[2]string{out[i].rule, out[i].value}]++
	}
	return out, model
}

// Three instances share a Zipf-skewed stream of denials (200,000 of them,
// over 50,000 users and 50,000 IPs), each flushing now and then into the
// same shards. The 20 most denied identities of each rule come back in
// the model's order with the model's exact counts and no overcount; every
// instance holds at most TopK identities a summary, and MySQL at most
// KeepRows × (1 + instances/2) rows a rule.
func TestThrottled_TopDeniedAreTheModelsHeavyHittersWithExactCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    float64
		topK int
	}{
		{"zipf 1.1, 1024 a summary", 1.1, 1024},
		{"zipf 1.3, 256 a summary", 1.3, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const instances, keep, top = 3, 1000, 20
			opt := func(o *analytics.Options) { o.Throttled = throttled.Options{TopK: tc.topK, KeepRows: keep} }
			e := newEnv(t, 2, opt)
			fleet := []*analytics.Analytics{e.Rec, e.Open(opt), e.Open(opt)}
			ctx := context.Background()
			stream, model := zipfDenials(7, 200_000, tc.s, 50_000)
			for i, d := range stream {
				fleet[i%instances].Throttled.Denied("a1", d.rule, []string{"app_id", d.dim}, []string{"a1", d.value})
				if i%10_000 == 9_999 {
					if err := fleet[(i/10_000)%instances].Throttled.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, in := range fleet {
				if n := in.Throttled.Entries(); n > 2*tc.topK {
					t.Errorf("instance %d holds %d identities, want at most 2 summaries × %d", i, n, tc.topK)
				}
				if i > 0 {
					if err := in.Throttled.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Instance 0 answers from MySQL plus what it has not flushed.
			got, err := fleet[0].Throttled.Top(ctx, "a1", analytics.DayOf(t0), top)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[0].Rule != "app_ip" || got[1].Rule != "app_user" {
				t.Fatalf("rules %+v, want app_ip and app_user", got)
			}
			for _, rt := range got {
				dim := map[string]string{"app_ip": "ip", "app_user": "user_id"}[rt.Rule]
				want := modelTop(model, rt.Rule, top)
				if len(rt.Top) != top {
					t.Fatalf("%s: %d identities, want %d", rt.Rule, len(rt.Top), top)
				}
				for i, id := range rt.Top {
					v := id.Dimensions[dim]
					if id.Dimensions["app_id"] != "a1" || id.Denied != model[[2]string{rt.Rule, v}] || id.MaxOvercount != 0 || id.Denied != want[i] {
						t.Errorf("%s #%d: %v denied %d (overcount ≤ %d); model: %d for it, %d at this rank", rt.Rule, i+1,
							id.Dimensions, id.Denied, id.MaxOvercount, model[[2]string{rt.Rule, v}], want[i])
					}
				}
				t.Logf("%s: top %d exact, from %d denials down to %d", rt.Rule, top, rt.Top[0].Denied, rt.Top[top-1].Denied)
			}
			for _, rule := range []string{"app_ip", "app_user"} {
				var rows int
				db := e.DBs[analytics.ShardIndex("a1", len(e.DBs))]
				if err := db.QueryRow("SELECT COUNT(*) FROM throttled_identities WHERE app_id = 'a1' AND rule = ?", rule).Scan(&rows); err != nil {
					t.Fatal(err)
				}
				if rows > keep*(2+instances)/2 {
					t.Errorf("%s: %d rows in MySQL, want at most %d", rule, rows, keep*(2+instances)/2)
				}
				t.Logf("%s: %d rows in MySQL (keep %d)", rule, rows, keep)
			}
		})
	}
}

// modelTop is the n highest counts of rule in the model.
func modelTop(model map[[2]string]int64, rule string, n int) []int64 {
	var all []int64
	for k, c := range model {
		if k[0] == rule {
			all = append(all, c)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] > all[j] })
	return all[:min(n, len(all))]
}

// A day's summaries leave memory at the first flush of the next day; the
// day's figures stay in MySQL, and the new day starts from nothing.
func TestThrottled_ADayLeavesMemoryAtTheNextDaysFlushAndStaysQueryable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, nil)
	ctx := context.Background()
	th := e.Rec.Throttled
	for range 5 {
		th.Denied("a1", "app_user", []string{"app_id", "user_id"}, []string{"a1", "u1"})
	}
	if err := th.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	th.Denied("a1", "app_user", []string{"app_id", "user_id"}, []string{"a1", "u1"}) // unflushed at midnight
	e.Clk.Set(t0.Truncate(24 * time.Hour).Add(24*time.Hour + time.Second))
	th.Denied("a1", "app_user", []string{"app_id", "user_id"}, []string{"a1", "u2"})
	if err := th.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := th.Entries(); n != 1 {
		t.Fatalf("%d identities in memory after the next day's flush, want 1 (today's)", n)
	}
	for _, tc := range []struct {
		day  analytics.Day
		user string
		want int64
	}{
		{analytics.DayOf(t0), "u1", 6},
		{analytics.DayOf(t0) + 1, "u2", 1},
	} {
		got, err := th.Top(ctx, "a1", tc.day, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || len(got[0].Top) != 1 || got[0].Top[0].Dimensions["user_id"] != tc.user || got[0].Top[0].Denied != tc.want {
			t.Errorf("%s: %+v, want %s denied %d", tc.day, got, tc.user, tc.want)
		}
	}
}

// The memory of full summaries, measured: TopK identities of two
// dimensions (an app id and a user id of 8 bytes) a summary.
func TestThrottled_MemoryOfFullSummariesIsBounded(t *testing.T) {
	e := newEnv(t, 1, func(o *analytics.Options) {
		o.Throttled = throttled.Options{TopK: 1024, MaxEntries: 64 * 1024}
	})
	th := e.Rec.Throttled
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for app := range 100 { // 100 summaries wanted, the budget holds 64 full ones
		a := fmt.Sprintf("app%05d", app)
		for u := range 1100 {
			th.Denied(a, "app_user", []string{"app_id", "user_id"}, []string{a, fmt.Sprintf("u%07d", u)})
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := th.Entries(); n != 64*1024 {
		t.Fatalf("%d identities held, want the budget's %d", n, 64*1024)
	}
	per := float64(after.HeapAlloc-before.HeapAlloc) / float64(th.Entries())
	t.Logf("%d identities in memory: %.0f bytes each (heap), so the default budget of 131,072 is about %.0f MB", th.Entries(), per, per*131072/1e6)
	if per > 400 {
		t.Errorf("%.0f bytes an identity, more than the 400 the docs allow for", per)
	}
	runtime.KeepAlive(th)
}

// BenchmarkThrottledDenied is what a denied check adds: one Denied of a
// two-dimension identity on a full summary, Zipf-skewed.
func BenchmarkThrottledDenied(b *testing.B) {
	rdb, prefix := testenv.Redis(b)
	an, err := analytics.New(analytics.Options{DBs: testenv.MySQLShards(b, 1), Redis: rdb, KeyPrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	th := an.Throttled
	r := rand.New(rand.NewSource(1))
	z := rand.NewZipf(r, 1.1, 1, 99_999)
	vals := make([]string, 4096)
	for i := range vals {
		vals[i] = fmt.Sprintf("u%d", z.Uint64())
	}
	names := []string{"app_id", "user_id"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		th.Denied("a1", "app_user", names, []string{"a1", vals[i&4095]})
	}
}

// The first flush of a day deletes the rows of days past KeepDays on every
// shard and keeps the others.
func TestThrottled_RowsPastKeepDaysAreDeletedByTheDaysFirstFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, func(o *analytics.Options) { o.Throttled = throttled.Options{KeepDays: 30} })
	ctx := context.Background()
	th := e.Rec.Throttled
	for _, ago := range []int{31, 30, 0} {
		e.Clk.Set(t0.Add(-time.Duration(ago) * 24 * time.Hour))
		for _, app := range []string{"a1", "a2", "a3"} {
			th.Denied(app, "r", []string{"app_id"}, []string{app})
		}
		if err := th.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		ago  int
		kept bool
	}{{31, false}, {30, true}, {0, true}} {
		for _, app := range []string{"a1", "a2", "a3"} {
			got, err := th.Top(ctx, app, analytics.DayOf(t0)-analytics.Day(tc.ago), 10)
			if err != nil {
				t.Fatal(err)
			}
			if kept := len(got) == 1; kept != tc.kept {
				t.Errorf("%s, %d days ago: kept %v, want %v", app, tc.ago, kept, tc.kept)
			}
		}
	}
}

// The day of a denial is the analytics day in QUOTA_TIMEZONE: 17:00 UTC
// on 23 November is already the 24th in Shanghai.
func TestThrottled_TheDayIsTheAnalyticsZonesDate(t *testing.T) {
	t.Parallel()
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1, func(o *analytics.Options) { o.Location = shanghai })
	e.Clk.Set(time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC))
	th := e.Rec.Throttled
	th.Denied("a1", "r", []string{"app_id"}, []string{"a1"})
	ctx := context.Background()
	for _, tc := range []struct {
		date string
		want int
	}{{"2026-11-23", 0}, {"2026-11-24", 1}} {
		d, _ := analytics.ParseDay(tc.date)
		got, err := th.Top(ctx, "a1", d, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tc.want {
			t.Errorf("%s: %+v, want %d rule(s)", tc.date, got, tc.want)
		}
	}
}

package analytics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quota-platform/quota/clock"
)

// keyUsers is PFCOUNT of HyperLogLog k in Redis (0 when there is no such
// key).
func keyUsers(t *testing.T, r *Analytics, k hllKey) int64 {
	t.Helper()
	n, err := r.Flusher.uniq.rdb.PFCount(context.Background(), k.redisKey(r.Flusher.opt.KeyPrefix)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func interfaceKeyUsers(t *testing.T, r *Analytics, app, iface string, day Day) int64 {
	t.Helper()
	return keyUsers(t, r, hllKey{app: app, iface: iface, scope: scopeIface, day: day})
}

func appKeyUsers(t *testing.T, r *Analytics, app string, day Day) int64 {
	t.Helper()
	return keyUsers(t, r, hllKey{app: app, scope: scopeApp, day: day})
}

// Run's flushes send the interface-level distinct users once a minute: the
// flushes in between send the app-level ones only, and the stats count the
// users still waiting.
func TestFlush_InterfaceUsersWaitForTheInterfacePass(t *testing.T) {
	t.Parallel()
	r, _, clk := newShardRecorder(t) // 10:00:00
	day := DayOf(clk.Now())
	ctx := context.Background()
	record := func(from, to int) {
		for i := from; i < to; i++ {
			r.Recorder.Record("app", "iface", fmt.Sprintf("user-%d", i), true)
		}
	}
	// The app key and the interface key get the same users, so their
	// estimates are equal (HyperLogLogs of one set have equal registers).
	record(0, 20)
	var appUsers int64
	for flush := 1; flush <= 3; flush++ { // 10:00:15, :30, :45; users 20 more each
		clk.Advance(15 * time.Second)
		if err := heldFlush(t, r); err != nil {
			t.Fatal(err)
		}
		got := appKeyUsers(t, r, "app", day)
		if got <= appUsers || got < int64(19*flush) {
			t.Fatalf("flush %d: app key counts %d users after %d, want ~%d: app-level users go with every flush", flush, got, appUsers, 20*flush)
		}
		appUsers = got
		if got := interfaceKeyUsers(t, r, "app", "iface", day); got != 0 {
			t.Fatalf("flush %d: the interface key counts %d users before its pass, want none sent yet", flush, got)
		}
		if got := pendingAdds(r, "interface"); got != float64(20*flush) {
			t.Fatalf("flush %d: the interface-scope pending adds gauge is %v, want the %d waiting", flush, got, 20*flush)
		}
		if got := pendingAdds(r, "app"); got != 0 {
			t.Fatalf("flush %d: the app-scope pending adds gauge is %v, want 0 (Redis has them)", flush, got)
		}
		if flush < 3 {
			record(20*flush, 20*flush+20)
		}
	}
	// A query counts the waiting users (adding them to the key itself).
	st, err := r.Stats.InterfaceDay(ctx, "app", "iface", day)
	if err != nil {
		t.Fatal(err)
	}
	if st.UniqueUsers != appUsers {
		t.Fatalf("InterfaceDay counts %d unique users, want %d as the app key (waiting users included)", st.UniqueUsers, appUsers)
	}
	clk.Advance(15 * time.Second) // 10:01:00: a minute since the recorder began
	if err := heldFlush(t, r); err != nil {
		t.Fatal(err)
	}
	appUsers = appKeyUsers(t, r, "app", day)
	if got := interfaceKeyUsers(t, r, "app", "iface", day); got != appUsers || got < 57 {
		t.Fatalf("after a minute the interface key counts %d users, want %d as the app key (~60)", got, appUsers)
	}
	if n := len(r.Flusher.uniq.ifaceQueue.adds); n != 0 {
		t.Fatalf("%d adds still wait after the interface pass", n)
	}
	if got := pendingAdds(r, "interface"); got != 0 {
		t.Fatalf("the interface-scope pending adds gauge is %v after the pass, want 0", got)
	}
}

// pendingAdds is the quota_analytics_pending_user_adds gauge of scope.
func pendingAdds(r *Analytics, scope string) float64 {
	return testutil.ToFloat64(r.Flusher.met.pendingAdds.WithLabelValues(scope))
}

// Some flushes send the interface-level users whatever the minute: the
// first of a day after the users' day is over (persistHLL saves that
// day's interface keys in the same flush), and Flush (and Close).
func TestFlush_InterfaceUsersSentAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start time.Duration // after 10:00:00, when the users call
		flush func(*testing.T, *Analytics, *clock.Fake) error
	}{
		{"first flush after the day is over", 14*time.Hour - 10*time.Second, func(t *testing.T, r *Analytics, clk *clock.Fake) error {
			clk.Advance(15 * time.Second) // 00:00:05 the next day
			return heldFlush(t, r)
		}},
		{"Flush", 0, func(_ *testing.T, r *Analytics, _ *clock.Fake) error { return r.Flusher.Flush(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _, clk := newShardRecorder(t) // 10:00:00
			clk.Advance(tc.start)
			r.Flusher.uniq.lastIfacePass = clk.Now()
			day := DayOf(clk.Now())
			for i := range 5 {
				r.Recorder.Record("app", "iface", fmt.Sprintf("user-%d", i), true)
			}
			if err := tc.flush(t, r, clk); err != nil {
				t.Fatal(err)
			}
			if got := interfaceKeyUsers(t, r, "app", "iface", day); got != 5 {
				t.Fatalf("the interface key counts %d users, want 5", got)
			}
		})
	}
}

// The interface pass views its adds a step at a time: a pass of several
// steps, with keys cut by a step's end, sends every user. Each interface
// key must estimate exactly as a key the test filled with the same users
// (equal sets give equal registers).
func TestFlush_InterfacePassInStepsSendsEveryUser(t *testing.T) {
	t.Parallel()
	r, _, clk := newShardRecorder(t)
	day := DayOf(clk.Now())
	ctx := context.Background()
	ifaces := []string{"a", "b", "c"}
	const users = ifaceViewSize * 3 / 4 // 3 interfaces: the adds take 3 steps
	for _, iface := range ifaces {
		ref := r.Flusher.opt.KeyPrefix + "test-ref:" + iface
		var args []any
		for i := range users {
			u := fmt.Sprintf("%s-user-%d", iface, i)
			r.Recorder.Record("app", iface, u, true)
			args = append(args, u)
		}
		if err := r.Flusher.uniq.rdb.PFAdd(ctx, ref, args...).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Flusher.uniq.rdb.Del(context.Background(), ref) })
	}
	if err := r.Flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, iface := range ifaces {
		want, err := r.Flusher.uniq.rdb.PFCount(ctx, r.Flusher.opt.KeyPrefix+"test-ref:"+iface).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := interfaceKeyUsers(t, r, "app", iface, day); got != want {
			t.Errorf("interface %s: key counts %d users, want %d as the same users added at once", iface, got, want)
		}
	}
}

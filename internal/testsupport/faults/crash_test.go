//go:build faults

package faults

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

const crashRules = `rules:
  - {name: crash_user, dimensions: [app_id, user_id], limit: 1000, window: 366d, algorithm: fixed_window}
  - {name: crash_bucket, dimensions: [app_id, user_id, bucket], limit: 1000, window: 366d, algorithm: token_bucket}
`

// SIGKILL quotad under load: the counters live in Redis, so a restarted
// quotad carries on from exactly what was counted. The only uncertainty is
// the calls in flight at the kill: counted in Redis, answer lost.
func TestQuotadSIGKILL_HotCountersSurvive(t *testing.T) {
	r := testenv.StartRedis(t)
	q := testenv.StartQuotad(t, "QUOTA_REDIS_ADDRS="+r.Addr(), "QUOTA_RULES="+writeRules(t, crashRules), shardsEnv(t))
	fig := newFigures(t)
	const users = 20
	app := fmt.Sprintf("crash-%d", time.Now().UnixNano())
	body := func(seq int64) []byte {
		return fmt.Appendf(nil, `{"app_id":%q,"user_id":"u%d","bucket":"b"}`, app, seq%users)
	}
	load := StartLoad(LoadConfig{URLs: []string{q.URL}, Rate: 1000, Workers: 32, Body: body, Timeout: 5 * time.Second})
	time.Sleep(1500 * time.Millisecond) // a phase of the load
	tKill := time.Now()
	q.Kill()
	killed := time.Now()
	// The load keeps sending into a dead port for a moment: refused at once.
	time.Sleep(200 * time.Millisecond)
	ss := load.Stop()

	allowed := map[int64]int{}
	lost := map[int64]int{}
	for _, s := range ss {
		switch {
		case s.Status == http.StatusOK && s.Enforced == "":
			allowed[s.Seq%users]++
		case s.Status == 0 && s.Intended.Before(killed):
			lost[s.Seq%users]++ // may or may not have been counted
		case s.Status == 0:
		default:
			t.Errorf("unexpected answer before the kill: %s", s.Outcome())
		}
	}
	totalLost := 0
	for _, n := range lost {
		totalLost += n
	}

	q.Start()
	restarted := time.Since(killed)
	total := 0
	for u := range int64(users) {
		for _, rule := range []string{"crash_user", "crash_bucket"} {
			ans := check(t, q, fmt.Sprintf(`{"app_id":%q,"user_id":"u%d","bucket":"b","dry_run":true}`, app, u))
			used := counted(t, ans, rule, 1000)
			if used < allowed[u] || used > allowed[u]+lost[u] {
				t.Errorf("user u%d %s: counter holds %d after the restart; %d were allowed and %d lost in flight",
					u, rule, used, allowed[u], lost[u])
			}
			if rule == "crash_user" {
				total += used
			}
		}
	}
	if total == 0 {
		t.Fatal("nothing was counted before the kill")
	}

	// Every counter key still expires (no counter made immortal by the
	// crash); the shared rules (q:rules) are not a counter and stay.
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "q:{*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %q has TTL %s after the crash", k, ttl)
		}
	}

	// And the limit is exact from where it stopped: u0 gets its remaining
	// calls and not one more.
	ans := check(t, q, fmt.Sprintf(`{"app_id":%q,"user_id":"u0","bucket":"b","dry_run":true}`, app))
	rem := 1000 - counted(t, ans, "crash_user", 1000)
	for i := range rem {
		if a := check(t, q, fmt.Sprintf(`{"app_id":%q,"user_id":"u0"}`, app)); a.status != 200 {
			t.Fatalf("call %d of the %d remaining: %d %s", i+1, rem, a.status, a.raw)
		}
	}
	if a := check(t, q, fmt.Sprintf(`{"app_id":%q,"user_id":"u0"}`, app)); a.status != 429 {
		t.Fatalf("call past the limit after the restart: %d %s", a.status, a.raw)
	}
	assertAlive(t, q)
	fig.add("%d checks, SIGKILL after %s, %d answers lost in flight, restarted and healthy in %s, %d counted calls intact, %d keys all with a TTL",
		len(ss), tKill.Sub(ss[0].Intended).Round(time.Millisecond), totalLost, restarted.Round(time.Millisecond), total, len(keys))
}

// requireAnalytics fails the test unless this quotad records analytics
// (quota_analytics_pending_rows in /metrics): analytics is on by default, so
// its absence is a regression, never a reason to pass.
func requireAnalytics(t *testing.T, q *testenv.Quotad) {
	t.Helper()
	m, err := q.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m["quota_analytics_pending_rows"]; !ok {
		t.Fatal("quotad does not record analytics: no quota_analytics_pending_rows in /metrics")
	}
}

// analyticsCalls is the calls recorded in usage_daily over dbs.
func analyticsCalls(t *testing.T, dbs ...*sql.DB) int64 {
	t.Helper()
	var total int64
	for _, db := range dbs {
		var n sql.NullInt64
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := db.QueryRowContext(ctx, "SELECT SUM(calls) FROM usage_daily").Scan(&n)
		cancel()
		if err != nil {
			t.Fatalf("usage_daily: %v", err)
		}
		total += n.Int64
	}
	return total
}

// SIGKILL quotad while analytics flushes every 500 ms: after the restart
// nothing is doubled (a flush transaction cut by the kill is rolled back by
// MySQL) and no more is missing from the day figures than the kill may
// take. With QUOTA_ANALYTICS_HOLD_MINUTE=off that is the last flush
// interval. With the minute held (the default) it is the minute the last
// flush held back, so the load starts 2.5 s before a minute ends and the
// kill lands 1.7 s into the next: the calls of the finished minute must all
// be there.
func TestQuotadSIGKILL_AnalyticsLosesAtMostWhatItHeld(t *testing.T) {
	const flush = 500 * time.Millisecond
	cases := []struct {
		name string
		hold bool
	}{
		{"minute held (default)", true},
		{"hold off: at most one flush", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := testenv.StartRedis(t)
			dbs, shardEnv := shards(t)
			env := []string{"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_RULES=" + writeRules(t, platformRules), shardEnv,
				"QUOTA_ANALYTICS_FLUSH=" + flush.String()}
			phase := 3200 * time.Millisecond // six flushes, the kill inside the seventh interval
			if !tc.hold {
				env = append(env, "QUOTA_ANALYTICS_HOLD_MINUTE=off")
			}
			q := testenv.StartQuotad(t, env...)
			requireAnalytics(t, q)
			if tc.hold {
				// Start 2.5 s before a minute ends (wait for the next such moment).
				now := time.Now()
				at := now.Truncate(time.Minute).Add(time.Minute - 2500*time.Millisecond)
				if at.Before(now) {
					at = at.Add(time.Minute)
				}
				time.Sleep(time.Until(at))
				phase = 4200 * time.Millisecond
			}
			fig := newFigures(t)
			load := StartLoad(LoadConfig{URLs: []string{q.URL}, Rate: 1000, Workers: 32, Body: platformBody, Timeout: 5 * time.Second})
			time.Sleep(phase)
			tKill := time.Now()
			q.Kill()
			time.Sleep(100 * time.Millisecond)
			ss := load.Stop()
			decidedN := int64(len(ss.Where(decided)))
			// A call answered before from was recorded before it: its day
			// figures were written by a flush before the kill.
			from := tKill.Add(-flush - 300*time.Millisecond)
			if tc.hold {
				from = from.Truncate(time.Minute)
			}
			mayLose := int64(len(ss.Where(func(s Sample) bool { return decided(s) && !s.Done().Before(from) })))

			q.Start()
			// Nothing of the dead process is pending any more: what MySQL has now is final.
			var got int64
			if err := PollUntil(10*time.Second, 200*time.Millisecond, func() error {
				before := analyticsCalls(t, dbs...)
				time.Sleep(2 * flush)
				if got = analyticsCalls(t, dbs...); got != before {
					return fmt.Errorf("still moving: %d -> %d", before, got)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			missing := decidedN - got
			if got > decidedN {
				t.Errorf("analytics holds %d calls, only %d were decided: counted twice", got, decidedN)
			}
			if missing > mayLose {
				t.Errorf("analytics lost %d of %d calls; only the %d answered from %s on may be lost", missing, decidedN, mayLose, from.Format("15:04:05.000"))
			}
			if tc.hold && mayLose == decidedN {
				t.Errorf("all %d calls fell in the held minute: the test proves nothing (load from %s, kill at %s)",
					decidedN, ss[0].Intended.Format("15:04:05.000"), tKill.Format("15:04:05.000"))
			}
			assertAlive(t, q)
			fig.add("%s: %d decided calls, %d in analytics after SIGKILL+restart: %d missing (bound: %d answered from %s on, kill at %s)",
				tc.name, decidedN, got, missing, mayLose, from.Format("15:04:05.000"), tKill.Format("15:04:05.000"))
		})
	}
}

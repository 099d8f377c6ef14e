//go:build faults

package faults

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// shardOutage is quotad with shard 0 on the shared MariaDB and shard 1 on a
// private mariadbd that the test kills.
type shardOutage struct {
	q     *testenv.Quotad
	maria *testenv.MariaDBProcess
	dbs   []*sql.DB // shard 0, shard 1
}

func startShardOutage(t *testing.T, env ...string) *shardOutage {
	t.Helper()
	r := testenv.StartRedis(t)
	maria := testenv.StartMariaDB(t)
	dsn1 := maria.CreateDatabase("quota_shard1")
	db0, dsn0 := testenv.MySQL(t)
	db1, err := sql.Open("mysql", dsn1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db1.Close() })
	q := testenv.StartQuotad(t, append([]string{
		"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_RULES=" + writeRules(t, strings.ReplaceAll(platformRules, "window: 1h", "window: 366d")),
		"QUOTA_MYSQL_SHARDS=" + dsn0 + "," + dsn1, "QUOTA_ANALYTICS_FLUSH=1s",
		// Redis is not what these tests break: a generous timeout keeps a
		// busy shared machine from turning into undecided checks.
		"QUOTA_REDIS_TIMEOUT=1s",
	}, env...)...)
	return &shardOutage{q: q, maria: maria, dbs: []*sql.DB{db0, db1}}
}

// heldMinute is how long usage_daily may lag the calls with the minute in
// progress held back (QUOTA_ANALYTICS_HOLD_MINUTE, on by default): the
// minute, then the flush after it (1 s here).
const heldMinute = time.Minute + time.Second

// readiness is GET /readyz: its status and each dependency's answer.
func readiness(t *testing.T, q *testenv.Quotad) (int, map[string]string) {
	t.Helper()
	a := call(t, "GET", q.URL+"/readyz", "")
	checks := map[string]string{}
	if m, ok := a.json(t)["checks"].(map[string]any); ok {
		for k, v := range m {
			checks[k], _ = v.(string)
		}
	}
	return a.status, checks
}

// waitReady polls /readyz until want says the answer is the one awaited.
func waitReady(t *testing.T, q *testenv.Quotad, what string, want func(int, map[string]string) bool) time.Duration {
	t.Helper()
	began := time.Now()
	var status int
	var checks map[string]string
	if err := PollUntil(30*time.Second, 50*time.Millisecond, func() error {
		if status, checks = readiness(t, q); want(status, checks) {
			return nil
		}
		return ErrNotYet
	}); err != nil {
		t.Fatalf("/readyz never showed %s: %d %v", what, status, checks)
	}
	return time.Since(began)
}

// shard1Down: the shard is reported down; the status follows the fail mode
// (open: still ready, 200; closed: 503), which cmd/quotad's readiness tests check.
func shard1Down(status int, c map[string]string) bool {
	return (status == http.StatusOK || status == http.StatusServiceUnavailable) && c["mysql_shard_1"] != "" && c["mysql_shard_1"] != "ok" && c["mysql_shard_0"] == "ok" && c["redis"] == "ok"
}

func allReady(status int, c map[string]string) bool {
	return status == http.StatusOK && c["mysql_shard_0"] == "ok" && c["mysql_shard_1"] == "ok" && c["redis"] == "ok"
}

// appOnShard is an app id whose analytics live on shard i of n.
func appOnShard(prefix string, i, n int) string {
	for k := 0; ; k++ {
		if app := fmt.Sprintf("%s-%d", prefix, k); analytics.ShardIndex(app, n) == i {
			return app
		}
	}
}

// One of two MySQL shards is killed under load: hot checks do not notice,
// /readyz names the shard while it is down, and analytics (when quotad
// records it) keeps what it could not write and writes it all, once, when
// the shard returns, while the other shard carries on.
func TestMySQLShardKilledUnderLoad(t *testing.T) {
	for _, tiering := range []string{"off", "on"} {
		t.Run("tiering="+tiering, func(t *testing.T) { shardKilledUnderLoad(t, "QUOTA_TIERING="+tiering) })
	}
}

func shardKilledUnderLoad(t *testing.T, env ...string) {
	so := startShardOutage(t, env...)
	q := so.q
	fig := newFigures(t)
	waitReady(t, q, "every dependency up", allReady)
	requireAnalytics(t, q)

	// The load runs over 3,000 identities, all seen before the kill, so all
	// hot (with tiering on, a cell never seen before is looked up in the
	// cold tier first: one on the dead shard follows the fail mode, below).
	// Windows of 366 days: no run crosses one and meets new cells.
	const identities = 3000
	body := func(seq int64) []byte { return platformBody(seq % identities) }
	app1 := appOnShard("shard1-app", 1, 2)
	extraBody := func(i int) string {
		return fmt.Sprintf(`{"app_id":%q,"user_id":"u%d","interface_id":"i1"}`, app1, i%20)
	}
	if ws := StartLoad(LoadConfig{URLs: []string{q.URL}, Rate: 1000, Count: identities, Body: body}).Wait(); len(ws.Where(decided)) != identities {
		t.Fatalf("warm-up: %v", ws.Tally())
	}
	// Decided calls outside the load, which analytics records too.
	otherCalls := int64(identities)
	for i := range 20 {
		if a := check(t, q, extraBody(i)); a.status != 200 {
			t.Fatalf("warm-up of %s: %d %s", app1, a.status, a.raw)
		}
	}
	otherCalls += 20
	load := StartLoad(LoadConfig{URLs: []string{q.URL}, Rate: 500, Body: body})
	time.Sleep(2 * time.Second) // a phase of the load
	tKill := time.Now()
	so.maria.Kill()
	detect := waitReady(t, q, "shard 1 down", shard1Down)

	// New identities: one whose cells are all on the live shard is decided;
	// one on the dead shard is decided or follows the fail mode (open
	// here), never anything else.
	var freshOutcomes []string
	{
		fresh := fmt.Sprintf("fresh-%d", time.Now().UnixNano())
		for _, c := range []struct {
			shard int
			want  func(Sample) bool
		}{{0, decided}, {1, func(s Sample) bool { return decided(s) || undecided("open")(s) }}} {
			app := appOnColdShard(fresh, c.shard)
			a := check(t, q, fmt.Sprintf(`{"app_id":%q,"ip":"1.2.3.4","user_id":%q,"interface_id":"i1"}`, app, userOnShard(app, c.shard, 2)))
			s := Sample{Status: a.status, Enforced: a.header.Get("Quota-Enforced"), Code: a.code()}
			if !c.want(s) {
				t.Errorf("a new identity on shard %d with shard 1 down: %s %s", c.shard, s.Outcome(), a.raw)
			}
			if decided(s) {
				otherCalls++
			}
			freshOutcomes = append(freshOutcomes, fmt.Sprintf("shard %d: %s", c.shard, s.Outcome()))
		}
	}

	// Analytics calls for an app of the dead shard, beyond the load.
	const extra = 200
	var extraDecided int64
	for i := range extra {
		a := check(t, q, extraBody(i))
		switch {
		case a.status == 200 && a.header.Get("Quota-Enforced") == "":
			extraDecided++
		case a.status == 200: // undecided: the assertion on the load below reports it
		default:
			t.Fatalf("check on a shard-1 app with the shard down: %d %s", a.status, a.raw)
		}
	}
	var shard0During int64
	// The flushes fail for shard 1 and keep its rows, and go on for
	// shard 0. usage_daily gets a minute's figures once the minute is
	// over (QUOTA_ANALYTICS_HOLD_MINUTE, on): allow a minute and a flush.
	before0 := analyticsCalls(t, so.dbs[0])
	if err := PollUntil(heldMinute+20*time.Second, 100*time.Millisecond, func() error {
		m, err := q.Metrics()
		if err != nil {
			return err
		}
		if m["quota_analytics_flush_errors_total"] < 1 || m["quota_analytics_pending_rows"] < 1 {
			return fmt.Errorf("flush errors %v, pending rows %v", m["quota_analytics_flush_errors_total"], m["quota_analytics_pending_rows"])
		}
		if shard0During = analyticsCalls(t, so.dbs[0]); shard0During <= before0 {
			return fmt.Errorf("shard 0 not written while shard 1 is down (%d calls)", shard0During)
		}
		return nil
	}); err != nil {
		t.Errorf("analytics with shard 1 down: %v", err)
	}
	if d := time.Since(tKill); d < 5*time.Second {
		time.Sleep(5*time.Second - d) // keep the shard down 5 s under load
	}
	tBack := time.Now()
	so.maria.Start()
	restart := time.Since(tBack)
	ready := waitReady(t, q, "shard 1 back", allReady)
	time.Sleep(2 * time.Second)
	ss := load.Stop()
	assertAlive(t, q)

	// Hot checks never noticed.
	if n := len(ss.Where(decided)); n != len(ss) {
		t.Errorf("%d of %d checks were not decided with a MySQL shard down: %v", len(ss)-n, len(ss), ss.Tally())
	}
	normal, during := ss.Due(time.Time{}, tKill).Latencies(), ss.Due(tKill, tBack).Latencies()
	if during.P99 > 2*redisTimeout {
		t.Errorf("hot checks slowed down with a MySQL shard down: %s (before: %s)", during, normal)
	}
	fig.add("%d checks at 500/s; shard killed for %s; latency before %s, during %s", len(ss), tBack.Sub(tKill).Round(time.Millisecond), normal, during)
	fig.add("new identities during the outage: %v", freshOutcomes)
	fig.add("/readyz showed shard 1 down %s after the kill, ready again %s after mariadbd answered (restart took %s)",
		detect.Round(time.Millisecond), ready.Round(time.Millisecond), restart.Round(time.Millisecond))

	// Everything decided is in analytics exactly once: the rows kept during
	// the outage were written when the shard returned (the last minute's
	// once it is over).
	want := int64(len(ss.Where(decided))) + extraDecided + otherCalls
	var got int64
	if err := PollUntil(heldMinute+30*time.Second, 200*time.Millisecond, func() error {
		if got = analyticsCalls(t, so.dbs...); got != want {
			return fmt.Errorf("analytics holds %d calls, %d were decided", got, want)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	m, err := q.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if m["quota_analytics_dropped_total"] != 0 {
		t.Errorf("analytics dropped %v calls under its bound", m["quota_analytics_dropped_total"])
	}
	var app1Calls int64
	if err := so.dbs[1].QueryRow("SELECT COALESCE(SUM(calls),0) FROM usage_daily WHERE app_id = ?", app1).Scan(&app1Calls); err != nil {
		t.Fatal(err)
	}
	if app1Calls != extraDecided+20 {
		t.Errorf("app %s on the killed shard: %d calls recorded, %d decided", app1, app1Calls, extraDecided+20)
	}
	fig.add("analytics: %d calls recorded = %d decided (shard 0 kept flushing: %d during the outage), %v flush errors, 0 dropped",
		got, want, shard0During, m["quota_analytics_flush_errors_total"])
}

// Past QUOTA_ANALYTICS_BUFFER_MAX pending rows, analytics drops calls with a
// metric and a log line instead of growing, and what it kept is written
// when the shard returns: recorded + dropped = made.
func TestMySQLShardKilled_AnalyticsBufferBounded(t *testing.T) {
	so := startShardOutage(t, "QUOTA_ANALYTICS_BUFFER_MAX=1000")
	q := so.q
	requireAnalytics(t, q)
	fig := newFigures(t)
	waitReady(t, q, "every dependency up", allReady)
	so.maria.Kill()
	waitReady(t, q, "shard 1 down", shard1Down)

	// 3,000 distinct users of one app: over 3,000 per-user rows.
	app1 := appOnShard("bounded-app", 1, 2)
	const calls = 3000
	ss := StartLoad(LoadConfig{URLs: []string{q.URL}, Rate: 1000, Count: calls, Body: func(seq int64) []byte {
		return fmt.Appendf(nil, `{"app_id":%q,"user_id":"u%d","interface_id":"i1"}`, app1, seq)
	}}).Wait()
	if n := len(ss.Where(decided)); n != calls {
		t.Fatalf("%d of %d checks decided: %v", n, calls, ss.Tally())
	}
	var dropped float64
	if err := PollUntil(20*time.Second, 100*time.Millisecond, func() error {
		dropped = q.Metric("quota_analytics_dropped_total")
		if dropped == 0 {
			return ErrNotYet
		}
		return nil
	}); err != nil {
		t.Fatalf("no call dropped past the bound: %v", err)
	}
	if !strings.Contains(q.Logs(), "calls dropped") {
		t.Errorf("no log line about dropped calls: %s", tail(q.Logs(), 20))
	}
	pending := q.Metric("quota_analytics_pending_rows")
	if pending > 1000+100 {
		t.Errorf("%v rows pending with QUOTA_ANALYTICS_BUFFER_MAX=1000", pending)
	}

	so.maria.Start()
	waitReady(t, q, "shard 1 back", allReady)
	var recorded int64
	// The rows of the minute the calls were made in stay pending until it
	// is over (QUOTA_ANALYTICS_HOLD_MINUTE).
	if err := PollUntil(heldMinute+30*time.Second, 200*time.Millisecond, func() error {
		if err := so.dbs[1].QueryRow("SELECT COALESCE(SUM(calls),0) FROM usage_daily WHERE app_id = ?", app1).Scan(&recorded); err != nil {
			return err
		}
		if q.Metric("quota_analytics_pending_rows") != 0 {
			return fmt.Errorf("rows still pending, %d recorded", recorded)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if dropped = q.Metric("quota_analytics_dropped_total"); recorded+int64(dropped) != calls {
		t.Errorf("recorded %d + dropped %v != %d calls made", recorded, dropped, calls)
	}
	assertAlive(t, q)
	fig.add("%d calls of 3,000 distinct users with the shard down and a 1,000-row bound: %v dropped (counted, logged), peak pending %v rows, %d recorded after the shard returned",
		calls, dropped, pending, recorded)
}

const coldRules = `rules:
  - {name: coldprobe, dimensions: [app_id, user_id], limit: 5, window: 1h, algorithm: fixed_window}
`

// userOnShard is a user id whose cells of app live on cold shard i of n.
func userOnShard(app string, i, n int) string {
	for k := 0; ; k++ {
		if u := fmt.Sprintf("u%d", k); tiers.JumpShard(tiers.ShardKeyOf(app, u), n) == i {
			return u
		}
	}
}

// appOnColdShard is an app id whose rules without user_id keep their cold
// cells on shard i of 2.
func appOnColdShard(prefix string, i int) string {
	for k := 0; ; k++ {
		if app := fmt.Sprintf("%s-%d", prefix, k); tiers.JumpShard(tiers.ShardKeyOf(app, ""), 2) == i {
			return app
		}
	}
}

// tierOf is the tier named by a check answer's first entry.
func tierOf(t *testing.T, a answer) string {
	t.Helper()
	entries, _ := a.json(t)["rules"].([]any)
	if len(entries) == 0 {
		return ""
	}
	tier, _ := entries[0].(map[string]any)["tier"].(string)
	return tier
}

// One MySQL shard down with tiering on: checks on the cold identities of
// that shard answer per QUOTA_FAIL_MODE; cold identities of the other
// shard and hot identities are decided as usual; a migration cycle does not
// hang; when the shard returns its identities are decided again with their
// counts intact.
func TestMySQLShardKilled_ColdIdentitiesFollowFailMode(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			r := testenv.StartRedis(t)
			maria := testenv.StartMariaDB(t)
			dsn1 := maria.CreateDatabase("quota_shard1")
			_, dsn0 := testenv.MySQL(t)
			env := []string{"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_RULES=" + writeRules(t, coldRules),
				"QUOTA_MYSQL_SHARDS=" + dsn0 + "," + dsn1, "QUOTA_FAIL_MODE=" + mode,
				"QUOTA_ADMIN_TOKEN=" + adminToken, "QUOTA_REDIS_TIMEOUT=1s", "QUOTA_TIERING=on"}
			// Two instances on the same stores, both routing every cell
			// where it lives; the second's cycle sends every cell it has a
			// history of to cold (both thresholds far above any rate).
			qHot := testenv.StartQuotad(t, env...)
			if a := call(t, "GET", qHot.URL+"/v1/admin/tiers", "", "Authorization", "Bearer "+adminToken); a.status != http.StatusOK {
				t.Fatalf("quotad with QUOTA_TIERING=on has no tiers: GET /v1/admin/tiers: %d %s", a.status, a.raw)
			}
			qCold := testenv.StartQuotad(t, append(env, "QUOTA_HOT_THRESHOLD=1e9", "QUOTA_COLD_THRESHOLD=1e9", "QUOTA_MIGRATE_MIN_WINDOW=0")...)
			fig := newFigures(t)
			app := fmt.Sprintf("cold-%d", time.Now().UnixNano())
			body := func(u string) string { return fmt.Sprintf(`{"app_id":%q,"user_id":%q}`, app, u) }
			cold0, cold1 := userOnShard(app, 0, 2), userOnShard(app, 1, 2)
			hot1 := userOnShard(app+"-h", 1, 2)
			hotBody := fmt.Sprintf(`{"app_id":%q,"user_id":%q}`, app+"-h", hot1)
			for range 2 {
				for _, b := range []string{body(cold0), body(cold1)} {
					if a := check(t, qCold, b); a.status != 200 {
						t.Fatalf("before the outage %s: %d %s", b, a.status, a.raw)
					}
				}
			}
			if a := call(t, "POST", qCold.URL+"/v1/admin/migrate", "", "Authorization", "Bearer "+adminToken); a.status != http.StatusOK {
				t.Fatalf("the cycle that sends the cells cold: %d %s", a.status, a.raw)
			}
			for range 2 { // new since the cycle: hot
				if a := check(t, qHot, hotBody); a.status != 200 || tierOf(t, a) != "hot" {
					t.Fatalf("before the outage %s: %d tier %q, want 200 in hot: %s", hotBody, a.status, tierOf(t, a), a.raw)
				}
			}
			for _, u := range []string{cold0, cold1} {
				dry := fmt.Sprintf(`{"app_id":%q,"user_id":%q,"dry_run":true}`, app, u)
				if a := check(t, qCold, dry); a.status != 200 || tierOf(t, a) != "cold" {
					t.Fatalf("before the outage %s: %d tier %q, want 200 in cold: %s", dry, a.status, tierOf(t, a), a.raw)
				}
			}

			maria.Kill()
			waitReady(t, qCold, "shard 1 down", shard1Down)
			isUndecided := undecided(mode)
			// Calls to the dead shard come in runs (as they do under load,
			// where half the new cells are on it): three in a row, then one
			// on each identity that must not notice.
			var deadShard, otherShard, hot Samples
			for range 20 {
				for _, c := range []struct {
					into *Samples
					body string
				}{{&deadShard, body(cold1)}, {&deadShard, body(cold1)}, {&deadShard, body(cold1)}, {&otherShard, body(cold0)}, {&hot, hotBody}} {
					t0 := time.Now()
					a := check(t, qCold, c.body)
					*c.into = append(*c.into, Sample{Latency: time.Since(t0), Status: a.status, Enforced: a.header.Get("Quota-Enforced"), Code: a.code()})
				}
			}
			if n := len(deadShard.Where(isUndecided)); n != len(deadShard) {
				t.Errorf("cold identity of the dead shard: %v, want every check answered per fail mode %s", deadShard.Tally(), mode)
			}
			if n := len(otherShard.Where(decided)); n != len(otherShard) {
				t.Errorf("cold identity of the live shard: %v, want every check decided", otherShard.Tally())
			}
			if n := len(hot.Where(decided)); n != len(hot) {
				t.Errorf("hot identity: %v, want every check decided", hot.Tally())
			}
			if l := deadShard.Latencies(); l.Max > 2*time.Second {
				t.Errorf("checks on the dead shard took up to %s", l.Max)
			}
			t0 := time.Now()
			mig, err := tryCall("POST", qCold.URL+"/v1/admin/migrate", "", "Authorization", "Bearer "+adminToken)
			migTook := time.Since(t0)
			if err != nil || migTook > 30*time.Second {
				t.Errorf("migration cycle with a shard down: %v after %s", err, migTook)
			}

			maria.Start()
			waitReady(t, qCold, "shard 1 back", allReady)
			// Back: decided, and holding the 2 calls made before (plus those
			// decided during the outage, none on the dead shard).
			var a answer
			if err := PollUntil(10*time.Second, 100*time.Millisecond, func() error {
				a = check(t, qCold, fmt.Sprintf(`{"app_id":%q,"user_id":%q,"dry_run":true}`, app, cold1))
				if !decided(Sample{Status: a.status, Enforced: a.header.Get("Quota-Enforced")}) {
					return fmt.Errorf("%d %s", a.status, a.raw)
				}
				return nil
			}); err != nil {
				t.Fatalf("the dead shard's cold identity after its return: %v", err)
			}
			if tierOf(t, a) != "cold" || counted(t, a, "coldprobe", 5) != 2 {
				t.Errorf("after the shard returned: tier %q, counted %d, want cold with 2: %s", tierOf(t, a), counted(t, a, "coldprobe", 5), a.raw)
			}
			mig2 := call(t, "POST", qCold.URL+"/v1/admin/migrate", "", "Authorization", "Bearer "+adminToken)
			if mig2.status != http.StatusOK || mig2.json(t)["failures"] != float64(0) {
				t.Errorf("migration cycle after the shard returned: %d %s", mig2.status, mig2.raw)
			}
			assertAlive(t, qHot)
			assertAlive(t, qCold)
			fig.add("mode %s: dead shard's cold identity %v (%s); live shard's cold identity %v; hot identity %v; migration cycle during the outage: %d in %s %.200s; after: %s",
				mode, deadShard.Tally(), deadShard.Latencies(), otherShard.Tally(), hot.Tally(), mig.status, migTook.Round(time.Millisecond), mig.raw, mig2.raw)
		})
	}
}

//go:build faults && partitions

package faults

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/faults/history"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// aofArgs is deploy/redis.conf's persistence: AOF, fsync once a second.
var aofArgs = []string{"--appendonly", "yes", "--appendfsync", "everysec"}

// Redis killed with SIGKILL under load and restarted from its AOF
// (appendfsync everysec): what it loses is bounded by the fsync interval
// (Redis documents up to 2 s), nothing is doubled, and quota enforces again
// within a second of Redis answering. Judged by the history checker: every
// over-admission must be explained by a lost count.
func TestRedisCrash_RestartFromAOFLosesAtMostTheFsyncIntervalAndDoublesNothing(t *testing.T) {
	tests := []struct {
		name    string
		cluster bool
	}{
		{"single Redis", false},
		{"cluster master without replica", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fig := newFigures(t)
			// 60 identities at 600 checks/s: 10 a second each, limit 150 an
			// hour: still counting when Redis dies at 6 s, exhausted at about
			// 15 s (later by as many calls as were lost), then denied.
			l := newIDLoad(60, 150, time.Hour)
			var victim *testenv.RedisProcess
			var addrs string
			var onVictim func(id string) bool
			if tc.cluster {
				nodes := testenv.StartRedisClusterWith(t, 3, aofArgs...) // a --dir each
				victim = nodes[0]
				for i, n := range nodes {
					if i > 0 {
						addrs += ","
					}
					addrs += n.Addr()
				}
				cc := testenv.ClusterClient(t, nodes, nil)
				onVictim = func(id string) bool {
					c, err := cc.MasterForKey(context.Background(), "{"+tiers.TagOf(id).String()+"}")
					if err != nil {
						t.Fatal(err)
					}
					return c.Options().Addr == victim.Addr()
				}
			} else {
				victim = testenv.StartRedisWith(t, append(aofArgs, "--dir", t.TempDir())...)
				addrs = victim.Addr()
				onVictim = func(string) bool { return true }
			}
			q := testenv.StartQuotad(t, "QUOTA_REDIS_ADDRS="+addrs, "QUOTA_FAIL_MODE=open",
				"QUOTA_TIERING=off", "QUOTA_ANALYTICS=off", "QUOTA_RULES="+writeRules(t, l.rules()))

			load := StartLoad(LoadConfig{URLs: []string{q.URL}, Rate: 600, Workers: 128, Body: l.body})
			time.Sleep(6 * time.Second) // a phase of the load
			tKill := time.Now()
			victim.Kill()
			tKilled := time.Now()
			victim.Start() // loads the AOF; returns once PING answers
			tPing := time.Now()
			// A cluster node answers PING before it serves its slots again
			// (CLUSTERDOWN until its cluster state is ok): Redis answers
			// checks from then on.
			tBack := tPing
			if tc.cluster {
				if err := PollUntil(10*time.Second, 5*time.Millisecond, func() error {
					out, err := exec.Command("redis-cli", "-p", strconv.Itoa(victim.Port), "cluster", "info").Output()
					if err != nil || !strings.Contains(string(out), "cluster_state:ok") {
						return ErrNotYet
					}
					return nil
				}); err != nil {
					t.Fatalf("restarted master: cluster state not ok: %v", err)
				}
				tBack = time.Now()
			}
			time.Sleep(14 * time.Second)
			ss := load.Stop()
			assertAlive(t, q)

			healthy := func(s Sample) bool { return s.Done().Before(tKill) || s.Intended.After(tBack.Add(time.Second)) }
			hist := ops(ss, l.identity, healthy)
			final := finalCounts(t, q.URL, l)
			rep := history.Check(history.Spec{Limit: l.limit, Window: l.window}, hist, final, history.Options{Slack: 5 * time.Millisecond})

			// The fsync bound: enforced allowances of the victim's
			// identities answered in the 2 s before the kill.
			var bound int64
			victimIDs := 0
			for _, id := range l.ids() {
				if onVictim(id) {
					victimIDs++
				}
			}
			for _, s := range ss.Due(tKill.Add(-2*time.Second), tKill) {
				if decided(s) && s.Status == 200 && onVictim(l.identity(s.Seq)) {
					bound++
				}
			}
			rec, undecidedAfter := recovery(ss, tBack)
			t.Logf("%s", rep)
			fig.add("%s: %d identities (%d on the killed Redis), %d checks at 600/s, SIGKILL then restart from AOF took %s",
				tc.name, l.n, victimIDs, len(ss), tBack.Sub(tKilled).Round(time.Millisecond))
			fig.add("%s", rep.Summary())
			fig.add("lost %d of at most %d (the allowances of the last 2 s before the kill)", rep.Lost, bound)
			fig.add("the restarted Redis answered PING %s after the kill and served its slots %s later", tPing.Sub(tKill).Round(time.Millisecond), tBack.Sub(tPing).Round(time.Millisecond))
			fig.add("enforced again %s after Redis answered (%d checks undecided after it); max latency %s", rec.Round(time.Millisecond), undecidedAfter, ms(ss.Latencies().Max))
			t.Logf("FAULTROW %s", newFaultRow("Redis SIGKILL + restart from AOF, "+tc.name, ss, rep, tBack))

			if rep.Lost > bound {
				t.Errorf("%d counts lost, more than the %d allowances of the 2 s before the kill", rep.Lost, bound)
			}
			if n := rep.Count(history.Doubled); n > 0 {
				t.Errorf("%d counters hold more than was ever sent:\n%s", n, rep)
			}
			if n := rep.Count(history.UnderServe); n > 0 {
				t.Errorf("%d under-serves while Redis was up:\n%s", n, rep)
			}
			if rep.Over > rep.Lost {
				t.Errorf("%d calls over their limits, more than the %d lost counts explain:\n%s", rep.Over, rep.Lost, rep)
			}
			if rec > time.Second {
				t.Errorf("enforcement came back %s after Redis answered; want <= 1s", rec)
			}
		})
	}
}

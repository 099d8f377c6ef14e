package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/fleet"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// quotactl status against one of three instances sharing a Redis Cluster
// of three masters, one of which is down, and of which one instance is
// draining (SIGTERM, QUOTA_DRAIN long): it finds the other two through
// their heartbeats (kept on every master, so the dead one's keys are not
// missed), shows the draining one as draining and the others with their
// readiness, the dead master as down and the live ones as up, each MySQL
// shard, the last tier count with its age, the last cycle, and analytics;
// --json says the same to a script.
func TestQuotactlStatus_ShowsEachInstanceAndDependencyTruthfully(t *testing.T) {
	t.Parallel()
	nodes := testenv.StartRedisCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	_, dsn0 := testenv.MySQL(t)
	_, dsn1 := testenv.MySQL(t)
	env := []string{
		"QUOTA_REDIS_ADDRS=" + strings.Join(addrs, ","),
		"QUOTA_MYSQL_SHARDS=" + dsn0 + "," + dsn1,
		"QUOTA_ADMIN_TOKEN=" + admin,
		"QUOTA_ANALYTICS_FLUSH=200ms",
	}
	var qs []*testenv.Quotad
	for i := range 3 {
		e := env
		if i == 1 {
			e = append(append([]string{}, env...), "QUOTA_DRAIN=2m") // drains for long after SIGTERM
		}
		qs = append(qs, testenv.StartQuotad(t, e...))
	}
	a, draining, c := qs[0], qs[1], qs[2]
	// A count of the tiers and a cycle, so that both have a "last".
	for _, path := range []string{"/v1/admin/tiers", "/v1/admin/migrate"} {
		req, _ := http.NewRequest(map[bool]string{true: "GET", false: "POST"}[path == "/v1/admin/tiers"], a.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	// Every instance has beaten at least once (at start).
	if err := syscall.Kill(draining.PID(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		resp, err := http.Get(draining.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	// The master to kill: preferably one that holds neither the last tier
	// count nor the last cycle's keys (a status can show neither while
	// their master is down, and says so).
	masterOf := map[string]string{}
	cc := testenv.ClusterClient(t, nodes, nil)
	ctx := context.Background()
	const prefix = "q:" // QUOTA_REDIS_KEY_PREFIX's default
	last, err := cc.Get(ctx, prefix+"mig:cycle:last").Result()
	if err != nil {
		t.Fatalf("last cycle: %v", err)
	}
	held := map[string][]string{}
	for _, k := range []string{"tiers:count", "mig:cycle:last", "mig:cycle:" + last + ":done", "mig:cycle:" + last + ":live"} {
		k = prefix + k
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masterOf[k] = m.Options().Addr
		held[masterOf[k]] = append(held[masterOf[k]], k)
	}
	dead := nodes[2]
	for _, n := range nodes {
		if len(held[n.Addr()]) < len(held[dead.Addr()]) {
			dead = n
		}
	}
	tiersLost := masterOf[prefix+"tiers:count"] == dead.Addr()
	cycleLost := len(held[dead.Addr()]) > 0 && !(tiersLost && len(held[dead.Addr()]) == 1)
	var live []*testenv.RedisProcess
	for _, n := range nodes {
		if n != dead {
			live = append(live, n)
		}
	}
	dead.Kill()

	var out, errb bytes.Buffer
	if code := run([]string{"--url", a.URL, "--token", admin, "status"}, &out, &errb); code != 0 {
		t.Fatalf("status: %d %s", code, errb.String())
	}
	screen := out.String()
	t.Logf("quotactl status:\n%s", screen)
	line := func(prefix string) string {
		for _, l := range strings.Split(screen, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return l
			}
		}
		t.Errorf("no line starting %q in:\n%s", prefix, screen)
		return ""
	}
	for _, tc := range []struct {
		name, prefix string
		want         []string
	}{
		{"the instance asked", a.URL + " ", []string{"ready"}},
		{"the other serving instance", c.URL + " ", []string{"ready"}},
		{"the draining instance", draining.URL + " ", []string{"DRAINING"}},
		{"the dead master", "master  " + dead.Addr(), []string{"DOWN"}},
		{"a live master", "master  " + live[0].Addr(), []string{" ok"}},
		{"the other live master", "master  " + live[1].Addr(), []string{" ok"}},
		{"shard 0", "shard 0", []string{" ok"}},
		{"shard 1", "shard 1", []string{" ok"}},
		{"the instances", "INSTANCES", []string{"(3)"}},
		{"the rules", "rules:", []string{"every instance has"}},
		{"the tiers", "TIERS", map[bool][]string{false: {"counted", "ago"}, true: {"unavailable", "refused"}}[tiersLost]},
		{"the cycle", "CYCLE", map[bool][]string{false: {"done", "ended"}, true: {"unavailable", "refused"}}[cycleLost]},
		{"analytics of the instance asked", a.URL + ": ", []string{"lag"}},
	} {
		l := line(tc.prefix)
		for _, w := range tc.want {
			if !strings.Contains(l, w) {
				t.Errorf("%s: line %q lacks %q", tc.name, l, w)
			}
		}
	}
	if l := line(a.URL + " "); strings.Contains(l, "DRAINING") || strings.Contains(l, "UNREACHABLE") {
		t.Errorf("the instance asked shows %q", l)
	}
	out.Reset()
	if code := run([]string{"--url", a.URL, "--token", admin, "status", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("status --json: %d %s", code, errb.String())
	}
	var v fleet.View
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	states := map[string]string{}
	for _, m := range v.Members {
		if m.Status == nil {
			t.Errorf("%s: no status (%s)", m.URL, m.Error)
			continue
		}
		states[m.URL] = m.Status.State
	}
	if len(states) != 3 || states[draining.URL] != "draining" || states[a.URL] != "serving" || states[c.URL] != "serving" {
		t.Errorf("states %v: want %s draining, the others serving", states, draining.URL)
	}
	down := 0
	for _, e := range v.Fleet.Redis {
		if !e.OK {
			down++
			if e.Addr != dead.Addr() {
				t.Errorf("master %s down, want only %s", e.Addr, dead.Addr())
			}
		}
	}
	if len(v.Fleet.Redis) != 3 || down != 1 {
		t.Errorf("redis %+v: want 3 masters, 1 down", v.Fleet.Redis)
	}
	if (v.Fleet.Cycle == nil || v.Fleet.Cycle.State != "done") != cycleLost || (v.Fleet.Tiers == nil) != tiersLost {
		t.Errorf("cycle %+v, tiers %+v: want the last of each, unless its master is down (cycle lost %v, tiers lost %v)", v.Fleet.Cycle, v.Fleet.Tiers, cycleLost, tiersLost)
	}
	t.Logf("dead master %s held %v", dead.Addr(), held[dead.Addr()])
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

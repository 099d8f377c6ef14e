//go:build faults && partitions

package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/faults/history"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// nodeTimeout is the cluster's node timeout in the partition tests: a
// master unreachable for longer is failed over to its replica.
const nodeTimeout = 3 * time.Second

// partitionFleet is a Redis Cluster of 3 masters and 3 replicas and
// quotad instances (two unless told: one per element of quotadEnv, each
// with those extra settings), each process in a network namespace of its
// own on one bridge.
type partitionFleet struct {
	net      *testenv.Net
	masters  []*testenv.ClusterNode
	replicas []*testenv.ClusterNode
	qhosts   []*testenv.Host
	quotads  []*testenv.Quotad
	urls     []string
}

func newPartitionFleet(t *testing.T, rules string, quotadEnv ...[]string) *partitionFleet {
	t.Helper()
	f := &partitionFleet{net: testenv.NewNet(t)}
	var mh, rh []*testenv.Host
	for i := range 3 {
		mh = append(mh, f.net.AddHost(fmt.Sprintf("master-%d", i+1)))
	}
	for i := range 3 {
		rh = append(rh, f.net.AddHost(fmt.Sprintf("replica-%d", i+1)))
	}
	// deploy/redis.conf's persistence and replication: a full sync starts
	// at once (repl-diskless-sync-delay 0) rather than after Redis' default
	// 5 s wait for more replicas.
	f.masters, f.replicas = testenv.StartClusterIn(t, mh, rh, nodeTimeout, "--appendonly", "yes", "--appendfsync", "everysec",
		"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
	var addrs []string
	for _, m := range f.masters {
		addrs = append(addrs, m.Addr())
	}
	if len(quotadEnv) == 0 {
		quotadEnv = [][]string{nil, nil}
	}
	for i, env := range quotadEnv {
		h := f.net.AddHost(fmt.Sprintf("quotad-%d", i+1))
		q := h.NewQuotad(t, append([]string{"QUOTA_REDIS_ADDRS=" + strings.Join(addrs, ","), "QUOTA_FAIL_MODE=open",
			"QUOTA_TIERING=off", "QUOTA_ANALYTICS=off", "QUOTA_ADMIN_TOKEN=" + adminToken, "QUOTA_RULES=" + writeRules(t, rules)}, env...)...)
		q.Start()
		f.qhosts, f.quotads, f.urls = append(f.qhosts, h), append(f.quotads, q), append(f.urls, q.URL)
	}
	return f
}

// partitionFault is one fault of the partition test.
type partitionFault struct {
	name   string
	hold   time.Duration
	inject func(f *partitionFleet) error
	heal   func(f *partitionFleet) error
	// failover: the fault outlasts the node timeout, so the replica is
	// promoted while it lasts; its old master rejoins as a replica.
	failover bool
}

func block(from func(*partitionFleet) *testenv.Host, to func(*partitionFleet) *testenv.Host, d testenv.Direction) (func(*partitionFleet) error, func(*partitionFleet) error) {
	return func(f *partitionFleet) error { return from(f).Block(to(f), d) },
		func(f *partitionFleet) error { return from(f).Unblock(to(f), d) }
}

func quotad1(f *partitionFleet) *testenv.Host  { return f.qhosts[0] }
func master1(f *partitionFleet) *testenv.Host  { return f.masters[0].Host }
func replica1(f *partitionFleet) *testenv.Host { return f.replicas[0].Host }

// The faults production has between hosts, one after the other on one
// fleet, each under load from both quotad and healed after a while; every
// check's history is judged by the history checker, and the test prints a
// line of figures per fault.
func TestPartitions_EachFaultHealsAndTheHistoryHoldsTheLimits(t *testing.T) {
	fig := newFigures(t)
	const limit, window = 80, time.Hour
	f := newPartitionFleet(t, newIDLoad(1, limit, window).rules())
	faults := []partitionFault{
		{name: "link quotad-1 <-> master-1 down, both ways", hold: 5 * time.Second},
		{name: "link quotad-1 <- master-1 down (answers lost)", hold: 5 * time.Second},
		{name: "link quotad-1 -> master-1 down (requests lost)", hold: 5 * time.Second},
		{name: "link master-1 <-> replica-1 down", hold: 5 * time.Second},
		{name: "master-1 isolated (its link down), failed over", hold: 8 * time.Second, failover: true,
			inject: func(f *partitionFleet) error { return f.masters[0].Host.SetLink(false) },
			heal:   func(f *partitionFleet) error { return f.masters[0].Host.SetLink(true) }},
	}
	faults[0].inject, faults[0].heal = block(quotad1, master1, testenv.Both)
	faults[1].inject, faults[1].heal = block(quotad1, master1, testenv.Incoming)
	faults[2].inject, faults[2].heal = block(quotad1, master1, testenv.Outgoing)
	faults[3].inject, faults[3].heal = block(master1, replica1, testenv.Both)

	var rows []faultRow
	for _, fl := range faults {
		ok := t.Run(fl.name, func(t *testing.T) {
			row := runPartitionFault(t, f, fl, limit, window)
			rows = append(rows, row)
			fig.add("%s", row)
		})
		if !ok {
			break
		}
	}
	table := faultTable(rows)
	t.Logf("per fault:\n%s", table)
	if p := os.Getenv("PARTITIONS_TABLE"); p != "" {
		_ = os.WriteFile(p, []byte(table), 0o644)
	}
}

func runPartitionFault(t *testing.T, f *partitionFleet, fl partitionFault, limit int64, window time.Duration) faultRow {
	// 40 identities at 400 checks/s over both quotad: 10 a second each,
	// limit 80: exhausted during or after the fault, then denied.
	l := newIDLoad(40, limit, window)
	load := StartLoad(LoadConfig{URLs: f.urls, Rate: 400, Workers: 128, Body: l.body, Timeout: 10 * time.Second})
	time.Sleep(3 * time.Second) // a phase of the load
	tFault := time.Now()
	if err := fl.inject(f); err != nil {
		load.Stop()
		t.Fatal(err)
	}
	time.Sleep(fl.hold)
	tHeal := time.Now()
	if err := fl.heal(f); err != nil {
		load.Stop()
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	ss := load.Stop()
	for _, q := range f.quotads {
		assertAlive(t, q)
	}
	if fl.failover {
		// The old master rejoins as a replica of the promoted one; the
		// next fault's master-1 is the new master, so swap them.
		if err := PollUntil(20*time.Second, 100*time.Millisecond, func() error {
			role, err := testenv.Role(context.Background(), f.masters[0].Addr())
			if err != nil {
				return err
			}
			if role != "slave" {
				return fmt.Errorf("old master is %s: %w", role, ErrNotYet)
			}
			return nil
		}); err != nil {
			t.Errorf("the isolated master did not rejoin as a replica: %v", err)
		}
		f.masters[0], f.replicas[0] = f.replicas[0], f.masters[0]
	}

	healthy := func(s Sample) bool { return s.Done().Before(tFault) || s.Intended.After(tHeal) }
	hist := ops(ss, l.identity, healthy)
	final := finalCounts(t, f.urls[1], l)
	rep := history.Check(history.Spec{Limit: l.limit, Window: l.window}, hist, final, history.Options{Slack: 5 * time.Millisecond})
	row := newFaultRow(fl.name, ss, rep, tHeal)
	// The latency target: a check waits at most one Redis timeout
	// for a master that does not answer, whatever it waited for (a pooled
	// connection, a dial, the read), plus 100 ms for everything else.
	slow := ss.Where(func(s Sample) bool { return s.Latency > redisTimeout+100*time.Millisecond })
	if len(slow) > 0 {
		first, last := slow[0], slow[len(slow)-1]
		t.Errorf("%d checks slower than %s: the first due %s after the fault (quotad-%d, %s), the last %s after the heal (quotad-%d, %s)",
			len(slow), redisTimeout+100*time.Millisecond, first.Intended.Sub(tFault).Round(time.Millisecond), first.Target+1, ms(first.Latency),
			last.Intended.Sub(tHeal).Round(time.Millisecond), last.Target+1, ms(last.Latency))
	}
	t.Logf("%s\n%s", row, rep)

	// Failed over: enforced again once the replica was promoted, before the heal.
	if fl.failover {
		rec, n := recovery(ss, tFault)
		t.Logf("failover: the last undecided check was answered %s after the isolation (%d undecided)", rec.Round(time.Millisecond), n)
	}
	if n := rep.Count(history.UnderServe); n > 0 {
		t.Errorf("%d under-serves while every store was reachable:\n%s", n, rep)
	}
	if n := rep.Count(history.Doubled); n > 0 {
		t.Errorf("%d counters doubled:\n%s", n, rep)
	}
	if !fl.failover && (rep.Over > 0 || rep.Lost > 0) {
		t.Errorf("without a failover nothing may be lost or over-admitted:\n%s", rep)
	}
	if rep.Over > rep.Lost {
		t.Errorf("%d calls over their limits, more than the %d lost counts explain:\n%s", rep.Over, rep.Lost, rep)
	}
	if row.enforcedAgain > 2*time.Second {
		t.Errorf("enforcement came back %s after the heal; want < 2s", row.enforcedAgain)
	}
	if bad := ss.Where(func(s Sample) bool { return !decided(s) && !(s.Status == 200 && s.Enforced == "false") }); len(bad) > 0 {
		t.Errorf("%d checks got neither a decision nor fail open's answer: %v", len(bad), bad.Tally())
	}
	return row
}

//go:build faults

package faults

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// One limit per algorithm (selected by the dimension algo), 300 calls in a
// window long enough that no test run crosses it, and a per-user limit of 3
// that 150 users could exceed in total (450 > 300): a call denied by one
// rule must consume nothing in the other, whichever instance decided it.
const sharedRules = `rules:
  - {name: shared_fixed, dimensions: [app_id, algo], match: {algo: fixed}, limit: 300, window: 366d, algorithm: fixed_window}
  - {name: shared_sliding, dimensions: [app_id, algo], match: {algo: sliding}, limit: 300, window: 366d, algorithm: sliding_window}
  - {name: shared_bucket, dimensions: [app_id, algo], match: {algo: bucket}, limit: 300, window: 366d, algorithm: token_bucket}
  - {name: shared_log, dimensions: [app_id, algo], match: {algo: log}, limit: 300, window: 366d, algorithm: sliding_log}
  - {name: shared_user, dimensions: [app_id, algo, user_id], limit: 3, window: 366d, algorithm: fixed_window}
`

func TestTwoInstances_ShareLimitsExactly(t *testing.T) {
	r := testenv.StartRedis(t)
	rulesPath := writeRules(t, sharedRules)
	shards := shardsEnv(t)
	env := []string{"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_RULES=" + rulesPath, shards}
	a := testenv.StartQuotad(t, env...)
	b := testenv.StartQuotad(t, env...)
	fig := newFigures(t)

	const limit, userLimit, users, calls = 300, 3, 150, 900
	for _, algo := range []string{"fixed", "sliding", "bucket", "log"} {
		t.Run(algo, func(t *testing.T) {
			app := fmt.Sprintf("shared-%s-%d", algo, time.Now().UnixNano())
			body := func(seq int64) []byte {
				return fmt.Appendf(nil, `{"app_id":%q,"algo":%q,"user_id":"u%d"}`, app, algo, seq%users)
			}
			load := StartLoad(LoadConfig{URLs: []string{a.URL, b.URL}, Rate: 1500, Workers: 64, Count: calls, Body: body})
			ss := load.Wait()
			tally := ss.Tally()
			perInstance := [2]int{}
			for _, s := range ss {
				if s.Status == http.StatusOK {
					perInstance[s.Target]++
				}
			}
			if tally["200"] != limit || tally["429"] != calls-limit {
				t.Errorf("across two instances: %v, want exactly %d allowed and %d denied", tally, limit, calls-limit)
			}
			if perInstance[0] == 0 || perInstance[1] == 0 {
				t.Errorf("allowed per instance %v: the load was not split", perInstance)
			}
			// Every user's counter holds exactly the calls allowed for it.
			allowedFor := map[int64]int{}
			for _, s := range ss {
				if s.Status == http.StatusOK {
					allowedFor[s.Seq%users]++
				}
			}
			sum := 0
			for u := range int64(users) {
				body := fmt.Sprintf(`{"app_id":%q,"algo":%q,"user_id":"u%d","dry_run":true}`, app, algo, u)
				ans := check(t, a, body)
				if used := counted(t, ans, "shared_user", userLimit); used != allowedFor[u] {
					t.Errorf("user u%d: counter holds %d calls, %d were allowed", u, used, allowedFor[u])
				}
				if allowedFor[u] > userLimit {
					t.Errorf("user u%d: %d allowed, limit %d", u, allowedFor[u], userLimit)
				}
				sum += allowedFor[u]
			}
			if ans := check(t, b, fmt.Sprintf(`{"app_id":%q,"algo":%q,"dry_run":true}`, app, algo)); ans.status != 429 || remaining(t, ans, "shared_"+algo) != 0 {
				t.Errorf("the app's %s counter is not exhausted: %d %s", algo, ans.status, ans.raw)
			}
			fig.add("%s: %d calls over 2 instances -> %v (allowed by instance %v), users' counters sum %d, latency %s",
				algo, calls, tally, perInstance, sum, ss.Latencies())
		})
	}
	assertAlive(t, a)
	assertAlive(t, b)
}

// counted is how many calls rule's counter holds, read from the answer to
// a dry run of cost 1: an allowed call reports what would remain after it,
// a denied one what remains now.
func counted(t *testing.T, a answer, rule string, limit int) int {
	t.Helper()
	rem := remaining(t, a, rule)
	if a.status == http.StatusOK {
		return limit - rem - 1
	}
	return limit - rem
}

// remaining is the remaining of rule's (first) entry in a check answer.
func remaining(t *testing.T, a answer, rule string) int {
	t.Helper()
	m := a.json(t)
	entries, _ := m["rules"].([]any)
	for _, e := range entries {
		e, _ := e.(map[string]any)
		if e["rule"] == rule {
			return int(e["remaining"].(float64))
		}
	}
	t.Fatalf("no entry for rule %s in %s", rule, a.raw)
	return 0
}

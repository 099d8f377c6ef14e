package denysync_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/denysync"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

const (
	adminToken = "fleet-admin-token-52"
	// poll is QUOTA_RULES_POLL of the fleets below: the bound on how long
	// an instance serves a denial the fleet invalidated is two polls.
	poll = 200 * time.Millisecond
	// slack is what the test's own HTTP calls and two shared cores add to
	// the bound when measuring it from outside.
	slack = 300 * time.Millisecond
)

// fleet is three real quotad processes on one Redis key prefix.
type fleet struct {
	rdb    *redis.Client
	prefix string
	qs     []*testenv.Quotad
}

func startFleet(t *testing.T, rulesYAML string, extraEnv ...string) *fleet {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	_, dsnA := testenv.MySQL(t)
	_, dsnB := testenv.MySQL(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"QUOTA_REDIS_ADDRS=" + testenv.RedisAddr(), "QUOTA_REDIS_KEY_PREFIX=" + prefix,
		"QUOTA_MYSQL_SHARDS=" + dsnA + "," + dsnB, "QUOTA_RULES=" + path,
		"QUOTA_ADMIN_TOKEN=" + adminToken, "QUOTA_RULES_POLL=" + poll.String(),
		"QUOTA_ANALYTICS=off", "QUOTA_TIERING=off", "QUOTA_FAIL_MODE=closed",
		// Fail closed answers a check Redis did not answer in time 503;
		// under make test's load 250 ms is not always enough, and these
		// tests are about the cache, not timeouts.
		"QUOTA_REDIS_TIMEOUT=2s",
	}
	env = append(env, extraEnv...) // the last of a name wins (os/exec)
	f := &fleet{rdb: rdb, prefix: prefix}
	for range 3 {
		f.qs = append(f.qs, testenv.StartQuotad(t, env...))
	}
	return f
}

var client = &http.Client{Timeout: 5 * time.Second}

func post(t testing.TB, url, body string) int {
	t.Helper()
	resp, err := client.Post(url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// exhaust spends user's limit on the fleet and has each instance deny it
// from its cache at least once.
func (f *fleet) exhaust(t *testing.T, user string, limit int) {
	t.Helper()
	body := fmt.Sprintf(`{"user_id":%q}`, user)
	for i := range limit {
		if c := post(t, f.qs[i%3].URL, body); c != http.StatusOK {
			t.Fatalf("call %d of %d: %d", i+1, limit, c)
		}
	}
	for i, q := range f.qs {
		hits := q.Metric("quota_deny_cache_hits_total")
		for range 2 {
			if c := post(t, q.URL, body); c != http.StatusTooManyRequests {
				t.Fatalf("instance %d past the limit: %d", i, c)
			}
		}
		if q.Metric("quota_deny_cache_hits_total") != hits+1 {
			t.Fatalf("instance %d: the second denial did not come from its cache", i)
		}
	}
}

// letIn waits until a dry run of user is allowed on every instance and
// returns how long each took from start; it fails past limit.
func (f *fleet) letIn(t *testing.T, user string, start time.Time, limit time.Duration) []time.Duration {
	t.Helper()
	body := fmt.Sprintf(`{"user_id":%q,"dry_run":true}`, user)
	took := make([]time.Duration, len(f.qs))
	for i, q := range f.qs {
		for post(t, q.URL, body) != http.StatusOK {
			if time.Since(start) > limit {
				t.Fatalf("instance %d still denies %s %s after the change (bound %s)", i, user, time.Since(start), limit)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took[i] = time.Since(start)
	}
	return took
}

const perUserRules = `rules:
  - {name: per_user, dimensions: [user_id], limit: 3, window: 1h, algorithm: fixed_window}
`

// A rule change on one instance lets a denied identity back in on all
// three within two rule polls, though each had its denial cached.
func TestFleet_RuleChangeOnOneInstanceLetsTheIdentityInOnAllWithinTwoPolls(t *testing.T) {
	t.Parallel()
	f := startFleet(t, perUserRules)
	f.exhaust(t, "a", 3)
	req, err := http.NewRequest(http.MethodPut, f.qs[0].URL+"/v1/rules", bytes.NewBufferString(
		`{"rules":[{"name":"per_user","dimensions":["user_id"],"limit":10,"window":"1h","algorithm":"fixed_window"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/rules: %d", resp.StatusCode)
	}
	took := f.letIn(t, "a", start, 2*poll+slack)
	if took[0] > slack {
		t.Errorf("the instance that took the change let the identity in after %s", took[0])
	}
	t.Logf("let in after the rule change: %v (bound %s)", took, 2*poll)
}

// A reset of an identity's counters anywhere (here: the counters deleted
// and the fleet told, as an admin reset does) lets it back in on all
// three instances within two polls.
func TestFleet_ResetLetsTheIdentityInOnAllWithinTwoPolls(t *testing.T) {
	t.Parallel()
	f := startFleet(t, perUserRules)
	f.exhaust(t, "b", 3)
	ctx := context.Background()
	var keys []string
	iter := f.rdb.Scan(ctx, 0, f.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); k != f.prefix+"rules" && k != f.prefix+"denials:gen" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		t.Fatal("no counter found to reset")
	}
	if err := f.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := denysync.New(f.rdb, f.prefix, func() {}).Bump(ctx); err != nil {
		t.Fatal(err)
	}
	took := f.letIn(t, "b", start, 2*poll+slack)
	t.Logf("let in after the reset: %v (bound %s)", took, 2*poll)
}

// Limit N allows exactly N under 64 concurrent callers spread over three
// instances, every algorithm, with the denial cache answering the rest.
func TestFleet_LimitNAllowsExactlyNUnder64CallersOnThreeInstances(t *testing.T) {
	t.Parallel()
	f := startFleet(t, `rules:
  - {name: fixed, dimensions: [user_id, algo], match: {algo: fixed}, limit: 500, window: 1h, algorithm: fixed_window}
  - {name: sliding, dimensions: [user_id, algo], match: {algo: sliding}, limit: 500, window: 1h, algorithm: sliding_window}
  - {name: bucket, dimensions: [user_id, algo], match: {algo: bucket}, limit: 500, window: 366d, algorithm: token_bucket}
  - {name: log, dimensions: [user_id, algo], match: {algo: log}, limit: 500, window: 1h, algorithm: sliding_log}
  - {name: interval, dimensions: [user_id, algo], match: {algo: interval}, limit: 500, window: 366d, algorithm: min_interval}
`)
	tests := []struct {
		algo        string
		limit, cost int
	}{{"fixed", 500, 1}, {"sliding", 500, 1}, {"bucket", 500, 1}, {"log", 500, 1}, {"interval", 1, 1}}
	for _, tt := range tests {
		t.Run(tt.algo, func(t *testing.T) {
			hits := 0.0
			for _, q := range f.qs {
				hits -= q.Metric("quota_deny_cache_hits_total")
			}
			const callers, calls = 64, 1500
			body := fmt.Sprintf(`{"user_id":"n","algo":%q,"cost":%d}`, tt.algo, tt.cost)
			// undecided are 503s: the fleet runs fail-closed, so that a
			// check Redis could not decide (another package's test may
			// SCRIPT FLUSH the shared Redis) is not mistaken for allowed.
			var next, allowed, denied, undecided atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= calls {
							return
						}
						switch c := post(t, f.qs[i%3].URL, body); c {
						case http.StatusOK:
							allowed.Add(1)
						case http.StatusTooManyRequests:
							denied.Add(1)
						case http.StatusServiceUnavailable:
							undecided.Add(1)
						default:
							t.Errorf("status %d", c)
						}
					}
				}()
			}
			wg.Wait()
			for _, q := range f.qs {
				hits += q.Metric("quota_deny_cache_hits_total")
			}
			if a, u := allowed.Load(), undecided.Load(); a > int64(tt.limit) || (u == 0 && a != int64(tt.limit)) {
				t.Fatalf("%d allowed, %d denied, %d undecided of %d, want exactly %d allowed", a, denied.Load(), u, calls, tt.limit)
			}
			if hits == 0 {
				t.Error("no denial came from a cache")
			}
			t.Logf("%s: %d allowed, %d undecided of %d over 3 instances, %.0f denials from the caches", tt.algo, allowed.Load(), undecided.Load(), calls, hits)
		})
	}
}

// A flooder denied by its own limit while its IP's limit still has room
// is answered from each instance's cache with the IP's count read afresh
// (a GET, no script): ordinary callers behind that IP counting on other
// instances show in its answers at once. With tiering on, as quotad runs
// by default.
func TestFleet_CachedDenialShowsItsIPsCountFromEveryInstance(t *testing.T) {
	t.Parallel()
	f := startFleet(t, `rules:
  - {name: per_user, dimensions: [user_id], limit: 2, window: 1h, algorithm: fixed_window}
  - {name: per_ip, dimensions: [ip], limit: 100, window: 1h, algorithm: fixed_window}
`, "QUOTA_TIERING=on")
	flooder := `{"user_id":"flooder","ip":"198.51.100.7"}`
	for range 2 {
		if c := post(t, f.qs[0].URL, flooder); c != http.StatusOK {
			t.Fatalf("the flooder's own limit: %d", c)
		}
	}
	ipLeft := func(q *testenv.Quotad) int64 {
		t.Helper()
		resp, err := client.Post(q.URL+"/v1/check", "application/json", strings.NewReader(flooder))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d struct {
			Rules []struct {
				Rule      string `json:"rule"`
				Remaining int64  `json:"remaining"`
			} `json:"rules"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("the flooder: %d %v", resp.StatusCode, err)
		}
		for _, r := range d.Rules {
			if r.Rule == "per_ip" {
				return r.Remaining
			}
		}
		t.Fatalf("no per_ip entry in %+v", d)
		return 0
	}
	for _, q := range f.qs { // denied, then denied from the cache
		ipLeft(q)
		ipLeft(q)
	}
	for i := range 3 {
		peeks := f.qs[i].Metric("quota_deny_cache_peeks_total")
		for n := range 2 { // two ordinary callers on the next instance
			body := fmt.Sprintf(`{"user_id":"u%d-%d","ip":"198.51.100.7"}`, i, n)
			if c := post(t, f.qs[(i+1)%3].URL, body); c != http.StatusOK {
				t.Fatalf("an ordinary caller: %d", c)
			}
		}
		if got, want := ipLeft(f.qs[i]), int64(100-2-2*(i+1)); got != want {
			t.Fatalf("instance %d answers the flooder with %d left on its IP, want %d", i, got, want)
		}
		if f.qs[i].Metric("quota_deny_cache_peeks_total") != peeks+1 {
			t.Fatalf("instance %d: the denial was not answered from its cache with the IP read", i)
		}
	}
}

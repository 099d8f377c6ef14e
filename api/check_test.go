package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
)

const defaultRules = `
rules:
  - name: app_ip_hourly
    dimensions: [app_id, ip]
    limit: 10000
    window: 1h
    algorithm: fixed_window
  - name: app_user_iface_hourly
    dimensions: [app_id, user_id, interface_id]
    limit: 1000
    window: 1h
    algorithm: fixed_window
`

const call = `{"app_id":"a1","ip":"203.0.113.7","user_id":"u42","interface_id":"users.get"}`

func TestCheck_LimitAllowsExactlyNThenDeniesWithRetryAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	for i := 1; i <= 1000; i++ {
		r := h.check(call)
		if r.status != http.StatusOK || !r.allowed() {
			t.Fatalf("call %d: status %d, body %s", i, r.status, r.raw)
		}
		if got, want := r.remaining(t, "app_user_iface_hourly"), int64(1000-i); got != want {
			t.Fatalf("call %d: remaining %d, want %d", i, got, want)
		}
		if got := r.header.Get("RateLimit-Remaining"); got != strconv.Itoa(1000-i) {
			t.Fatalf("call %d: RateLimit-Remaining %q, want %d", i, got, 1000-i)
		}
	}
	r := h.check(call)
	if r.status != http.StatusTooManyRequests || r.allowed() {
		t.Fatalf("call 1001: status %d, body %s", r.status, r.raw)
	}
	// The clock is 250 ms into the hour: 3599.75 s left, rounded up.
	if got := r.header.Get("Retry-After"); got != "3600" {
		t.Errorf("Retry-After %q, want 3600", got)
	}
	if got := r.header.Get("RateLimit-Limit"); got != "1000" {
		t.Errorf("RateLimit-Limit %q, want 1000 (the most restrictive rule)", got)
	}
	e := r.entry(t, "app_user_iface_hourly")
	if e["allowed"] != false || e["remaining"].(float64) != 0 || e["reset_after_ms"].(float64) != 3599750 {
		t.Errorf("denied entry %v", e)
	}
	// The denied call did not count against the other rule either.
	if got := r.remaining(t, "app_ip_hourly"); got != 10000-1000 {
		t.Errorf("app_ip_hourly remaining %d, want 9000", got)
	}
}

func TestCheck_ConcurrentCallsAllowExactlyTheLimit(t *testing.T) {
	for _, coalesced := range []int{0, 4} {
		t.Run(fmt.Sprintf("coalesce=%d", coalesced), func(t *testing.T) {
			t.Parallel()
			concurrentCallsAllowExactlyTheLimit(t, newHarness(t, defaultRules, settings(func(s *config.Settings) { s.Coalesce = coalesced })))
		})
	}
}

func concurrentCallsAllowExactlyTheLimit(t *testing.T, h *harness) {
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				resp, err := http.Post(h.srv.URL+"/v1/check", "application/json", strings.NewReader(call))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					allowed.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 1000 || denied.Load() != 1000 {
		t.Fatalf("allowed %d denied %d, want exactly 1000 and 1000", allowed.Load(), denied.Load())
	}
}

const twoSmallRules = `
rules:
  - name: per_ip
    dimensions: [app_id, ip]
    limit: 3
    window: 1h
    algorithm: fixed_window
  - name: per_user
    dimensions: [app_id, user_id, interface_id]
    limit: 5
    window: 1h
    algorithm: fixed_window
`

func checkOf(ip, user string) string {
	return fmt.Sprintf(`{"app_id":"a1","ip":%q,"user_id":%q,"interface_id":"i1"}`, ip, user)
}

func TestCheck_DeniedCallConsumesNothingInAnyRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []harnessOption
	}{
		{"one script call", nil},
		{"split per hash tag", []harnessOption{splitBySlot()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, twoSmallRules, tc.opts...)
			for _, u := range []string{"u1", "u2", "u3"} {
				if r := h.check(checkOf("ip-a", u)); r.status != 200 {
					t.Fatalf("setup call: %s", r.raw)
				}
			}
			before := h.snapshot()
			r := h.check(checkOf("ip-a", "u9"))
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("want 429 from per_ip, got %d %s", r.status, r.raw)
			}
			if e := r.entry(t, "per_user"); e["allowed"] != true || e["remaining"].(float64) != 5 {
				t.Errorf("per_user entry should allow with its full 5 remaining: %v", e)
			}
			if after := h.snapshot(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("a denied call changed counts:\nbefore %v\nafter  %v", before, after)
			}
			// Raising the limit mid-window helps at once, because nothing was
			// consumed by the denied calls.
			put := h.do("PUT", "/v1/rules", "application/json",
				`{"rules":[{"name":"per_ip","dimensions":["app_id","ip"],"limit":4,"window":"1h","algorithm":"fixed_window"},
				  {"name":"per_user","dimensions":["app_id","user_id","interface_id"],"limit":5,"window":"1h","algorithm":"fixed_window"}]}`,
				"Authorization", "Bearer "+adminToken)
			if put.status != 200 {
				t.Fatalf("PUT rules: %d %s", put.status, put.raw)
			}
			if r := h.check(checkOf("ip-a", "u9")); r.status != 200 || r.remaining(t, "per_ip") != 0 || r.remaining(t, "per_user") != 4 {
				t.Fatalf("after raising the limit: %d %s", r.status, r.raw)
			}
		})
	}
}

func TestCheck_RulesWithoutCommonTagStayAllOrNothingWhenSplit(t *testing.T) {
	t.Parallel()
	// per_user has no app_id, so its keys carry another hash tag than
	// per_app's; with split-by-slot the check is two script calls.
	h := newHarness(t, `
rules:
  - name: per_app
    dimensions: [app_id]
    limit: 2
    window: 1h
    algorithm: fixed_window
  - name: per_user
    dimensions: [user_id]
    limit: 10
    window: 1h
    algorithm: fixed_window
`, splitBySlot())
	for i := 0; i < 2; i++ {
		if r := h.check(`{"app_id":"a","user_id":"u"}`); r.status != 200 {
			t.Fatalf("call %d: %s", i, r.raw)
		}
	}
	for i := 0; i < 3; i++ {
		if r := h.check(`{"app_id":"a","user_id":"u"}`); r.status != 429 {
			t.Fatalf("over the app limit: %d %s", r.status, r.raw)
		}
	}
	// per_user counted only the two allowed calls: the refunds undid the rest.
	r := h.check(`{"user_id":"u","dry_run":true}`)
	if got := r.remaining(t, "per_user"); got != 10-2-1 {
		t.Fatalf("per_user remaining after a dry run %d, want 7 (2 counted)", got)
	}
}

func TestCheck_WindowRollsOverAtTheEpochAlignedBoundary(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: two_per_2s
    dimensions: [user_id]
    limit: 2
    window: 2s
    algorithm: fixed_window
`)
	// start is at :00.250 of an even second, so the window ends 1.75 s later.
	for i := 0; i < 2; i++ {
		if r := h.check(`{"user_id":"u"}`); r.status != 200 {
			t.Fatalf("call %d: %s", i, r.raw)
		}
	}
	r := h.check(`{"user_id":"u"}`)
	if r.status != 429 || r.header.Get("Retry-After") != "2" || r.entry(t, "two_per_2s")["reset_after_ms"].(float64) != 1750 {
		t.Fatalf("third call: %d %v %s", r.status, r.header, r.raw)
	}
	h.clk.Advance(1749 * time.Millisecond)
	if r := h.check(`{"user_id":"u"}`); r.status != 429 {
		t.Fatalf("1 ms before the boundary: %d", r.status)
	}
	h.clk.Advance(time.Millisecond)
	if r := h.check(`{"user_id":"u"}`); r.status != 200 || r.remaining(t, "two_per_2s") != 1 {
		t.Fatalf("at the boundary: %d %s", r.status, r.raw)
	}
}

func TestCheck_CostTakesThatMuchQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: ten
    dimensions: [user_id]
    limit: 10
    window: 1h
    algorithm: fixed_window
`)
	steps := []struct {
		cost      int
		status    int
		remaining int64
	}{
		{4, 200, 6}, {4, 200, 2}, {4, 429, 2}, {3, 429, 2}, {2, 200, 0}, {1, 429, 0},
	}
	for i, s := range steps {
		r := h.check(fmt.Sprintf(`{"user_id":"u","cost":%d}`, s.cost))
		if r.status != s.status || r.remaining(t, "ten") != s.remaining {
			t.Fatalf("step %d (cost %d): status %d remaining %d, want %d %d", i, s.cost, r.status, r.remaining(t, "ten"), s.status, s.remaining)
		}
	}
}

func TestCheck_DryRunCountsNothingAndAnswersLikeTheRealCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: two
    dimensions: [user_id]
    limit: 2
    window: 1h
    algorithm: fixed_window
`)
	for i := 0; i < 5; i++ {
		r := h.check(`{"user_id":"u","dry_run":true}`)
		if r.status != 200 || r.remaining(t, "two") != 1 {
			t.Fatalf("dry run %d: %d %s", i, r.status, r.raw)
		}
	}
	if n := len(h.snapshot()); n != 0 {
		t.Fatalf("dry runs created %d keys", n)
	}
	h.check(`{"user_id":"u"}`)
	h.check(`{"user_id":"u"}`)
	if r := h.check(`{"user_id":"u","dry_run":true}`); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("dry run on an exhausted identity: %d %v", r.status, r.header)
	}
}

func TestCheck_ReportChargesUnconditionallyAndNeverDenies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: two
    dimensions: [user_id]
    limit: 2
    window: 1h
    algorithm: fixed_window
`)
	if r := h.check(`{"user_id":"u","report":true,"cost":3}`); r.status != 200 || r.remaining(t, "two") != 0 {
		t.Fatalf("report over the limit: %d %s", r.status, r.raw)
	}
	if r := h.check(`{"user_id":"u"}`); r.status != 429 {
		t.Fatalf("after the report the identity is exhausted: %d %s", r.status, r.raw)
	}
}

func TestCheck_ShadowRuleCountsButNeverDenies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: watched
    dimensions: [user_id]
    limit: 1
    window: 1h
    algorithm: fixed_window
    shadow: true
`)
	h.check(`{"user_id":"u"}`)
	r := h.check(`{"user_id":"u"}`)
	if r.status != 200 || !r.allowed() {
		t.Fatalf("a shadow rule denied: %d %s", r.status, r.raw)
	}
	if e := r.entry(t, "watched"); e["allowed"] != false || e["shadow"] != true {
		t.Fatalf("shadow entry should say it would deny: %v", e)
	}
}

func TestCheck_MatchRestrictsARuleToOneValue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: logins
    dimensions: [event, user_id]
    match: {event: login}
    limit: 1
    window: 1h
    algorithm: fixed_window
`)
	if r := h.check(`{"event":"login","user_id":"u"}`); r.status != 200 {
		t.Fatal(r.raw)
	}
	if r := h.check(`{"event":"login","user_id":"u"}`); r.status != 429 {
		t.Fatalf("second login: %d", r.status)
	}
	r := h.check(`{"event":"view","user_id":"u"}`)
	if r.status != 200 || len(r.body["rules"].([]any)) != 0 {
		t.Fatalf("another event should match no rule: %d %s", r.status, r.raw)
	}
}

func TestCheck_NoRuleAppliesMeansAllowedWithoutHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	r := h.check(`{"app_id":"a1"}`)
	if r.status != 200 || !r.allowed() || r.header.Get("RateLimit-Limit") != "" {
		t.Fatalf("%d %v %s", r.status, r.header, r.raw)
	}
}

func TestBatch_ItemsAreDecidedInOrderAsIfSentAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: three
    dimensions: [user_id]
    limit: 3
    window: 1h
    algorithm: fixed_window
`)
	r := h.do("POST", "/v1/check/batch", "application/json", `{"checks":[
		{"user_id":"a"},{"user_id":"a","cost":2},{"user_id":"b"},{"user_id":"a"},
		{"user_id":"a","dry_run":true},{"user_id":"b","cost":2},{"user_id":"b"}]}`)
	if r.status != 200 {
		t.Fatalf("batch: %d %s", r.status, r.raw)
	}
	results := r.body["results"].([]any)
	want := []struct {
		allowed   bool
		remaining float64
	}{{true, 2}, {true, 0}, {true, 2}, {false, 0}, {false, 0}, {true, 0}, {false, 0}}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d", len(results), len(want))
	}
	for i, w := range want {
		res := results[i].(map[string]any)
		e := res["rules"].([]any)[0].(map[string]any)
		if res["allowed"] != w.allowed || e["remaining"] != w.remaining {
			t.Errorf("item %d: allowed %v remaining %v, want %v %v", i, res["allowed"], e["remaining"], w.allowed, w.remaining)
		}
	}
}

func TestCheck_MostRestrictiveEntryGivesTheHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: hourly
    dimensions: [user_id]
    limit: 100
    window: 1h
    algorithm: fixed_window
  - name: minutely
    dimensions: [user_id]
    limit: 100
    window: 1m
    algorithm: fixed_window
  - name: daily
    dimensions: [user_id]
    limit: 5
    window: 24h
    algorithm: fixed_window
`)
	r := h.check(`{"user_id":"u"}`)
	if r.header.Get("RateLimit-Limit") != "5" || r.header.Get("RateLimit-Remaining") != "4" {
		t.Fatalf("least remaining should win: %v", r.header)
	}
	for i := 0; i < 4; i++ {
		h.check(`{"user_id":"u","cost":1}`)
	}
	// Tie at 95 remaining between hourly and minutely is not reached; the
	// daily one is at 0 and still wins, with its own reset.
	r = h.check(`{"user_id":"u","dry_run":true}`)
	if r.header.Get("RateLimit-Limit") != "5" || r.header.Get("RateLimit-Reset") != strconv.Itoa(int((14*time.Hour-250*time.Millisecond+time.Second-1)/time.Second)) {
		t.Fatalf("headers %v", r.header)
	}
}

func TestCheck_TiesOnRemainingGoToTheSoonestReset(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
rules:
  - name: hourly
    dimensions: [user_id]
    limit: 10
    window: 1h
    algorithm: fixed_window
  - name: minutely
    dimensions: [user_id]
    limit: 10
    window: 1m
    algorithm: fixed_window
`)
	r := h.check(`{"user_id":"u"}`)
	if r.header.Get("RateLimit-Reset") != "60" {
		t.Fatalf("tie should pick the 1m window's reset: %v", r.header)
	}
}

package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

const oneRule = `
rules:
  - name: two
    dimensions: [user_id]
    limit: 2
    window: 1h
    algorithm: fixed_window
`

func clientOf(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, PoolTimeout: 100 * time.Millisecond, MaxRetries: -1,
		DialerRetries: 1, PoolSize: 16,
	})
}

func TestFailMode_RedisDown(t *testing.T) {
	t.Parallel()
	dead := "127.0.0.1:" + itoa(testenv.FreePort(t))
	for _, tc := range []struct {
		mode     config.FailMode
		status   int
		enforced string
		code     string
		ready    int // GET /readyz: an open instance still answers checks as it promises
	}{
		{config.FailOpen, http.StatusOK, "false", "", http.StatusOK},
		{config.FailClosed, http.StatusServiceUnavailable, "", "store_unavailable", http.StatusServiceUnavailable},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			rdb := clientOf(dead)
			defer rdb.Close()
			h := newHarness(t, oneRule, failMode(tc.mode), redisClient(rdb))
			began := time.Now()
			r := h.check(`{"user_id":"u"}`)
			if took := time.Since(began); took > 2*time.Second {
				t.Errorf("a check with Redis down took %s", took)
			}
			if r.status != tc.status || r.header.Get("Quota-Enforced") != tc.enforced || r.errorCode() != tc.code {
				t.Fatalf("status %d enforced %q code %q: %s", r.status, r.header.Get("Quota-Enforced"), r.errorCode(), r.raw)
			}
			a := h.do("GET", "/v1/auth", "", "", "X-User-Id", "u")
			if a.status != tc.status || a.header.Get("Quota-Enforced") != tc.enforced || a.errorCode() != tc.code {
				t.Fatalf("/v1/auth: status %d enforced %q code %q: %s", a.status, a.header.Get("Quota-Enforced"), a.errorCode(), a.raw)
			}
			b := h.do("POST", "/v1/check/batch", "application/json", `{"checks":[{"user_id":"u"},{"user_id":"v"}]}`)
			if tc.mode == config.FailOpen && (b.status != 200 || len(b.body["results"].([]any)) != 2) {
				t.Fatalf("fail-open batch should answer one result per item: %d %s", b.status, b.raw)
			}
			ready := h.do("GET", "/readyz", "", "")
			if ready.status != tc.ready || ready.body["fail_mode"] != string(tc.mode) {
				t.Fatalf("readyz with Redis down in %s mode: %d %s, want %d", tc.mode, ready.status, ready.raw, tc.ready)
			}
			if checks, _ := ready.body["checks"].(map[string]any); checks["redis"] == "ok" || checks["redis"] == nil {
				t.Fatalf("readyz does not report Redis as down: %s", ready.raw)
			}
		})
	}
}

func TestFailMode_EnforcementReturnsWithinASecondOfRedis(t *testing.T) {
	t.Parallel()
	p := testenv.StartRedis(t)
	rdb := clientOf(p.Addr())
	defer rdb.Close()
	h := newHarness(t, oneRule, redisClient(rdb))
	h.check(`{"user_id":"u"}`)
	h.check(`{"user_id":"u"}`)
	if r := h.check(`{"user_id":"u"}`); r.status != 429 {
		t.Fatalf("before the outage: %d", r.status)
	}
	p.Kill()
	// Enough failed calls during the outage to trip go-redis' dial gate
	// (PoolSize failed dials), the slowest case to recover from.
	for i := 0; i < 40; i++ {
		if r := h.check(`{"user_id":"u"}`); r.status != 200 || r.header.Get("Quota-Enforced") != "false" {
			t.Fatalf("during the outage (fail open): %d %v", r.status, r.header)
		}
	}
	p.Start() // an empty Redis: counts are gone, the script must be loaded again
	back := time.Now()
	for {
		h.check(`{"user_id":"w"}`)
		h.check(`{"user_id":"w"}`)
		r := h.check(`{"user_id":"w"}`)
		if r.status == 429 && r.header.Get("Quota-Enforced") == "" {
			break
		}
		if time.Since(back) > 1500*time.Millisecond { // go-redis probes a tripped dial gate once a second
			t.Fatalf("not enforced %s after Redis returned: %d %v", time.Since(back), r.status, r.header)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("enforced again %s after Redis returned", time.Since(back))
}

// On SIGTERM quotad calls StartDraining: /readyz turns 503 at once, in
// either fail mode and with every dependency up, while checks are still
// answered (the balancer has not noticed yet).
func TestReadyz_DrainingAnswers503WhileChecksAreStillServed(t *testing.T) {
	t.Parallel()
	for _, mode := range []config.FailMode{config.FailOpen, config.FailClosed} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, oneRule, failMode(mode))
			if r := h.do("GET", "/readyz", "", ""); r.status != http.StatusOK || r.body["status"] != "ready" {
				t.Fatalf("before draining: %d %s", r.status, r.raw)
			}
			h.server.StartDraining()
			if r := h.do("GET", "/readyz", "", ""); r.status != http.StatusServiceUnavailable || r.errorCode() != "draining" {
				t.Fatalf("draining: %d %s", r.status, r.raw)
			}
			if r := h.check(`{"user_id":"u"}`); r.status != http.StatusOK {
				t.Fatalf("a check while draining: %d %s", r.status, r.raw)
			}
		})
	}
}

package api_test

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
)

func TestCheckToken_WhenSetChecksWithoutItAre401(t *testing.T) {
	t.Parallel()
	h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.CheckToken = "check-token-0123456789" }))
	for _, tc := range []struct {
		auth   string
		status int
	}{
		{"", 401}, {"Bearer wrong", 401}, {"Basic check-token-0123456789", 401}, {"Bearer check-token-0123456789", 200},
	} {
		r := h.do("POST", "/v1/check", "application/json", `{"user_id":"u"}`, "Authorization", tc.auth)
		if r.status != tc.status {
			t.Errorf("auth %q: %d, want %d", tc.auth, r.status, tc.status)
		}
		b := h.do("POST", "/v1/check/batch", "application/json", `{"checks":[{"user_id":"v"}]}`, "Authorization", tc.auth)
		if b.status != tc.status {
			t.Errorf("batch auth %q: %d, want %d", tc.auth, b.status, tc.status)
		}
	}
	// Only the one authorized call counted.
	if r := h.do("POST", "/v1/check", "application/json", `{"user_id":"u","dry_run":true}`, "Authorization", "Bearer check-token-0123456789"); r.remaining(t, "two") != 0 {
		t.Fatalf("remaining after one counted call and a dry run: %s", r.raw)
	}
}

func TestInFlightCap_BeyondItRequestsGetAFast503(t *testing.T) {
	t.Parallel()
	sh := newSlotHolder()
	h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.MaxInFlight = 1 }), sh.option())
	// Hold the only slot with work in progress (a readiness check that
	// blocks; a slow body no longer holds one, see sec_slowbody_test.go).
	sh.hold(t, h)
	began := time.Now()
	r := h.check(`{"user_id":"u"}`)
	if r.status != http.StatusServiceUnavailable || r.errorCode() != "overloaded" || time.Since(began) > time.Second {
		t.Fatalf("%d %s after %s", r.status, r.raw, time.Since(began))
	}
}

func TestTwoInstances_ShareOneLimitExactly(t *testing.T) {
	t.Parallel()
	a := newHarness(t, oneRule)
	b := newHarness(t, oneRule, keyPrefix(a.prefix))
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 20; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			url := a.srv.URL
			if g%2 == 1 {
				url = b.srv.URL
			}
			for i := 0; i < 5; i++ {
				resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(`{"user_id":"shared"}`))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == 200 {
					allowed.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	if allowed.Load() != 2 {
		t.Fatalf("allowed %d across two instances, want exactly the limit 2", allowed.Load())
	}
}

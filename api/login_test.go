package api_test

import (
	"net/http"
	"testing"
	"time"
)

// The login example of DESIGN.md: per user 1/s, 2/min, 5/h, 10/day over a
// sliding window, only for event=login; other events are not limited.
const loginRules = `
rules:
  - name: login_per_user
    dimensions: [event, user_id]
    match: {event: login}
    limits: [{limit: 1, window: 1s}, {limit: 2, window: 1m}, {limit: 5, window: 1h}, {limit: 10, window: 24h}]
    algorithm: sliding_window
`

// loginModel is the rule's meaning written plainly: a call in second s is
// allowed when, for every limit, fewer than `limit` allowed calls fell in the
// seconds (s - window, s].
type loginModel struct{ allowedSecs []int64 }

var loginLimits = []struct {
	window string
	secs   int64
	limit  int
}{{"1s", 1, 1}, {"1m", 60, 2}, {"1h", 3600, 5}, {"24h", 86400, 10}}

func (m *loginModel) call(sec int64) (allowed bool, deniedBy string) {
	for _, l := range loginLimits {
		n := 0
		for _, s := range m.allowedSecs {
			if s > sec-l.secs {
				n++
			}
		}
		if n+1 > l.limit {
			return false, l.window
		}
	}
	m.allowedSecs = append(m.allowedSecs, sec)
	return true, ""
}

func TestLogin_DesignExampleOverHTTP(t *testing.T) {
	t.Parallel()
	h := newHarness(t, loginRules)
	offsets := []time.Duration{
		0, 300 * time.Millisecond, 1100 * time.Millisecond, 2200 * time.Millisecond, // 1/s, then 2/min
		59 * time.Second, 60 * time.Second, 62 * time.Second, 64 * time.Second, 66 * time.Second,
		130 * time.Second, 200 * time.Second, 1800 * time.Second, // 5/h
		3600 * time.Second, 3601 * time.Second, 3602 * time.Second, 3663 * time.Second, 3725 * time.Second,
		3800 * time.Second, 7300 * time.Second, 7400 * time.Second, 7500 * time.Second, // 10/day
		20 * time.Hour, 23 * time.Hour, 24 * time.Hour, 24*time.Hour + time.Second, 24*time.Hour + 2*time.Second,
		25 * time.Hour, 26 * time.Hour,
	}
	start := h.clk.Now()
	var model loginModel
	deniedBy := map[string]int{}
	allowed := 0
	for i, off := range offsets {
		at := start.Add(off)
		h.clk.Set(at)
		wantAllowed, wantWindow := model.call(at.Unix())
		r := h.check(`{"event":"login","user_id":"alice"}`)
		if got := r.status == http.StatusOK; got != wantAllowed {
			t.Fatalf("call %d at +%s: status %d, model says allowed=%v (by %s): %s", i, off, r.status, wantAllowed, wantWindow, r.raw)
		}
		if wantAllowed {
			allowed++
			continue
		}
		first := ""
		for _, e := range r.body["rules"].([]any) {
			if m := e.(map[string]any); m["allowed"] == false {
				first = m["window"].(string)
				break
			}
		}
		if first != wantWindow {
			t.Fatalf("call %d at +%s: denied by the %s window first, model says %s: %s", i, off, first, wantWindow, r.raw)
		}
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("call %d: 429 without Retry-After", i)
		}
		deniedBy[wantWindow]++
	}
	// The sequence exercises every limit.
	for _, l := range loginLimits {
		if deniedBy[l.window] == 0 {
			t.Errorf("no call was denied by the %s limit: %v", l.window, deniedBy)
		}
	}
	t.Logf("%d of %d logins allowed; denied by window: %v", allowed, len(offsets), deniedBy)
	if r := h.check(`{"event":"view","user_id":"alice"}`); r.status != 200 {
		t.Fatalf("another event is not limited: %d", r.status)
	}
	if r := h.check(`{"event":"login","user_id":"bob"}`); r.status != 200 {
		t.Fatalf("another user has his own limits: %d", r.status)
	}
}

package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/quota-platform/quota/limiter"
)

// The header values share one string and their slices one array: adding a
// value to one header must not change another.
func TestRateLimitHeaders_AddToOneLeavesTheOthers(t *testing.T) {
	d := limiter.Decision{Allowed: false, Entries: []limiter.Entry{
		{Rule: "a", Limit: 10, Remaining: 0, ResetAfter: 1500 * time.Millisecond, RetryAfter: 1500 * time.Millisecond},
		{Rule: "b", Limit: 1000, Remaining: 7, ResetAfter: time.Hour, Allowed: true},
	}}
	var ah answerHeaders
	legacyHeaders(&ah, &d, true)
	h := http.Header{}
	ah.into(h)
	h.Add("RateLimit-Limit", "extra")
	want := map[string][]string{
		"RateLimit-Limit":     {"10", "extra"},
		"RateLimit-Remaining": {"0"},
		"RateLimit-Reset":     {"2"},
		"Retry-After":         {"2"},
	}
	for k, v := range want {
		got := h.Values(k)
		if len(got) != len(v) {
			t.Fatalf("%s = %q, want %q", k, got, v)
		}
		for i := range v {
			if got[i] != v[i] {
				t.Fatalf("%s = %q, want %q", k, got, v)
			}
		}
	}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want only %v", h, want)
	}
}

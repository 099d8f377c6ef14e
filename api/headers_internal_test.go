package api

import (
	"net/http"
	"strconv"
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

// Header values are kept whole whether they fit the headers' own buffer,
// outgrow it part way or start beyond it (long draft headers of many
// rules), and an exchange given the headers by value reads them all.
func TestAnswerHeaders_ValuesSurviveOutgrowingTheBuffer(t *testing.T) {
	long := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a' + byte(i%26)
		}
		return b
	}
	for _, c := range []struct {
		name string
		vals [][]byte // nil: an int header
		ints []int64
	}{
		{"ints that fit", [][]byte{nil, nil, nil, nil}, []int64{10, -9223372036854775808, 9223372036854775807, 0}},
		{"bytes that fit", [][]byte{long(40), long(50)}, []int64{0, 0}},
		{"outgrown by a value", [][]byte{long(40), long(50), long(30), nil}, []int64{0, 0, 0, 42}},
		{"outgrown by an int", [][]byte{long(90), nil, nil}, []int64{0, 123456789, 7}},
		{"first beyond", [][]byte{long(300), nil, long(5)}, []int64{0, 99, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ah answerHeaders
			want := http.Header{}
			for i, v := range c.vals {
				key := http.CanonicalHeaderKey("X-H" + string(rune('a'+i)))
				if v == nil {
					ah.addInt(key, c.ints[i])
					want.Set(key, strconv.FormatInt(c.ints[i], 10))
				} else {
					ah.add(key, v)
					want.Set(key, string(v))
				}
			}
			got := byValue(ah)
			if len(got) != len(want) {
				t.Fatalf("headers %v, want %v", got, want)
			}
			for k := range want {
				if got.Get(k) != want.Get(k) {
					t.Fatalf("%s = %q, want %q", k, got.Get(k), want.Get(k))
				}
			}
		})
	}
}

// byValue is what an exchange given h by value sets.
func byValue(h answerHeaders) http.Header {
	out := http.Header{}
	h.into(out)
	return out
}

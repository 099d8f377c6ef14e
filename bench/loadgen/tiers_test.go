package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestTierClass_IsTheSlowestTierTheAnswerNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"all hot", `{"allowed":true,"rules":[{"rule":"a","tier":"hot","allowed":true},{"rule":"b","tier":"hot","allowed":true}]}`, "hot"},
		{"hot and cold", `{"rules":[{"tier":"cold"},{"tier":"hot"}]}`, "cold"},
		{"warm and hot", `{"rules":[{"tier":"hot"},{"tier":"warm"}]}`, "warm"},
		{"no tier", `{"allowed":true,"rules":[]}`, ""},
		{"unknown tier ignored", `{"rules":[{"tier":"elsewhere"}]}`, ""},
		{"truncated", `{"rules":[{"tier":"col`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tierClass([]byte(tc.body)); got != tc.want {
				t.Fatalf("tierClass(%s) = %q, want %q", tc.body, got, tc.want)
			}
		})
	}
}

func TestRun_TalliesSingleChecksByTier(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Every third answer names a cold rule, the others hot ones only.
			tier := "hot"
			if n.Add(1)%3 == 0 {
				tier = "cold"
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"allowed":true,"rules":[{"rule":"a","tier":"hot","allowed":true},{"rule":"b","tier":"` + tier + `","allowed":true}]}`))
		}))
		t.Cleanup(srv.Close)
		res, err := Run(context.Background(), testConfig(srv.URL, client))
		if err != nil {
			t.Fatal(err)
		}
		hot, cold := res.Tiers["hot"], res.Tiers["cold"]
		if hot.Requests+cold.Requests != res.Requests || res.Requests != n.Load() {
			t.Fatalf("tiers %+v do not add up to %d requests (server saw %d)", res.Tiers, res.Requests, n.Load())
		}
		if third := n.Load() / 3; cold.Requests != third || cold.P99Ms <= 0 || hot.P50Ms <= 0 {
			t.Fatalf("cold %+v, want %d requests with latencies; hot %+v", cold, third, hot)
		}
		var b strings.Builder
		if err := res.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "tier hot") || !strings.Contains(b.String(), "tier cold") {
			t.Fatalf("no tier lines in:\n%s", b.String())
		}
	})
}

func TestTierClass_AllocatesNothing(t *testing.T) {
	body := []byte(`{"allowed":true,"rules":[{"rule":"a","tier":"hot"},{"rule":"b","tier":"cold"}]}`)
	if n := testing.AllocsPerRun(100, func() { _ = tierClass(body) }); n != 0 {
		t.Fatalf("tierClass allocates %v times per call", n)
	}
	if got := tierClass(body); got != "cold" {
		t.Fatalf("class %q, want cold", got)
	}
}

// Package checkreq holds what the fuzz tests of the check decoders (the
// JSON body, api/checkjson, and the forward-auth headers, api) require of
// every request they accept. For tests only.
package checkreq

import (
	"testing"

	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// RequireValid fails t unless r is a request the contract allows: a cost
// of 1 to maxCost, not both dry_run and report, dimensions with valid
// names and values, each named once.
func RequireValid(t testing.TB, r limiter.Request, maxCost int64) {
	t.Helper()
	if r.Cost < 1 || r.Cost > maxCost {
		t.Fatalf("cost %d accepted", r.Cost)
	}
	if r.DryRun && r.Report {
		t.Fatal("dry_run and report both accepted")
	}
	seen := map[string]bool{}
	for _, d := range r.Dims {
		if !rules.ValidName(d.Name) || !rules.ValidValue(d.Value) || seen[d.Name] {
			t.Fatalf("invalid dimension accepted: %q=%q", d.Name, d.Value)
		}
		seen[d.Name] = true
	}
}

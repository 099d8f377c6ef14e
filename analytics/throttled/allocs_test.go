//go:build !race

package throttled

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
)

// A denial of an identity already counted allocates nothing: the
// identity's key is looked up from the stack and copied only when kept.
func TestDenied_KnownIdentityAllocatesNothing(t *testing.T) {
	th := New(clock.NewFake(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), usage.Days{}, nil, Options{}, nil)
	names, values := []string{"app_id", "user_id", "interface_id"}, []string{"a1", "u42", "users.get"}
	th.Denied("a1", "app_user_iface_hourly", names, values)
	if n := testing.AllocsPerRun(100, func() { th.Denied("a1", "app_user_iface_hourly", names, values) }); n != 0 {
		t.Fatalf("%v allocations a denial, want 0", n)
	}
}

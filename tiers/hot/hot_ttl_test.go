package hot

import (
	"testing"
	"time"
)

// A new key outlives its window by at least min(QUOTA_TTL_JITTER, 5 s), so
// an instance whose clock is behind the one that made the key still finds
// it (TestClockSkew_InstancesOneSecondApartStayWithinTheStatedBound saw
// counters restart from 0 without the floor).
func TestHotTTLJitter_LeavesAGraceForClocksBehind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		jitter   time.Duration
		min, max int64
	}{
		{0, 0, 0},
		{2 * time.Second, 2000, 2000},
		{5 * time.Second, 5000, 5000},
		{time.Minute, 5000, 60000},
	}
	for _, tc := range tests {
		s := &Store{jitter: tc.jitter}
		for range 1000 {
			if j := s.ttlJitter(); j < tc.min || j > tc.max {
				t.Fatalf("jitter %s: extra TTL %d ms, want %d..%d", tc.jitter, j, tc.min, tc.max)
			}
		}
	}
}

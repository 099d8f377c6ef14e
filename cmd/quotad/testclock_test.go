package main

import (
	"strings"
	"testing"
	"time"
)

func TestDecisionClock_OffsetMovesNowAndBadValueIsRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value   string
		offset  time.Duration
		wantErr string
	}{
		{"", 0, ""},
		{"0", 0, ""},
		{"1s", time.Second, ""},
		{"-500ms", -500 * time.Millisecond, ""},
		{"soon", 0, "QUOTA_TEST_CLOCK_OFFSET: \"soon\" is not a duration"},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			t.Parallel()
			clk, err := decisionClock(func(string) string { return tc.value })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := time.Until(clk.Now()) - tc.offset
			if got < -time.Second/2 || got > time.Second/2 {
				t.Errorf("now is %s off the wall clock, want %s", time.Until(clk.Now()), tc.offset)
			}
		})
	}
}

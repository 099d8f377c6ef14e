package rules_test

import (
	"strings"
	"testing"

	"github.com/quota-platform/quota/rules"
)

// The hot tier's exact integer arithmetic bounds two algorithms' limits.
func TestAlgoLimits_TokenBucketAndMinIntervalBounds(t *testing.T) {
	t.Parallel()
	rule := func(limit, window, algo string) string {
		return "rules:\n  - {name: a, dimensions: [x], limit: " + limit + ", window: " + window + ", algorithm: " + algo + "}\n"
	}
	ok := []string{
		rule("52000000", "24h", "token_bucket"),  // 4.49e15 units
		rule("1000000000", "1h", "token_bucket"), // 3.6e15
		rule("1000", "1s", "min_interval"),       // 1 ms apart
		rule("10000", "24h", "min_interval"),
	}
	for _, y := range ok {
		if _, err := rules.ParseYAML([]byte(y)); err != nil {
			t.Errorf("rejected %s: %v", y, err)
		}
	}
	bad := map[string]string{
		rule("53000000", "24h", "token_bucket"): "token_bucket",
		rule("1000000", "366d", "token_bucket"): "token_bucket",
		rule("1001", "1s", "min_interval"):      "min_interval",
	}
	for y, want := range bad {
		_, err := rules.ParseYAML([]byte(y))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error about %s", y, err, want)
		}
	}
}

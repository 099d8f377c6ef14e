package tiers_test

import (
	"testing"

	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
)

// Warm values of the previous form (tierstest.OldWarmValues, which the
// router's test of such a bucket shares) decode, and are rewritten in the
// new form.
func TestWarmValue_PreviousFormIsDecodedAndRewrittenInTheNew(t *testing.T) {
	t.Parallel()
	for _, c := range tierstest.OldWarmValues {
		got, err := tiers.DecodeWarmValue([]byte(c.Val))
		if err != nil || got != c.Want {
			t.Errorf("%s: decoded %+v %v, want %+v", c.Name, got, err, c.Want)
			continue
		}
		v, err := tiers.EncodeWarmValue(&got)
		if err != nil {
			t.Fatal(err)
		}
		// Two bytes shorter (no snappy framing), and told apart by its
		// first byte.
		if len(v) != len(c.Val)-2 || v[0] < 0x80 {
			t.Errorf("%s: new form %q, want %d bytes from 0x80 up", c.Name, v, len(c.Val)-2)
		}
		if again, err := tiers.DecodeWarmValue(v); err != nil || again != c.Want {
			t.Errorf("%s: new form decodes to %+v %v, want %+v", c.Name, again, err, c.Want)
		}
	}
}

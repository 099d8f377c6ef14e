package warm

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// A tag's header key is the same whichever way it is made: from the tag
// alone (the check scripts' arguments, the cold filter), from a cell's
// location, or from a Ref; it does not depend on the cell.
func TestStore_TagHeaderKeyIsEveryCellsHeaderKey(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "quota:", "a-longer-prefix-than-the-stack-buffer-holds-for-one-key:"} {
		s := NewStore(nil, Options{Prefix: prefix})
		for _, app := range []string{"a1", "app-2", "x"} {
			tag := tiers.TagOf(app)
			want := s.TagHeaderKey(tag)
			for _, window := range []time.Duration{time.Hour, 24 * time.Hour} {
				ref := tiers.Ref{Identity: tiers.IdentityOf("r", []string{app, "u"}), Window: window, Tag: tag}
				if got := s.Locate(ref.Identity, ref.Window, ref.Tag).HeaderKey(); got != want {
					t.Errorf("prefix %q, app %s: Locate's header key %q, TagHeaderKey %q", prefix, app, got, want)
				}
				if got := s.HeaderKey(&ref); got != want {
					t.Errorf("prefix %q, app %s: HeaderKey %q, TagHeaderKey %q", prefix, app, got, want)
				}
				if base, _ := s.Location(&ref); base+"d" != want {
					t.Errorf("prefix %q, app %s: base %q, TagHeaderKey %q", prefix, app, base, want)
				}
			}
		}
	}
}

package migrate

import (
	"github.com/quota-platform/quota/internal/testsupport/moveenv"

	"testing"
)

// Releasing a batch's leases deletes those this worker still holds and
// leaves a lease that lapsed and was taken by another worker.
func TestLeases_ReleaseDeletesOnlyTheLeasesStillHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t).ownJournal()
	ctx := t.Context()
	refs := moveenv.Refs(moveenv.NewCells(3, 10, 0)...)
	held, err := e.mover.lease(ctx, refs)
	if err != nil || len(held.refs) != len(refs) {
		t.Fatalf("leased %d of %d: %v", len(held.refs), len(refs), err)
	}
	taken := held.keys[2] // lapsed, then taken by another worker
	if err := e.mover.RDB.Set(ctx, taken, "other-worker", 0).Err(); err != nil {
		t.Fatal(err)
	}
	held.release()
	for i, k := range held.keys {
		want := int64(0)
		if k == taken {
			want = 1
		}
		if n, err := e.mover.RDB.Exists(ctx, k).Result(); err != nil || n != want {
			t.Fatalf("lease %d of %d: exists %d, want %d (%v)", i, len(held.keys), n, want, err)
		}
	}
	if v, _ := e.mover.RDB.Get(ctx, taken).Result(); v != "other-worker" {
		t.Fatalf("the other worker's lease holds %q", v)
	}
}

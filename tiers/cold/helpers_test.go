package cold

import (
	"testing"

	"github.com/quota-platform/quota/internal/testsupport/tierstest"
)

// The cells and the store environment of the tiers' tests (package
// tierstest).
type confCell = tierstest.Cell

var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)

// confEnv is one store under test (tierstest.Env).
type confEnv = tierstest.Env

// spreadShards rerolls users until a, b and c do not all share a cold shard.
func spreadShards(t *testing.T, s *Store, a, b, c confCell) (confCell, confCell, confCell) {
	for range 100 {
		ra, rb, rc := a.Ref(), b.Ref(), c.Ref()
		if sa := s.ShardOf(&ra); sa != s.ShardOf(&rb) || sa != s.ShardOf(&rc) {
			return a, b, c
		}
		b = newConfCell(b.Limit, b.Window)
	}
	t.Fatal("could not spread cells over shards")
	return a, b, c
}

func spreadShards2(t *testing.T, s *Store, a, b confCell) (confCell, confCell) {
	a, b, _ = spreadShards(t, s, a, b, b)
	return a, b
}

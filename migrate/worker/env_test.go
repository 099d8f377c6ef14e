package worker

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/migrate"
)

// env is the tiers of a test (moveenv.Env, as the mover's tests have
// them) and a mover over them.
type env struct {
	*moveenv.Env
	mover *migrate.Mover
}

// newEnv builds the three tiers (Redis prefix and two shard DBs of the
// test's own), a router and a mover.
func newEnv(t testing.TB) *env { return withMover(moveenv.New(t), "") }

// newClusterEnv is newEnv on a Redis Cluster of three masters the test
// starts (its nodes in env.Nodes).
func newClusterEnv(t *testing.T) *env { return withMover(moveenv.NewCluster(t), "") }

// ownJournal is a copy of e whose mover keeps its journal and leases under
// a prefix of its own (migrate's env_test.go says why).
func (e *env) ownJournal() *env { return withMover(e.Env, "j"+testenv.RandomHex(4)+":") }

// withMover is e moving with a mover of its tiers, its journal and leases
// under e's prefix and then journal.
func withMover(e *moveenv.Env, journal string) *env {
	m := &migrate.Mover{RDB: e.RDB, Prefix: e.Prefix + journal, Hot: e.Hot, Warm: e.Warm, Cold: e.Cold, LeaseTTL: 5 * time.Second}
	return &env{Env: moveenv.Moving(e, m.MoveCells, func(r migrate.Result) int { return len(r.Moved) }), mover: m}
}

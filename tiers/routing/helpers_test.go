package routing

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/tiers"
)

// The cells of the tiers' tests (package tierstest); below them, copies of
// the store benchmarks' private Redis and of the old warm values of
// tiers/warm_compat_test.go (an internal test of tiers, which tierstest
// cannot hold: it imports tiers).
type confCell = tierstest.Cell

var (
	confT0      = tierstest.T0
	newConfCell = tierstest.NewCell
	confOp      = tierstest.Op
)

// tierBenchRedis is a private redis-server: other tenants of the shared one
// would make the numbers meaningless.
func tierBenchRedis(b *testing.B) *redis.Client {
	p := testenv.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

var recT = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).Unix()

// Warm values as the version before the current form wrote them:
// snappy.Encode(raw), byte for byte (written by that version's
// EncodeWarmValue). Operators upgrade in place, so a bucket may hold them
// next to values of the current form until each cell is written again.
var oldWarmValues = []struct {
	name string
	val  string
	want tiers.Record
}{
	{"fresh", "\x07\x18 _\x13\x04\x01\x00\x00",
		tiers.Record{Count: 1, Last: recT, First: recT}},
	{"typical", "\x08\x1c _\x13\x04\x0c\x88\x0e\xdf",
		tiers.Record{Count: 12, Last: recT, First: recT - 32*86400, MeanInterval: 1800, Samples: 31}},
	{"moved", "\x07\x18 _\x13D\x05\x07)",
		tiers.Record{Count: 5, Last: recT, First: recT - 86400, MeanInterval: 7, Samples: 9, Moved: true}},
	{"an hour before", "\x07\x18\x10Q\x13\x04\x03\x00\x00",
		tiers.Record{Count: 3, Last: recT - 3600, First: recT - 3600}},
}

// boolInt is 1 for true, 0 for false (the scripts' flags).
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

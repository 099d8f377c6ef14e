package analytics

import (
	"context"
	"strconv"
)

// Redis keeps a HyperLogLog sparse until it passes hll-sparse-max-bytes,
// and a PFADD into a sparse key walks the whole encoding, where a dense add
// costs the same however many users (BenchmarkPFADD). So the first flush
// sets that limit to Options.HLLDenseAt: busy keys turn dense early.

// DefaultHLLDenseAt is Options.HLLDenseAt's default: a few hundred users.
const DefaultHLLDenseAt = 1000

// sparseLimit sets Redis' hll-sparse-max-bytes to HLLDenseAt, once; a Redis
// that refuses CONFIG (a managed one may) keeps its own, with a warning.
func (u *uniques) sparseLimit(ctx context.Context) {
	if u.opt.HLLDenseAt < 0 {
		return
	}
	u.sparseOnce.Do(func() {
		if err := u.rdb.ConfigSet(ctx, "hll-sparse-max-bytes", strconv.Itoa(u.opt.HLLDenseAt)).Err(); err != nil {
			u.log.Warn("analytics: Redis refused CONFIG SET hll-sparse-max-bytes; busy distinct-user counts stay sparse longer and cost Redis more",
				"err", err, "want_bytes", u.opt.HLLDenseAt)
		}
	})
}

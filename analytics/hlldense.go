package analytics

import (
	"context"
	"strconv"
)

// Redis keeps a HyperLogLog in a sparse encoding until the encoding passes
// hll-sparse-max-bytes (3,000 by default), then makes it dense (12 KB).
// PFADD into a sparse key walks the encoding from its start for every
// user, so an add costs more the larger the key, where a dense add costs
// the same however many users (BenchmarkPFADD). So the first flush sets
// hll-sparse-max-bytes to Options.HLLDenseAt: small keys, the many, stay
// sparse; a busy one pays for its last few hundred sparse users, not a
// thousand and more.

// DefaultHLLDenseAt is Options.HLLDenseAt's default, in bytes of sparse
// encoding: a few hundred users (BenchmarkPackedRegisters prints the
// bytes by users).
const DefaultHLLDenseAt = 1000

// sparseLimit sets Redis' hll-sparse-max-bytes to HLLDenseAt, once. A Redis
// that refuses CONFIG (a managed one may) keeps its own limit: adds then
// cost more, and a warning says so.
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

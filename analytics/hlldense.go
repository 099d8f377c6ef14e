package analytics

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Redis keeps a HyperLogLog in a sparse encoding until the encoding passes
// hll-sparse-max-bytes (3,000 by default: 1,500–2,000 users), then converts it to
// the dense one (12 KB). PFADD into a sparse key walks the encoding from its
// start for every user, so an add costs more the larger the key: users
// added 90 a command to 1,000 keys up to ~1,070 users each cost Redis 0.49
// µs apiece sparse and 0.06 µs dense; 7 a command up to ~84 users, 0.16
// against 0.13 µs (BenchmarkPFADD, 2026-11-24; the sparse encoding takes
// ~2 bytes a user: 1,050 bytes at 500 users). So the flusher converts a
// key itself once its sparse encoding passes DefaultHLLDenseAt bytes (a few
// hundred users), well before Redis would: small keys, the many, stay
// sparse; a busy one pays for its last few hundred sparse users, not a
// thousand.
const (
	// DefaultHLLDenseAt is Options.HLLDenseAt's default, in bytes of
	// sparse encoding (just under 500 users: 1,050 bytes at 500,
	// BenchmarkPackedRegisters). A key converted this early and never
	// grown past it takes 12 KB where sparse it would end below 3 KB; a
	// key that grows past 1,500–2,000 users is dense either way, and by a
	// model (an add's work grows with the encoding's size, so a key's
	// sparse work with its square), not a measurement, is spared about 8/9
	// of its sparse adds' work.
	DefaultHLLDenseAt = 1000
	// hllDenseSize is the length of a dense HyperLogLog: a 16-byte header
	// and 16,384 6-bit registers.
	hllDenseSize = 16 + 16384*6/8
	// firstDenseProbe is how many users (repeats included) the flusher
	// adds to a key before it first asks Redis for the key's size; then
	// again each time the count doubles, so a key whose users repeat
	// costs a handful of STRLENs a day.
	firstDenseProbe = 256
)

// denseProbe is a key whose size a pipeline asks for.
type denseProbe struct {
	t    *touchedHLL
	size *redis.IntCmd
}

// probeDense counts added users to t and, when they reach t's next probe,
// asks for the key's size in pipe and appends the probe to probes (not
// while t is dense or conversion is off).
func (r *Recorder) probeDense(ctx context.Context, pipe redis.Pipeliner, t *touchedHLL, added int, probes []denseProbe) []denseProbe {
	if r.opt.HLLDenseAt < 0 || t.dense {
		return probes
	}
	t.sent += added
	if t.sent < max(t.probeAt, firstDenseProbe) {
		return probes
	}
	return append(probes, denseProbe{t: t, size: pipe.StrLen(ctx, t.name)})
}

// readDenseProbes reads the answered probes: a key already dense is marked
// so (no more probes); one past HLLDenseAt is returned for conversion;
// the others are asked again once their users have doubled.
func (r *Recorder) readDenseProbes(probes []denseProbe, convert []*touchedHLL) []*touchedHLL {
	for _, p := range probes {
		size, err := p.size.Result()
		if err != nil {
			continue // asked again with the next add
		}
		p.t.probeAt = 2 * p.t.sent
		switch {
		case size >= hllDenseSize:
			p.t.dense = true
		case size >= int64(r.opt.HLLDenseAt):
			convert = append(convert, p.t)
		}
	}
	return convert
}

// convertChunk is how many keys one pipeline converts: each conversion
// ships 12 KB and has Redis walk the 16,384 registers twice (tens of µs),
// so a flush that converted a thousand keys in one pipeline (the first
// minute of a busy day) could hold Redis, and the checks behind it, for
// tens of ms (an estimate, not measured).
const convertChunk = 32

// convertDense turns keys into dense HyperLogLogs by merging an empty dense
// one into each: PFMERGE makes its destination dense when a source is, and
// keeps its registers (the maximum of theirs and zero), so the count does
// not change, and another instance converting the same key at once changes
// nothing either (the merge is mergeRegisters, as for saved registers).
// Pipelines of convertChunk keys, resting after each as pace says.
func (r *Recorder) convertDense(ctx context.Context, keys []*touchedHLL, pace *pacer) error {
	if len(keys) == 0 {
		return nil
	}
	empty := make([]byte, hllDenseSize)
	copy(empty, hllMagic) // then encoding 0 (dense), a cached count of 0, no register set
	for chunk := range slices.Chunk(keys, convertChunk) {
		pipe := r.rdb.Pipeline()
		for _, t := range chunk {
			mergeRegisters(ctx, pipe, t.name, empty)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("dense conversion of %d HyperLogLogs: %w", len(chunk), err)
		}
		for _, t := range chunk {
			t.dense = true
		}
		r.met.hllDense.Add(float64(len(chunk)))
		pace.rest(ctx)
	}
	return nil
}

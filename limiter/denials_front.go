package limiter

import (
	"context"
	"hash/maphash"
	"sync/atomic"
)

// The front door: a check the denial cache can answer is answered before
// it is handed to a coalescer (a goroutine hand-off and a batch for a
// check that needs neither). Every check pays a hash of its dimensions
// for it: a check whose request was not denied lately goes on at once.
// make bench-peers' flood-shared pays for it (CPU per check; BENCHMARKS.md).

// frontSlots is the size of the direct-mapped set of requests whose
// denial was cached lately: a collision only sends a request the long way.
const frontSlots = 1 << 14

// denialFront is the set of lately denied requests' hashes. A slot holds
// a hash with its low bit set (0 marks an empty slot) and bit 1 set when
// the request's entry has cells to be read (partial): the front door
// leaves those to the coalescer, which reads them for a batch at once.
type denialFront struct {
	seed  maphash.Seed
	slots [frontSlots]atomic.Uint64
}

func (f *denialFront) hash(req *Request) uint64 {
	var h maphash.Hash
	h.SetSeed(f.seed)
	h.WriteString(req.Scope)
	for i := range req.Dims {
		h.WriteString(req.Dims[i].Name)
		h.WriteByte(0)
		h.WriteString(req.Dims[i].Value)
		h.WriteByte(0)
	}
	for i := range req.Counters {
		c := &req.Counters[i]
		h.WriteString(c.Name)
		h.WriteByte(1)
		for _, v := range c.Identity {
			h.WriteString(v)
			h.WriteByte(0)
		}
	}
	return h.Sum64()&^partialMark | 1
}

const partialMark = 2

func (f *denialFront) mark(h uint64, partial bool) {
	slot := &f.slots[h%frontSlots]
	if partial {
		h |= partialMark
	}
	slot.Store(h)
}

// has reports whether req's denial was cached lately and needs no read.
func (f *denialFront) has(req *Request) bool {
	h := f.hash(req)
	return f.slots[h%frontSlots].Load() == h
}

// hasHash reports whether h's denial was cached lately, partial or not.
func (f *denialFront) hasHash(h uint64) bool {
	return f.slots[h%frontSlots].Load()&^partialMark == h
}

// Denied answers req from the denial cache when it can.
func (l *Limiter) Denied(req *Request) (Decision, bool) {
	d := l.denials
	if d == nil || req.Report || !d.front.has(req) {
		return Decision{}, false
	}
	gen := d.gen.Load()
	now := l.clock.Now()
	buf := l.getOpBuf()
	defer l.opBufs.Put(buf)
	op, owners := buildOpIn(buf, l.rules.Load(), req, now, l.loc, true)
	if len(op.Cells) == 0 {
		return Decision{}, false
	}
	if hit, peek := d.lookup(op, now, gen); !hit || peek != 0 {
		return Decision{}, false
	}
	return decision(op, owners), true
}

// SingleChecker decides one check (a coalesce.Coalescer, a Limiter).
type SingleChecker interface {
	Check(ctx context.Context, req *Request) (Decision, error)
}

// DenialsFirst returns a checker that answers from l's denial cache what
// it can and hands the rest to next.
func (l *Limiter) DenialsFirst(next SingleChecker) SingleChecker {
	if l.denials == nil || l.denials.per == 0 {
		return next
	}
	return denialsFirst{l: l, next: next}
}

type denialsFirst struct {
	l    *Limiter
	next SingleChecker
}

func (f denialsFirst) Check(ctx context.Context, req *Request) (Decision, error) {
	if d, ok := f.l.Denied(req); ok {
		return d, nil
	}
	return f.next.Check(ctx, req)
}

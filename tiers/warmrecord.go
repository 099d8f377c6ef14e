package tiers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/golang/snappy"

	"github.com/quota-platform/quota/rules"
)

// The record codec of the warm and cold tiers, and the fixed-window rules
// both apply to a record. The cold tier stores raw itself; the warm tier
// stores the same fields as a warm value (below), without the snappy
// framing older versions wrapped around raw.
//
// raw, version 1 (7 bytes for a fresh record, 8 for a typical warm one):
//
//	offset 0  uint32 little-endian:
//	            bit 31      0 (a set bit is a future format; version 1 rejects it)
//	            bit 30      moved: frozen by a move in progress
//	            bits 0..29  Last - 2024-01-01T00:00:00Z, seconds (until 2058-01-10)
//	then      uvarint Count                 (1 byte up to 127)
//	then      uvarint MeanInterval, seconds (1 byte up to 2 min, 2 up to 4.5 h)
//	then      1 byte: age class << 5 | Samples (0..31, saturating)
//
// nothing after. The age class is 0 when Last - First is under a day, else
// c = 1..7 for an age of [2^(c-1), 2^c) days (7: 64 days or more); a decoded
// First is the latest time its class allows. There is no window index:
// rule windows are whole seconds, so floor(Last / window) is exact.
//
// The warm value is raw with its first 4 bytes as one big-endian uint32
// whose bit 31 is set: same size as raw, and its first byte is 0x80 or
// more. Versions before it stored snappy.Encode(raw), whose first byte is
// raw's length (7..25, a uvarint under 0x80) followed by snappy's literal
// tag: two bytes a cell that bought nothing on 7-9 bytes, which snappy
// cannot shorten. Those values are still read (DecodeWarmValue); any write
// of the cell replaces them with the new form. First bytes 0x1a..0x7f are
// free for a later form.
//
// Every byte counts: the value is most of what a warm cell costs beside
// its field (`make bench-memory` measures it); a listpack entry costs its
// length plus 2.

const (
	RecordEpoch     = 1_704_067_200 // 2024-01-01T00:00:00Z
	recordLastBits  = 30
	recordMaxLast   = RecordEpoch + 1<<recordLastBits - 1
	recordMovedBit  = 1 << 30
	recordFutureBit = 1 << 31
	recordMaxSample = 31
	recordMaxRaw    = 4 + 2*binary.MaxVarintLen64 + 1
	// recordEWMASpan is N of the "mean of the last N calls" the interval
	// mean follows: alpha = 2/(N+1) once there are more than (N+1)/2 samples.
	recordEWMASpan = 50
)

// ErrRecordCorrupt means stored bytes are not a record.
var ErrRecordCorrupt = errors.New("corrupt record")

// errRecordTime means a time the record cannot hold (before 2024 or after 2058).
var errRecordTime = fmt.Errorf("time outside %s .. %s",
	time.Unix(RecordEpoch, 0).UTC().Format(time.DateOnly), time.Unix(recordMaxLast, 0).UTC().Format(time.DateOnly))

// AppendRecordRaw appends the raw encoding of r (its Ref is not encoded).
func AppendRecordRaw(b []byte, r *Record) ([]byte, error) {
	if r.Last < RecordEpoch || r.Last > recordMaxLast {
		return b, fmt.Errorf("record last %d: %w", r.Last, errRecordTime)
	}
	if r.Count < 0 || r.MeanInterval < 0 || r.MeanInterval > 1<<recordLastBits || r.Samples > recordMaxSample {
		return b, fmt.Errorf("record out of range: count %d, mean interval %d, samples %d", r.Count, r.MeanInterval, r.Samples)
	}
	h := uint32(r.Last - RecordEpoch)
	if r.Moved {
		h |= recordMovedBit
	}
	b = binary.LittleEndian.AppendUint32(b, h)
	b = binary.AppendUvarint(b, uint64(r.Count))
	b = binary.AppendUvarint(b, uint64(r.MeanInterval))
	var class int
	if r.First < r.Last {
		class = min(bits.Len64(uint64((r.Last-r.First)/86400)), 7)
	}
	return append(b, byte(class<<5)|r.Samples), nil
}

// ageClassDays is the least age, in days, of an age class.
func ageClassDays(class int) int64 {
	if class == 0 {
		return 0
	}
	return 1 << (class - 1)
}

// ParseRecordRaw decodes a raw record (Ref left zero).
func ParseRecordRaw(b []byte) (Record, error) {
	var r Record
	if len(b) < 7 {
		return r, fmt.Errorf("%w: %d bytes", ErrRecordCorrupt, len(b))
	}
	h := binary.LittleEndian.Uint32(b)
	if h&recordFutureBit != 0 {
		return r, fmt.Errorf("%w: unknown format (header %#08x)", ErrRecordCorrupt, h)
	}
	r.Moved = h&recordMovedBit != 0
	r.Last = RecordEpoch + int64(h&(1<<recordLastBits-1))
	p := b[4 : len(b)-1]
	var vals [2]uint64
	for i := range vals {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return Record{}, fmt.Errorf("%w: bad varint %d", ErrRecordCorrupt, i)
		}
		vals[i] = v
		p = p[n:]
	}
	if len(p) != 0 {
		return Record{}, fmt.Errorf("%w: %d trailing bytes", ErrRecordCorrupt, len(p))
	}
	if vals[0] > 1<<62 || vals[1] > 1<<recordLastBits {
		return Record{}, fmt.Errorf("%w: value out of range", ErrRecordCorrupt)
	}
	last := b[len(b)-1]
	r.Count = int64(vals[0])
	r.MeanInterval = int64(vals[1])
	r.Samples = last & recordMaxSample
	r.First = r.Last - ageClassDays(int(last>>5))*86400
	return r, nil
}

// recordWarmBit marks a warm value's big-endian header (the warm value
// described above).
const recordWarmBit = 1 << 31

// EncodeWarmValue returns the warm-tier hash value of r: its raw encoding
// snappy-compressed when that is shorter (DESIGN.md's warm record), else
// - always, for today's 7 to 9 bytes, where snappy's 2 bytes of framing
// would cost 2 B a warm cell and jemalloc's next size class for a bucket -
// the raw encoding with the header big-endian and bit 31 set, which no
// snappy value starts with (its first byte is the decoded length, < 0x80).
func EncodeWarmValue(r *Record) ([]byte, error) {
	var buf [recordMaxRaw]byte
	raw, err := AppendRecordRaw(buf[:0], r)
	if err != nil {
		return nil, err
	}
	var zbuf [64]byte // snappy.MaxEncodedLen(recordMaxRaw) is 61
	if z := snappy.Encode(zbuf[:], raw); len(z) < len(raw) {
		return append([]byte(nil), z...), nil
	}
	h := binary.LittleEndian.Uint32(raw)
	binary.BigEndian.PutUint32(raw, h|recordWarmBit)
	return append([]byte(nil), raw...), nil
}

// DecodeWarmValue decodes a warm-tier hash value, of this version or
// snappy-framed as older versions wrote it. Any bytes that are not one
// give an error wrapping ErrRecordCorrupt, never a panic.
func DecodeWarmValue(b []byte) (Record, error) {
	if len(b) == 0 || b[0] < 0x80 {
		return decodeWarmSnappy(b)
	}
	if len(b) > recordMaxRaw {
		return Record{}, fmt.Errorf("%w: %d bytes", ErrRecordCorrupt, len(b))
	}
	var buf [recordMaxRaw]byte
	raw := buf[:len(b)]
	copy(raw, b)
	if len(raw) >= 4 {
		h := binary.BigEndian.Uint32(raw) &^ recordWarmBit
		binary.LittleEndian.PutUint32(raw, h)
	}
	return ParseRecordRaw(raw)
}

// decodeWarmSnappy decodes a warm value as versions before the current
// form wrote it: snappy.Encode(raw).
func decodeWarmSnappy(b []byte) (Record, error) {
	n, err := snappy.DecodedLen(b)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrRecordCorrupt, err)
	}
	if n > recordMaxRaw {
		return Record{}, fmt.Errorf("%w: %d bytes decoded", ErrRecordCorrupt, n)
	}
	var buf [recordMaxRaw]byte
	raw, err := snappy.Decode(buf[:], b)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrRecordCorrupt, err)
	}
	return ParseRecordRaw(raw)
}

// observe adds one call interval (seconds) to the interval mean: alpha =
// 1/n for the n-th interval while that is above 2/51 (an exact running
// mean of the first 25), then 2/51. Each step is rounded away from the old
// mean, so the mean always moves toward the sample and never sticks short
// of it through integer rounding.
func (r *Record) observe(interval int64) {
	n := int64(r.Samples) + 1
	if r.Samples < recordMaxSample {
		r.Samples++
	}
	num, den := int64(1), n
	if 2*n > recordEWMASpan+1 {
		num, den = 2, recordEWMASpan+1
	}
	d := interval - r.MeanInterval
	step := (abs64(d)*num + den - 1) / den
	if d < 0 {
		step = -step
	}
	r.MeanInterval = min(max(r.MeanInterval+step, 0), 1<<recordLastBits)
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// RecordFloorDiv is a/b rounded toward negative infinity.
func RecordFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// RecState is one cell's record while a batch of ops is decided against it.
type RecState struct {
	Rec     Record
	Present bool
}

// Used is the count of the window of nowS. A record of a later window than
// now's (a caller whose clock is a little behind the last writer's) is
// counted as current: the call is counted in the record's window.
func (s *RecState) Used(wS, nowS int64) int64 {
	if s.Present && RecordFloorDiv(s.Rec.Last, wS) >= nowS/wS {
		return s.Rec.Count
	}
	return 0
}

// count counts a call of cost at nowS.
func (s *RecState) count(ref *Ref, wS, nowS, cost int64) {
	if !s.Present {
		s.Rec = Record{Ref: *ref, Count: cost, Last: nowS, First: nowS}
		s.Present = true
		return
	}
	used := s.Used(wS, nowS)
	r := &s.Rec
	var interval int64
	if nowS > r.Last {
		interval = nowS - r.Last
		r.Last = nowS
	}
	// A record that has seen no call (a move's empty copy) was made at its
	// Last: the time since is no call interval.
	if r.Samples > 0 || r.Count > 0 {
		r.observe(interval)
	}
	r.Count = used + cost
}

// refund gives back cost counted earlier in the window of nowS (never below
// zero); it reports whether the record changed. The call statistics keep
// the call: it was made.
func (s *RecState) refund(wS, nowS, cost int64) bool {
	used := s.Used(wS, nowS)
	if used == 0 {
		return false
	}
	s.Rec.Count = max(used-cost, 0)
	return true
}

// FixedWindowSeconds validates a fixed-window cell and returns its window in seconds.
func FixedWindowSeconds(c *Cell) (int64, error) {
	if c.Algorithm != rules.FixedWindow {
		return 0, fmt.Errorf("algorithm %q is not tiered (only %s)", c.Algorithm, rules.FixedWindow)
	}
	if c.Window < time.Second || c.Window%time.Second != 0 {
		return 0, fmt.Errorf("window %s is not a whole number of seconds", c.Window)
	}
	return int64(c.Window / time.Second), nil
}

// DecideFixed decides op at now against st (one state per cell, shared
// between cells naming the same record), fills op.Out and op.Committed, and
// updates st when the op counts (or refunds). It reports whether any state
// changed. The semantics are hot_check.lua's and tiermodel.FixedWindow's: every
// cell peeks; the op counts in every cell when mode is Report, or Enforce
// and every non-shadow cell allows; each cell answers the state after the
// call when counted (or, in a dry run where every non-shadow cell allows,
// would be), else the state now.
func DecideFixed(op *Op, now time.Time, st []*RecState, tier Tier) (bool, error) {
	nowMs := now.UnixMilli()
	nowS := RecordFloorDiv(nowMs, 1000)
	if nowS < RecordEpoch || nowS > recordMaxLast {
		return false, fmt.Errorf("%s check at %s: %w", tier, now.UTC().Format(time.RFC3339), errRecordTime)
	}
	if op.Cost < 1 {
		return false, fmt.Errorf("%s check: cost %d < 1", tier, op.Cost)
	}
	if len(op.Out) != len(op.Cells) {
		op.Out = make([]Outcome, len(op.Cells))
	}
	var usedBuf [8]int64
	used := usedBuf[:0]
	all := true
	for i := range op.Cells {
		c := &op.Cells[i]
		wS, err := FixedWindowSeconds(c)
		if err != nil {
			return false, fmt.Errorf("%s check: %w", tier, err)
		}
		if st[i].Present && st[i].Rec.Moved || op.MustExist && !st[i].Present {
			return false, fmt.Errorf("%s check: %w", tier, ErrMoved)
		}
		u := st[i].Used(wS, nowS)
		used = append(used, u)
		if u+op.Cost > c.Limit && !c.Shadow {
			all = false
		}
	}
	reset := func(c *Cell) int64 { w := c.Window.Milliseconds(); return w - nowMs%w }
	if op.Mode == Refund {
		changed := false
		for i := range op.Cells {
			c := &op.Cells[i]
			wS := int64(c.Window / time.Second)
			if st[i].refund(wS, nowS, op.Cost) {
				changed = true
			}
			u := st[i].Used(wS, nowS)
			op.Out[i] = recordOutcome(u+op.Cost <= c.Limit, c.Limit-u, reset(c), tier)
		}
		op.Committed = false
		return changed, nil
	}
	commit := op.Mode == Report || (op.Mode == Enforce && all)
	post := commit || (op.Mode == DryRun && all)
	for i := range op.Cells {
		c := &op.Cells[i]
		u := used[i]
		allowed := u+op.Cost <= c.Limit
		if post {
			u += op.Cost
		}
		op.Out[i] = recordOutcome(allowed, c.Limit-u, reset(c), tier)
	}
	if commit {
		for i := range op.Cells {
			c := &op.Cells[i]
			ref := RefOf(c)
			st[i].count(&ref, int64(c.Window/time.Second), nowS, op.Cost)
		}
	}
	op.Committed = commit
	return commit && len(op.Cells) > 0, nil
}

func recordOutcome(allowed bool, remaining, resetMs int64, tier Tier) Outcome {
	o := Outcome{
		Allowed:    allowed,
		Remaining:  max(remaining, 0),
		ResetAfter: time.Duration(resetMs) * time.Millisecond,
		Tier:       tier,
	}
	if !allowed {
		o.RetryAfter = o.ResetAfter
	}
	return o
}

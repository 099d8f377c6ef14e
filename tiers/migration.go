package tiers

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/quota-platform/quota/clock"
)

// This file holds what the warm and cold tiers share with the migration
// worker: the tiering unit (a cell, without its window index), the record a
// tier keeps per cell, and the Mover interface a worker copies records with.

// CellID names a fixed-window cell across all of its windows: the MD5 of the
// cell's Identity and its window length. It is the tiering unit: a cell moves
// between tiers as a whole, and its record says which window its count is
// for. It is computed from the Cell's own fields, so a store needs no more
// than the Cell to find it.
type CellID [16]byte

const cellIDVersion = "quota/cell/1"

// CellIDOf returns the id of the cell of identity id with the given window
// length.
func CellIDOf(id Identity, window time.Duration) CellID {
	var buf [len(cellIDVersion) + len(id) + binary.MaxVarintLen64]byte
	b := append(buf[:0], cellIDVersion...)
	b = append(b, id[:]...)
	b = binary.AppendUvarint(b, uint64(window/time.Second))
	return md5.Sum(b)
}

// Ref locates one cell in every tier: what a mover must know to copy it.
type Ref struct {
	Identity Identity
	Window   time.Duration // a whole number of seconds
	Tag      Tag           // Cell.Tag: places the cell's warm bucket (and hot key) in a hash slot
	ShardKey uint64        // Cell.ShardKey: places the cell's cold row in a shard (0: from Identity)
}

// RefOf returns the Ref of a cell.
func RefOf(c *Cell) Ref {
	return Ref{Identity: c.Identity, Window: c.Window, Tag: c.Tag, ShardKey: c.ShardKey}
}

// ID returns the cell id of r.
func (r Ref) ID() CellID { return CellIDOf(r.Identity, r.Window) }

// Record is what the warm and cold tiers keep for one fixed-window cell.
//
// Count belongs to the window that holds Last: a record of an older window
// counts as 0 in the current one. Last is the unix second of the last counted
// call (for a record made by a mover from a bare count, any second inside the
// count's window). MeanInterval is the mean interval, in seconds, between the
// cell's last 50 counted calls: the exact mean of all intervals while there
// are at most 25 of them, then an exponentially weighted mean with
// alpha = 2/51 (the EWMA whose centre of mass equals that of a 50-call moving
// mean), kept in O(1) space. Samples counts the intervals seen, saturating at
// 31. First is the unix second of the first counted call; once stored it
// is coarse (the record keeps its age as a power-of-two class of days).
type Record struct {
	Ref
	Count        int64
	Last         int64
	First        int64
	MeanInterval int64
	Samples      uint8
	// Moved marks a record frozen by a move in progress: a check that finds
	// it fails with ErrMoved instead of counting ("look elsewhere").
	Moved bool
}

// Index is the window index Count belongs to.
func (r *Record) Index() int64 { return RecordFloorDiv(r.Last, int64(r.Window/time.Second)) }

// NewerThan reports whether r must win over o when both describe r's cell
// (o's Ref is not consulted: a record read from a tier has none): r is of a
// later window, or of the same window and not older by Last. Ties go to r,
// so re-importing a final copy over an earlier copy of the same second
// replaces it.
func (r *Record) NewerThan(o *Record) bool {
	w := int64(r.Window / time.Second)
	ri, oi := RecordFloorDiv(r.Last, w), RecordFloorDiv(o.Last, w)
	if ri != oi {
		return ri > oi
	}
	return r.Last >= o.Last
}

// Mover is how records leave and enter a tier; the tiers' move sides
// (MoveSide, migrate/PROTOCOL.md) drive them around the freeze and the
// directory switch. All three calls are batched (one pipeline or a few
// multi-row statements per call, whatever the number of refs) and safe to
// repeat.
type Mover interface {
	Tier() Tier
	// Export returns the records held for refs, in refs order; refs the tier
	// holds nothing for are left out.
	Export(ctx context.Context, refs []Ref) ([]Record, error)
	// Import writes records, each unless the tier already holds a record
	// for that cell that wins over it (Record.NewerThan): "insert if newer".
	// It never adds counts together, so importing the same records twice
	// leaves the same state as importing them once.
	Import(ctx context.Context, recs []Record) error
	// Delete removes the records of refs; missing ones are no error.
	Delete(ctx context.Context, refs []Ref) error
}

// ErrContention means a check gave up after its compare-and-set kept
// losing to concurrent writers of the same cells; nothing was counted.
var ErrContention = errors.New("too much contention on a cell")

// ErrMoved means a check found a record frozen by a move in progress; nothing
// was counted (the router retries such cells where the directory then
// points: the move's destination).
var ErrMoved = errors.New("cell is being moved")

// Backoff sleeps before attempt (2, 3, ...): full jitter over 50 µs * 2^n,
// capped at 5 ms.
func Backoff(ctx context.Context, attempt int) error {
	d := min(50*time.Microsecond<<min(attempt, 10), 5*time.Millisecond)
	return clock.Sleep(ctx, d/2+rand.N(d/2+1))
}

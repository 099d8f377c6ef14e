// Package tiers is the model the tiers that store limit counters share.
// Three tiers implement one Store interface: hot (expanded Redis keys,
// package hot), warm (compressed Redis hashes, package warm, whose buckets
// are also the directory of where each cell lives) and cold (sharded
// MySQL, package cold); a check gives the same answer whichever holds it.
// Package routing decides checks over all three. This package holds what
// they share: the Store interface and its Op, Cell and Outcome, counter
// identities, cold shards, the Ref and Record a move copies (and the
// record's encoding), and the Mover and MoveSide interfaces.
package tiers

import (
	"context"
	"errors"
	"time"

	"github.com/quota-platform/quota/rules"
)

// Tier names where a counter lives.
type Tier string

// The tiers.
const (
	Hot  Tier = "hot"
	Warm Tier = "warm"
	Cold Tier = "cold"
)

// Mode says what a check does with its cost.
type Mode uint8

// The modes. Their values are part of the Lua scripts' ARGV.
const (
	Enforce Mode = iota // count the cost only if every non-shadow cell allows it
	DryRun              // decide, count nothing
	Report              // count the cost unconditionally, never deny
	Refund              // give back a cost counted earlier (compensation)
)

// Cell is one limit of one rule for one identity: the unit a store decides.
type Cell struct {
	Algorithm rules.Algorithm
	Limit     int64
	Window    time.Duration
	Shadow    bool // counted and reported, never denies
	Identity  Identity
	Key       CounterKey
	// ID is a fixed_window cell's CellIDOf(Identity, Window) when its
	// maker computed it with Key (the limiter does), so that the directory
	// and the activity count do not hash it again; zero: not computed.
	ID  CellID
	Tag Tag
	// ShardKey places the cell in a cold-tier shard: ShardKeyOf(app_id,
	// user_id) (app_id alone for rules without user_id). Zero means "derive
	// it from Identity" (rules with neither dimension).
	ShardKey uint64
}

// CellID is the cell's id (CellIDOf), computed only when ID is unset.
func (c *Cell) CellID() CellID {
	if c.ID != (CellID{}) {
		return c.ID
	}
	return CellIDOf(c.Identity, c.Window)
}

// Outcome is a store's answer for one cell.
type Outcome struct {
	Allowed    bool
	Remaining  int64
	ResetAfter time.Duration // fixed/token/min_interval: until back to the full limit; sliding: until the oldest counted call leaves the window
	RetryAfter time.Duration // until a denied call of the same cost could pass; 0 when allowed
	Tier       Tier
}

// Op is one check against a store: its cells, cost and mode in, one
// Outcome per cell and whether anything was counted out.
type Op struct {
	Cost      int64
	Mode      Mode
	Cells     []Cell
	Out       []Outcome // len(Cells), filled by the store
	Committed bool      // the cost was counted in every cell
	// MustExist (set by the Router on the parts it sends to warm and cold)
	// makes a cell without a record fail with ErrMoved instead of starting
	// one: the directory said the record was there, so it has moved since.
	MustExist bool
	// Records, when the caller makes it len(Cells) long, is filled by the
	// cold store with each cell's record as the check left it: the Router
	// hands it to Observe, so the on-call migration decides on the record
	// the check read instead of reading it again.
	Records []Record

	// Route (set by the hot store for a Router, package routing) is, per
	// cell, where the hot script found it; nil: all hot.
	Route []Route
	// NotCold, per cell, is the cold filter version at which the router
	// found the cell's cold row missing ("" or nil: not looked up): the
	// hot script then counts the cell as new if the filter has not changed
	// since (tiers/warm/coldfilter.go). It survives the op being sent again.
	NotCold []string
}

// NotColdAt is op.NotCold[i], or "".
func (o *Op) NotColdAt(i int) string {
	if o.NotCold == nil {
		return ""
	}
	return o.NotCold[i]
}

// Route is where the hot script's directory lookup found a cell.
type Route struct {
	Where int8   // RouteHot, RouteWarm, RouteMoving, RouteUnknown
	Raw   string // the warm record (RouteWarm) or the cold filter's version (RouteUnknown)
}

// The values of Route.Where (the negated codes of hot_check.lua's reply).
const (
	RouteHot     = 0
	RouteWarm    = 1
	RouteMoving  = 2
	RouteUnknown = 4 // the cold filter says it may be cold: the cold tier says whether
)

// ResetOut makes Out one zero Outcome per cell, in Out's own array when it
// is long enough (the limiter's ops bring one: no allocation a check).
func (o *Op) ResetOut() {
	if cap(o.Out) < len(o.Cells) {
		o.Out = make([]Outcome, len(o.Cells))
		return
	}
	o.Out = o.Out[:len(o.Cells)]
	clear(o.Out)
}

// Allowed reports whether the op's call may go through: every non-shadow
// cell allowed it, or the op was a report.
func (o *Op) Allowed() bool {
	if o.Mode == Report {
		return true
	}
	for i := range o.Out {
		if !o.Out[i].Allowed && !o.Cells[i].Shadow {
			return false
		}
	}
	return true
}

// Store decides ops against one tier. Ops are decided in order, each as if
// sent alone; within an op, cells are all-or-nothing: in Enforce mode the
// cost is counted in every cell or in none.
type Store interface {
	Tier() Tier
	Check(ctx context.Context, now time.Time, ops []*Op) error
}

// ErrUnavailable wraps errors that mean the store could not be reached, as
// opposed to a bad request.
var ErrUnavailable = errors.New("store unavailable")

// ErrColdUnavailable marks (with ErrUnavailable) a cold-tier MySQL shard
// that could not answer. A Breaker does not open on it: one shard down
// must leave every check that does not need that shard decided (the
// router reaches the cold tier only after Redis answered), while the
// checks that need it answer per the fail mode.
var ErrColdUnavailable = errors.New("cold shard unavailable")

// FixedPeek is one fixed_window cell of a denied op whose count is read
// without deciding anything: the op is denied by another cell, so it
// counts nothing and this cell's answer depends on its count alone
// (limiter.Denials).
type FixedPeek struct {
	Op   *Op
	Cell int // index into Op.Cells; its answer goes to Op.Out[Cell]
	// Found: the cell's counter was read where a check would have read it
	// (a hot key), and Op.Out[Cell] is its answer. Otherwise (no key: a new
	// cell, or one placed in another tier) only a check can answer it.
	Found bool
}

// FixedPeeker reads fixed-window cells' counts in one round trip (one a
// master on a Redis Cluster), for denials whose other cells are answered
// without the store. An error leaves every peek not Found; ErrCannotPeek
// says that none ever will be (a wrapper whose store reads none).
type FixedPeeker interface {
	PeekFixed(ctx context.Context, now time.Time, peeks []FixedPeek) error
}

// ErrCannotPeek is a FixedPeeker's error when it never reads peeks.
var ErrCannotPeek = errors.New("this store does not read fixed-window counts alone")

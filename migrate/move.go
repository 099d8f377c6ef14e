// Package migrate moves fixed-window cells between the hot, warm and cold
// tiers (PROTOCOL.md): MoveCells moves one batch under leases with a
// journal, Repair rolls forward the moves a crashed worker left. What to
// move is migrate/worker's choice (scheduled cycles and on-call
// promotions).
package migrate

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/faultpoint"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tiers/warm"
)

// Step is a step of a move, in order (PROTOCOL.md).
type Step int

// The steps.
const (
	StepJournal Step = iota + 1 // the batch is written to the journal
	StepFreeze                  // the sources are frozen (directory "moving")
	StepCopy                    // the frozen state is copied to the destination
	StepSwitch                  // the directory names the destination
	StepDelete                  // the sources are deleted
	StepDone                    // the journal entries are removed
	// StepQuietCopy: the records of quiet cells are written, before their
	// switch (moveQuietToCold, which has no other step).
	StepQuietCopy
)

func (s Step) String() string {
	names := [...]string{"?", "journal", "freeze", "copy", "switch", "delete", "done", "quiet-copy"}
	if s < 0 || int(s) >= len(names) {
		return "?"
	}
	return names[s]
}

// Mover moves batches of cells. Its fields are set once, before use.
type Mover struct {
	RDB    redis.UniversalClient
	Prefix string // of the journal and lease keys (the service's key prefix)
	Hot    *hot.Mover
	Warm   *warm.Store
	Cold   *cold.Store // nil: moves to or from cold fail
	// LeaseTTL bounds how long a crashed worker's cells stay frozen
	// before another worker's Repair finishes their move; the worker
	// renews its leases every LeaseTTL/4 while a batch runs, so a batch
	// may take longer. 0: 10 s.
	LeaseTTL time.Duration
	// Faults, set by tests only, stops a move after a chosen step
	// (faultpoint.Points.AfterMoveStep).
	Faults  faultpoint.Points
	Metrics *Metrics
	// ColdHints, when set (the router's), learns the cells moved to cold,
	// so that their next checks in this process skip the cold-row lookup,
	// and forgets those moved out of it.
	ColdHints *routing.ColdHints
	// MovedFromHot, when set, is called after cells moved out of the hot
	// tier: a denial cached with a hot cell's answer says "hot" no more
	// (limiter.Denials; denysync).
	MovedFromHot func()
}

// ErrLeased is reported (joined) for cells another worker is moving.
var ErrLeased = errors.New("cell is leased by another worker")

func (m *Mover) journalKey() string { return m.Prefix + "mig:journal" }

// now is the hot tier's clock (hot.Mover.Now).
func (m *Mover) now() time.Time {
	if m.Hot.Now != nil {
		return m.Hot.Now()
	}
	return time.Now()
}

func (m *Mover) leaseTTL() time.Duration {
	if m.LeaseTTL > 0 {
		return m.LeaseTTL
	}
	return 10 * time.Second
}

// EncodeRef is a Ref as a journal field and cell_activity.ref: identity, tag, shard key, window.
func EncodeRef(r *tiers.Ref) string {
	var b [MaxRefLen]byte
	return string(AppendRef(b[:0], r))
}

// MaxRefLen is the longest EncodeRef.
const MaxRefLen = 16 + 3 + 8 + binary.MaxVarintLen64

// AppendRef appends EncodeRef(r) to b.
func AppendRef(b []byte, r *tiers.Ref) []byte {
	b = append(b, r.Identity[:]...)
	b = append(b, r.Tag[:]...)
	b = binary.BigEndian.AppendUint64(b, r.ShardKey)
	return binary.AppendUvarint(b, uint64(r.Window/time.Second))
}

// DecodeRef is the Ref EncodeRef made s of.
func DecodeRef(s string) (tiers.Ref, error) {
	var r tiers.Ref
	if len(s) < 28 {
		return r, fmt.Errorf("journal field of %d bytes", len(s))
	}
	copy(r.Identity[:], s[:16])
	copy(r.Tag[:], s[16:19])
	r.ShardKey = binary.BigEndian.Uint64([]byte(s[19:27]))
	w, n := binary.Uvarint([]byte(s[27:]))
	if n <= 0 {
		return r, errors.New("journal field: bad window")
	}
	r.Window = time.Duration(w) * time.Second
	return r, nil
}

// step marks the end of a step; an error from the fault points stops the
// move there as a crash would (errStopped: the leases are abandoned).
func (m *Mover) step(s Step) error {
	if m.Faults == nil {
		return nil
	}
	if err := m.Faults.AfterMoveStep(int(s)); err != nil {
		return fmt.Errorf("%w after %s: %w", errStopped, s, err)
	}
	return nil
}

// Result says what MoveCells did.
type Result struct {
	Moved   []tiers.Ref // now in the destination (moved by this call)
	Quiet   int         // of Moved, the first ones, moved hot>cold by the quiet move (PROTOCOL.md)
	Idle    int         // of Quiet, the first ones, idle cells
	Skipped int         // leased by another worker, or not in the source tier
}

// MoveCells moves refs from one tier to another (PROTOCOL.md): lease,
// journal, freeze, copy, switch, delete, one batched round of each for the
// whole batch. Cells another worker holds, or that are not in from, are
// skipped. It is safe to call again with the same refs after any failure:
// it continues each cell from the step its directory shows.
func (m *Mover) MoveCells(ctx context.Context, refs []tiers.Ref, from, to tiers.Tier) (Result, error) {
	return m.moveCells(ctx, refs, from, to, moveOpts{})
}

// Plan is what the scheduled cycle knows of a batch it moves: moveOpts'
// capacity and states.
type Plan struct {
	Capacity func(tiers.Tag) int
	States   []hot.State
}

// MoveCellsPlanned is MoveCells with what the scheduled cycle knows of
// the batch (Plan).
func (m *Mover) MoveCellsPlanned(ctx context.Context, refs []tiers.Ref, from, to tiers.Tier, p Plan) (Result, error) {
	return m.moveCells(ctx, refs, from, to, moveOpts{capacity: p.Capacity, states: p.States})
}

// moveOpts are what Repair and the scheduled cycle know of a batch.
type moveOpts struct {
	// journaled (Repair): move only the cells whose journal entry still
	// reads from>to once their lease is held. Repair's snapshot of the
	// journal may be stale by then: the move may have been finished (by
	// its worker or another Repair) and even reversed since, and rolling
	// it forward again would move a cell nobody asked to move. The check
	// is sound under the lease: only a lease holder writes or removes a
	// cell's journal entry.
	journaled bool
	// capacity (the scheduled cycle's) estimates per tag how many cells
	// are still to go cold, so that a tag's cold filter gets a layer of
	// that size at once rather than many small ones
	// (warm.Store.SwitchToCold).
	capacity func(tiers.Tag) int
	// states (the scheduled cycle's), per ref, where the cells of a move
	// hot>cold stood when it read the directory (hot.Mover.States);
	// nil: read here.
	states []hot.State
}

// moveCells is MoveCells with what the caller knows of the batch.
func (m *Mover) moveCells(ctx context.Context, refs []tiers.Ref, from, to tiers.Tier, o moveOpts) (Result, error) {
	var res Result
	if from == to || len(refs) == 0 {
		return res, nil
	}
	src, err := m.side(from)
	if err != nil {
		return res, err
	}
	dst, err := m.side(to)
	if err != nil {
		return res, err
	}
	if from == tiers.Hot && to == tiers.Cold && !o.journaled {
		// Not for Repair: the full path removes its journal entries.
		q, err := m.moveQuietToCold(ctx, refs, o.states, o.capacity)
		if err != nil {
			m.Metrics.failed()
			return res, err
		}
		res.Moved, res.Quiet, res.Idle = q.moved, len(q.moved), q.idle
		m.Metrics.moved(from, to, len(q.moved))
		m.Metrics.movedQuiet(len(q.moved), q.idle)
		m.hint(q.moved, from, to)
		if refs = q.rest; len(refs) == 0 {
			return res, nil
		}
	}
	held, err := m.lease(ctx, refs)
	if err != nil {
		m.Metrics.failed()
		return res, err
	}
	got := held.refs
	res.Skipped = len(refs) - len(got)
	stopped := false
	defer func() {
		if stopped {
			held.abandon() // a simulated crash keeps its leases
		} else {
			held.release()
		}
	}()
	if o.journaled && len(got) > 0 {
		// Cells whose move is over are neither moved nor skipped here.
		if got, err = m.stillJournaled(ctx, got, from, to); err != nil {
			m.Metrics.failed()
			return res, err
		}
	}
	if len(got) == 0 {
		return res, nil
	}
	moved, err := m.move(ctx, held, got, src, dst, o.capacity)
	if err != nil {
		stopped = errors.Is(err, errStopped)
		m.Metrics.failed()
		return res, err
	}
	res.Moved = append(res.Moved, moved...)
	res.Skipped += len(got) - len(moved)
	m.Metrics.moved(from, to, len(moved))
	m.hint(moved, from, to)
	if from == tiers.Hot && len(moved) > 0 && m.MovedFromHot != nil {
		m.MovedFromHot()
	}
	return res, nil
}

// hint tells ColdHints about cells moved to or from cold.
func (m *Mover) hint(moved []tiers.Ref, from, to tiers.Tier) {
	if m.ColdHints == nil || from != tiers.Cold && to != tiers.Cold {
		return
	}
	for i := range moved {
		if id := moved[i].ID(); to == tiers.Cold {
			m.ColdHints.Add(id)
		} else {
			m.ColdHints.Forget(id)
		}
	}
}

var errStopped = errors.New("move stopped at a fault point")

// move runs the steps for the cells held leases. Before each step that
// changes anything it drops the cells whose lease is no longer this
// worker's: a worker that stalled past its lease (a long GC pause, SIGSTOP,
// a hung network) may wake up after another worker's Repair has finished
// the move and the cell has counted calls, or moved again, since; its
// steps would then copy stale state over the new, or delete live counters.
// (A stall in the moment between that check and the step is not covered;
// the switch is a compare-and-set from the frozen state, which such a
// worker cannot win.)
func (m *Mover) move(ctx context.Context, held *leases, refs []tiers.Ref, src, dst tiers.MoveSide, capacity func(tiers.Tag) int) ([]tiers.Ref, error) {
	to := dst.Tier()
	dir := string(src.Tier()) + ">" + string(to)
	// Journal first: from here on a crash is repaired by Repair.
	vals := make([]any, 0, 2*len(refs))
	for i := range refs {
		vals = append(vals, EncodeRef(&refs[i]), dir)
	}
	if err := m.RDB.HSet(ctx, m.journalKey(), vals...).Err(); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if err := m.step(StepJournal); err != nil {
		return nil, err
	}
	fz, err := src.Freeze(ctx, held.owned, refs)
	if err != nil {
		return nil, err
	}
	if err := m.step(StepFreeze); err != nil {
		return nil, err
	}
	// Cells already in the destination (a re-run after the switch) only
	// need their sources deleted; others are not this move's business
	// (in a third tier, or frozen by another move) and their journal
	// entries go.
	var done []tiers.Ref
	for i, r := range fz.Left {
		if fz.LeftIn[i] == to {
			done = append(done, r)
		}
	}
	// Copy the frozen state of the cells whose leases are still ours: a
	// worker that stalled since the freeze may find another worker's
	// Repair has finished the move (and the cell counted since).
	active, frozen, recs, err := stillHeld(ctx, held, fz)
	if err != nil {
		return nil, err
	}
	full := m.copies(active, recs)
	if err := dst.Import(ctx, full); err != nil {
		return nil, err
	}
	if err := m.step(StepCopy); err != nil {
		return nil, err
	}
	// Switch, from the frozen values.
	if kept, err := held.owned(ctx, active); err != nil {
		return nil, err
	} else if len(kept) != len(active) {
		return nil, fmt.Errorf("switch: %d of %d cells' leases lapsed during the copy", len(active)-len(kept), len(active))
	}
	if err := dst.Switch(ctx, active, frozen, full, capacity); err != nil {
		return nil, err
	}
	if err := m.step(StepSwitch); err != nil {
		return nil, err
	}
	// Delete the sources.
	del, err := held.owned(ctx, append(append([]tiers.Ref(nil), active...), done...))
	if err != nil {
		return nil, err
	}
	if err := src.Delete(ctx, del); err != nil {
		return nil, err
	}
	if err := m.step(StepDelete); err != nil {
		return nil, err
	}
	if err := m.RDB.HDel(ctx, m.journalKey(), journalFields(refs)...).Err(); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return append(active, done...), nil
}

// journalFields are refs' fields in the journal.
func journalFields(refs []tiers.Ref) []string {
	fields := make([]string, len(refs))
	for i := range refs {
		fields[i] = EncodeRef(&refs[i])
	}
	return fields
}

// copies returns the destination's record of each of refs: its exported
// record with Moved cleared, or an empty one (the directory (warm) and
// routed checks (cold) need the cell to exist).
func (m *Mover) copies(refs []tiers.Ref, recs []tiers.Record) []tiers.Record {
	// By value, not by ID (an MD5 a cell): the batch's cells are distinct
	// (a lease each) and every record carries the ref it was exported for.
	byRef := make(map[tiers.Ref]*tiers.Record, len(recs))
	for i := range recs {
		recs[i].Moved = false
		byRef[recs[i].Ref] = &recs[i]
	}
	nowS := m.now().Unix()
	full := make([]tiers.Record, len(refs))
	for i := range refs {
		if r, ok := byRef[refs[i]]; ok {
			full[i] = *r
		} else {
			full[i] = tiers.Record{Ref: refs[i], Last: nowS, First: nowS}
		}
	}
	return full
}

// stillJournaled returns the refs whose journal entry reads from>to.
func (m *Mover) stillJournaled(ctx context.Context, refs []tiers.Ref, from, to tiers.Tier) ([]tiers.Ref, error) {
	vals, err := m.RDB.HMGet(ctx, m.journalKey(), journalFields(refs)...).Result()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	dir := string(from) + ">" + string(to)
	var out []tiers.Ref
	for i, v := range vals {
		if s, ok := v.(string); ok && s == dir {
			out = append(out, refs[i])
		}
	}
	return out, nil
}

// stillHeld keeps the frozen cells (with their directory values and
// records) whose leases are still the worker's.
func stillHeld(ctx context.Context, held *leases, fz tiers.Frozen) ([]tiers.Ref, []string, []tiers.Record, error) {
	kept, err := held.owned(ctx, fz.Refs)
	if err != nil || len(kept) == len(fz.Refs) {
		return kept, fz.Old, fz.Recs, err
	}
	in := refSet(kept)
	var old []string
	for i, r := range fz.Refs {
		if in[r] {
			old = append(old, fz.Old[i])
		}
	}
	var recs []tiers.Record
	for i := range fz.Recs {
		if in[fz.Recs[i].Ref] {
			recs = append(recs, fz.Recs[i])
		}
	}
	return kept, old, recs, nil
}

// Repair rolls forward every move in the journal whose lease has lapsed
// (a crashed worker's); moves still leased are left to their worker. It
// returns how many cells it finished and how many it left.
func (m *Mover) Repair(ctx context.Context) (repaired, left int, err error) {
	all, err := m.RDB.HGetAll(ctx, m.journalKey()).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("journal: %w", err)
	}
	groups := map[string][]tiers.Ref{}
	for f, v := range all {
		r, err := DecodeRef(f)
		if err != nil {
			return repaired, left, err
		}
		groups[v] = append(groups[v], r)
	}
	var errs []error
	for dir, refs := range groups {
		from, to, ok := strings.Cut(dir, ">")
		if !ok {
			errs = append(errs, fmt.Errorf("journal: bad direction %q", dir))
			continue
		}
		res, err := m.moveCells(ctx, refs, tiers.Tier(from), tiers.Tier(to), moveOpts{journaled: true})
		repaired += len(res.Moved)
		left += res.Skipped
		if err != nil {
			errs = append(errs, err)
		}
	}
	return repaired, left, errors.Join(errs...)
}

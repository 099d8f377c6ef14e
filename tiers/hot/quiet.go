package hot

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// Quiet cells: a hot fixed-window cell with no directory field and no cold
// filter bit, whose counter of the next window does not exist, holds at
// most one count: its counter of this window (none: idle, at 0). Package
// migrate moves such cells to cold without a journal or a freeze
// (migrate/PROTOCOL.md, "Quiet cells"): it writes the cold record of that
// count (QuietRecords), then switches the cells (SwitchQuietToCold: the
// directory check, the check that the counters still hold what was read,
// their delete and the filter write in one atomic step), and deletes the
// records of the cells that did not switch while nothing has counted in
// them.

//go:embed hot_state.lua
var hotStateSource string

var hotStateScript = warm.DirScript(hotStateSource)

// State is where a cell stands for a move out of hot (States).
type State struct {
	Dir       string // its directory field ("" = none)
	Counting  bool   // no field, and a counter of this window or the next exists
	MaybeCold bool   // no field, no counter, and its tag's cold filter may hold it
	// Count is the value of the counter of this window of a quiet cell
	// that has one (Quiet and Counting); Window is the index of the window
	// States read.
	Count  string
	Window int64
	// Held: idle, and States wrote its counter of Window as 0 (holdIdle),
	// which its switch then expects.
	Held bool
	// The cell's directory location and counter keys of Window and the
	// next, as States computed them (an MD5 each): SwitchQuietToCold uses
	// them again while the window is the same. Nil in a State made
	// elsewhere: computed then. Pointers into States' slices keep a state,
	// which the mover copies several times, small.
	loc  *warm.DirLoc
	live *warm.CellCounters
}

// Idle reports whether the cell has no field, no counter and no filter
// bit: hot, at 0.
func (s *State) Idle() bool { return s.Dir == "" && !s.Counting && !s.MaybeCold }

// WindowEnd is the end of the window States read r in (Window).
func (s *State) WindowEnd(r *tiers.Ref) time.Time {
	return time.UnixMilli((s.Window + 1) * r.Window.Milliseconds())
}

// Quiet reports whether the cell has no field, no filter bit and no
// counter of the next window: hot, holding Count (idle when not Counting).
func (s *State) Quiet() bool { return s.Idle() || s.Count != "" }

// States reads where each of refs stands (hot_state.lua): one script call
// on a single Redis, one per tag on a cluster. Advice only: the moves
// check again (SwitchQuietToCold, FreezeExport). An idle cell i with
// holdIdle[i] (nil: none) is held: its counter of the window is written
// as 0, so that checks count in hot until its switch (migrate/PROTOCOL.md,
// "Quiet cells").
func (m *Mover) States(ctx context.Context, refs []tiers.Ref, holdIdle []bool) ([]State, error) {
	now := m.now()
	locs, live, idx := m.cellKeys(refs, now)
	calls := m.Warm.DirCalls(locs)
	// A hold's TTL, to its window's end, by window: no jitter, as a hold
	// lasts until its switch, not its window, but for a stopped move.
	holdTTL := map[time.Duration]string{}
	for ci := range calls {
		c := &calls[ci]
		counts := c.ByHeader()
		args := make([]any, 0, 1+len(counts)+2*len(c.At))
		args = append(args, len(counts))
		for _, n := range counts {
			args = append(args, n)
		}
		c.Keys = slices.Grow(c.Keys, 2*len(c.At))
		for k, at := range c.At {
			hold := ""
			if w := refs[at].Window; holdIdle != nil && holdIdle[at] {
				if hold = holdTTL[w]; hold == "" {
					hold = strconv.FormatInt(untilWindowEnd(now.UnixMilli(), w.Milliseconds()), 10)
					holdTTL[w] = hold
				}
			}
			args = append(args, c.Args[2*k+1], hold)
			c.Keys = append(c.Keys, live[at].Cur, live[at].Next)
		}
		c.Args = args
	}
	vals, err := warm.PerCell(ctx, m.Hot.rdb, hotStateScript, calls, len(refs))
	if err != nil {
		return nil, fmt.Errorf("hot state: %w", err)
	}
	out := make([]State, len(refs))
	for i, v := range vals {
		s := &out[i]
		s.Window, s.loc, s.live = idx[i], &locs[i], &live[i]
		switch v := v.(type) {
		case string:
			s.Dir = v
		case int64:
			s.Counting, s.MaybeCold = v == 2, v == 1
			s.Held = v == 0 && holdIdle != nil && holdIdle[i]
		case []any:
			n, ok := v[0].(string)
			if len(v) != 1 || !ok || n == "" {
				return nil, fmt.Errorf("hot state: unexpected answer %v", v)
			}
			s.Counting, s.Count = true, n
		default:
			return nil, fmt.Errorf("hot state: unexpected answer %v", v)
		}
	}
	return out, nil
}

// SwitchQuietToCold switches each of refs to cold if it is still as
// States read it (states[i], Quiet): its field absent, its counter of this
// window holding Count (absent for an idle cell, 0 for a held one) and
// none of the next, checked in the script that deletes the counter and
// adds the cell to its tag's cold filter (cold_switch.lua). A cell with a
// count, or held, is not tried once the window States read has passed:
// its record is of that window, or its 0 is gone. capacity is
// SwitchToCold's. It reports per ref whether it switched.
func (m *Mover) SwitchQuietToCold(ctx context.Context, refs []tiers.Ref, states []State, capacity func(tiers.Tag) int) ([]bool, error) {
	now := m.now()
	locs := make([]warm.DirLoc, 0, len(refs))
	live := make([]warm.CellCounters, 0, len(refs))
	swaps := make([]warm.DirSwap, 0, len(refs))
	var tried []int // indexes into refs
	for i := range refs {
		s := &states[i]
		idx := now.UnixMilli() / refs[i].Window.Milliseconds()
		if (s.Count != "" || s.Held) && s.Window != idx {
			continue
		}
		var loc warm.DirLoc
		var cnt warm.CellCounters
		if s.loc != nil && s.Window == idx {
			loc, cnt = *s.loc, *s.live
		} else {
			// A state made elsewhere, or an idle cell read in a window
			// that has passed: its counters of now's window are the
			// ones that must not exist.
			id := refs[i].ID()
			loc = m.Warm.LocateCell(id, refs[i].Tag)
			cnt.Cur, cnt.Next, _ = m.keys(id, &refs[i], now)
		}
		cnt.Want = s.Count
		if s.Held {
			cnt.Want = "0"
		}
		locs, live = append(locs, loc), append(live, cnt)
		swaps = append(swaps, warm.DirSwap{Ref: refs[i]})
		tried = append(tried, i)
	}
	ok, err := m.Warm.SwitchToColdWith(ctx, swaps, locs, live, capacity)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(refs))
	for k, i := range tried {
		out[i] = ok[k]
	}
	return out, nil
}

// cellKeys returns each ref's directory location, its counter keys of the
// window of now and the next, and that window's index (one cell id, an
// MD5, a ref).
func (m *Mover) cellKeys(refs []tiers.Ref, now time.Time) ([]warm.DirLoc, []warm.CellCounters, []int64) {
	locs := make([]warm.DirLoc, len(refs))
	live := make([]warm.CellCounters, len(refs))
	idx := make([]int64, len(refs))
	for i := range refs {
		id := refs[i].ID()
		locs[i] = m.Warm.LocateCell(id, refs[i].Tag)
		live[i].Cur, live[i].Next, idx[i] = m.keys(id, &refs[i], now)
	}
	return locs, live, idx
}

// QuietRecords returns the cold record of each of refs as a quiet cell
// (states[i], Quiet). A count's is of the window States read, with Last
// that window's first second: a copy of the counter, which loses to any
// later copy of the cell's state (Record.NewerThan), even one an instance
// whose clock is behind makes in the same window; so a record a stopped
// quiet move left (PROTOCOL.md) never wins over the cell's next move into
// cold. An idle cell's counts 0, of the window before now's: a record of
// the current window (what a move of a counting cell imports) is newer, so
// an import never keeps an idle record over a count, and a check finds its
// count 0 in the current window, which is what the cell held.
func (m *Mover) QuietRecords(refs []tiers.Ref, states []State) ([]tiers.Record, error) {
	nowS := tiers.RecordFloorDiv(m.now().UnixMilli(), 1000)
	out := make([]tiers.Record, len(refs))
	for i := range refs {
		wS := int64(refs[i].Window / time.Second)
		if s := &states[i]; s.Count != "" {
			// The counter's record as a move's copy makes it, dated the
			// window's first second.
			// A calendar period is the window [0, end) (limiter): its
			// first second is dated the records' epoch, still inside it.
			rec, err := hotRecord(&refs[i], s.Window, false, time.Unix(max(s.Window*wS, tiers.RecordEpoch), 0), s.Count)
			if err != nil {
				return nil, fmt.Errorf("quiet record: %w", err)
			}
			out[i] = rec
			continue
		}
		last := max((tiers.RecordFloorDiv(nowS, wS)-1)*wS, tiers.RecordEpoch)
		out[i] = tiers.Record{Ref: refs[i], Last: last, First: last}
	}
	return out, nil
}

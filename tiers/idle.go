package tiers

import (
	"context"
	_ "embed"
	"fmt"
	"time"
)

// Idle cells: a hot fixed-window cell whose counters of this window and
// the next do not exist, with no directory field and no cold filter bit,
// holds nothing (its count is 0). Package migrate moves such cells to cold
// without a lease, a journal or a freeze (migrate/PROTOCOL.md, "Idle
// cells"): it inserts an empty record for each where the cell has no row,
// then switches them (SwitchIdleToCold: the directory check, the counter
// check and the filter write in one atomic step), and deletes the records
// of the cells that did not switch while nothing has counted in them.

//go:embed hot_state.lua
var hotStateSource string

var hotStateScript = dirScript(hotStateSource)

// HotState is where a cell stands for a move out of hot (States).
type HotState struct {
	Dir       string // its directory field ("" = none)
	Counting  bool   // no field, and a counter of this window or the next exists
	MaybeCold bool   // no field, no counter, and its tag's cold filter may hold it
}

// Idle reports whether the cell has no field, no counter and no filter
// bit: hot, at 0.
func (s HotState) Idle() bool { return s.Dir == "" && !s.Counting && !s.MaybeCold }

// States reads where each of refs stands (hot_state.lua): one script call
// on a single Redis, one per tag on a cluster. Advice only: the moves
// check again (SwitchIdleToCold, FreezeExport).
func (m *HotMover) States(ctx context.Context, refs []Ref) ([]HotState, error) {
	locs, live := m.cellKeys(refs)
	calls := m.Warm.dirCalls(locs)
	for ci := range calls {
		c := &calls[ci]
		c.Args = append([]any{len(c.Keys)}, c.Args...)
		for _, at := range c.at {
			c.Keys = append(c.Keys, live[at][0], live[at][1])
		}
	}
	vals, err := perCell(ctx, m.Hot.rdb, hotStateScript, calls, len(refs))
	if err != nil {
		return nil, fmt.Errorf("hot state: %w", err)
	}
	out := make([]HotState, len(refs))
	for i, v := range vals {
		switch v := v.(type) {
		case string:
			out[i].Dir = v
		case int64:
			out[i].Counting, out[i].MaybeCold = v == 2, v == 1
		default:
			return nil, fmt.Errorf("hot state: unexpected answer %v", v)
		}
	}
	return out, nil
}

// SwitchIdleToCold switches each of refs to cold if it is still idle: its
// field absent and neither counter existing, checked in the script that
// adds it to its tag's cold filter (cold_switch.lua). capacity is
// SwitchToCold's. It reports per ref whether it switched.
func (m *HotMover) SwitchIdleToCold(ctx context.Context, refs []Ref, capacity func(Tag) int) ([]bool, error) {
	swaps := make([]DirSwap, len(refs))
	for i := range refs {
		swaps[i].Ref = refs[i]
	}
	locs, live := m.cellKeys(refs)
	return m.Warm.switchToCold(ctx, swaps, locs, live, capacity)
}

// cellKeys returns each ref's directory location and its live counter
// keys of this window and the next (one cell id, an MD5, a ref).
func (m *HotMover) cellKeys(refs []Ref) ([]warmLoc, [][2]string) {
	now := m.now()
	locs := make([]warmLoc, len(refs))
	live := make([][2]string, len(refs))
	for i := range refs {
		id := refs[i].ID()
		locs[i] = m.Warm.locateCell(id, refs[i].Tag)
		cur, next, _ := m.keys(id, &refs[i], now)
		live[i] = [2]string{cur, next}
	}
	return locs, live
}

// IdleRecords returns the cold record of each of refs as an idle cell:
// count 0, of the window before now's. A record of the current window
// (what a move of a counting cell imports) is newer (Record.NewerThan), so
// an import never keeps this one over a count; and a check finds its count
// 0 in the current window, which is what the cell held.
func (m *HotMover) IdleRecords(refs []Ref) []Record {
	nowS := recordFloorDiv(m.now().UnixMilli(), 1000)
	out := make([]Record, len(refs))
	for i := range refs {
		wS := int64(refs[i].Window / time.Second)
		last := max((recordFloorDiv(nowS, wS)-1)*wS, recordEpoch)
		out[i] = Record{Ref: refs[i], Last: last, First: last}
	}
	return out
}

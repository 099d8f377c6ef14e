package hot

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/redisscript"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/warm"
)

// The hot tier's side of a move (tiers/warm/move.go has the protocol's outline): its
// Mover for fixed-window cells and the freeze of hot cells.

//go:embed hot_freeze.lua
var hotFreezeSource string

var hotFreezeScript = warm.DirScript(hotFreezeSource)

// Mover is the hot tier's Mover for fixed-window cells, whose counter
// keys are FixedKeyOf(cell id, window index). Its clock says which window
// is current (the checks' clock, injected in tests).
type Mover struct {
	Hot  *Store
	Warm *warm.Store // its buckets are the directory
	Now  func() time.Time
}

// Tier returns Hot.
func (m *Mover) Tier() tiers.Tier { return tiers.Hot }

func (m *Mover) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// keys returns the live keys of the counters for this window and the next
// of r, whose cell id is id.
func (m *Mover) keys(id tiers.CellID, r *tiers.Ref, now time.Time) (cur, next string, idx int64) {
	w := r.Window.Milliseconds()
	idx = now.UnixMilli() / w
	c := tiers.Cell{Tag: r.Tag, Key: tiers.FixedKeyOf(id, idx)}
	cur = m.Hot.Key(&c)
	c.Key = tiers.FixedKeyOf(id, idx+1)
	next = m.Hot.Key(&c)
	return cur, next, idx
}

// Export returns the counts of refs' current (or next) window, preferring
// the frozen keys a Freeze left (the final copy of a move).
func (m *Mover) Export(ctx context.Context, refs []tiers.Ref) ([]tiers.Record, error) {
	now := m.now()
	pipe := m.Hot.rdb.Pipeline()
	cmds := make([][4]*redis.StringCmd, len(refs))
	idxs := make([]int64, len(refs))
	for i := range refs {
		cur, next, idx := m.keys(refs[i].ID(), &refs[i], now)
		idxs[i] = idx
		cmds[i] = [4]*redis.StringCmd{pipe.Get(ctx, next+"~"), pipe.Get(ctx, cur+"~"), pipe.Get(ctx, next), pipe.Get(ctx, cur)}
	}
	if len(refs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, fmt.Errorf("hot export: %w", tiers.WrapUnavailable(err))
		}
	}
	var out []tiers.Record
	for i := range refs {
		for k, c := range cmds[i] {
			v, err := c.Result()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("hot export: %w", tiers.WrapUnavailable(err))
			}
			rec, err := hotRecord(&refs[i], idxs[i], k%2 == 0, now, v)
			if err != nil {
				return nil, fmt.Errorf("hot export: %w", err)
			}
			out = append(out, rec)
			break
		}
	}
	return out, nil
}

// Import creates the live counter of each record of the current (or a
// later) window that counted anything, unless it exists: a key that exists
// was made by an earlier import of the same move and has counted calls
// since, so it wins. Records of past windows count nothing now.
func (m *Mover) Import(ctx context.Context, recs []tiers.Record) error {
	now := m.now()
	nowMs := now.UnixMilli()
	pipe := m.Hot.rdb.Pipeline()
	n := 0
	for i := range recs {
		r := &recs[i]
		w := r.Window.Milliseconds()
		idx := r.Index()
		if r.Count <= 0 || idx < nowMs/w {
			continue
		}
		c := tiers.Cell{Tag: r.Tag, Key: tiers.FixedKeyOf(r.ID(), idx)}
		ttl := (idx+1)*w - nowMs
		if m.Hot.jitter > 0 {
			ttl += rand.Int64N(m.Hot.jitter.Milliseconds() + 1)
		}
		pipe.SetNX(ctx, m.Hot.Key(&c), r.Count, time.Duration(ttl)*time.Millisecond)
		n++
	}
	if n == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("hot import: %w", tiers.WrapUnavailable(err))
	}
	return nil
}

// hotDeleteKeys bounds the keys of one DEL of Delete: a DEL blocks Redis
// for all of its keys, and checks wait behind it.
const hotDeleteKeys = 512

// Delete removes refs' counters of this window and the next, live and
// frozen: a DEL for up to hotDeleteKeys keys of one slot (any cells' on a
// single Redis, one tag's on a cluster), in one pipeline. One command for
// many keys costs Redis and the client a fraction of a command a key.
func (m *Mover) Delete(ctx context.Context, refs []tiers.Ref) error {
	if len(refs) == 0 {
		return nil
	}
	now := m.now()
	bySlot := map[tiers.Tag][]string{}
	var order []tiers.Tag
	for i := range refs {
		var slot tiers.Tag // one group on a single Redis
		if m.Warm.Cluster() {
			slot = refs[i].Tag
		}
		if _, ok := bySlot[slot]; !ok {
			order = append(order, slot)
		}
		cur, next, _ := m.keys(refs[i].ID(), &refs[i], now)
		bySlot[slot] = append(bySlot[slot], cur, next, cur+"~", next+"~")
	}
	pipe := m.Hot.rdb.Pipeline()
	for _, slot := range order {
		for keys := range slices.Chunk(bySlot[slot], hotDeleteKeys) {
			pipe.Del(ctx, keys...)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("hot delete: %w", tiers.WrapUnavailable(err))
	}
	return nil
}

// Frozen is what FreezeExport found of one cell.
type Frozen int

// What FreezeExport found.
const (
	NotHot    Frozen = iota // the directory names another tier (Dir)
	FrozenNow               // frozen, now or by an earlier run of the move (Record)
	MaybeCold               // no field, and the cold filter may hold the cell: nothing done
)

// Freeze is FreezeExport's answer for one ref.
type Freeze struct {
	State  Frozen
	Dir    string        // HotNotHot: the directory value
	Record *tiers.Record // HotFrozenNow: the frozen count (nil: the cell counted nothing)
}

// FreezeExport freezes the hot cells of refs for a move (hot_freeze.lua)
// and returns their frozen counts, in one step: the directory read, the
// cold filter probe, the freeze and the export are one script call on a
// single Redis (one per cell on a cluster). A cell whose field is absent
// but whose tag's cold filter may hold it is left alone (HotMaybeCold)
// unless noColdRow says the caller found no cold row for it.
func (m *Mover) FreezeExport(ctx context.Context, refs []tiers.Ref, noColdRow bool) ([]Freeze, error) {
	now := m.now()
	var force any = "0" // boxed once, not once a cell
	if noColdRow {
		force = "1"
	}
	perCall := len(refs) // cells a call: all of them, or one on a cluster
	if m.Warm.Cluster() {
		perCall = 1
	}
	idxs := make([]int64, len(refs))
	var calls []redisscript.Call
	for i := range refs {
		if i == 0 || m.Warm.Cluster() {
			calls = append(calls, redisscript.Call{Keys: make([]string, 0, 3*perCall), Args: make([]any, 0, 5*perCall)})
		}
		p := &calls[len(calls)-1]
		id := refs[i].ID()
		l := m.Warm.LocateCell(id, refs[i].Tag)
		cur, next, idx := m.keys(id, &refs[i], now)
		idxs[i] = idx
		b := len(p.Keys)
		p.Keys = append(p.Keys, l.HeaderKey(), cur, next)
		p.Args = append(p.Args, b+1, l.Field, b+2, b+3, force)
	}
	cmds, err := redisscript.RunEach(ctx, m.Hot.rdb, hotFreezeScript, calls)
	if err != nil {
		return nil, fmt.Errorf("hot freeze: %w", tiers.WrapUnavailable(err))
	}
	out := make([]Freeze, 0, len(refs))
	for _, c := range cmds {
		vals, err := c.Slice()
		if err != nil {
			return nil, fmt.Errorf("hot freeze: %w", tiers.WrapUnavailable(err))
		}
		for k := 0; k+2 < len(vals); k += 3 {
			f, err := frozenCell(&refs[len(out)], idxs[len(out)], now, vals[k:k+3])
			if err != nil {
				return nil, fmt.Errorf("hot freeze: %w", err)
			}
			out = append(out, f)
		}
	}
	if len(out) != len(refs) {
		return nil, fmt.Errorf("hot freeze: %d answers for %d cells", len(out), len(refs))
	}
	return out, nil
}

// frozenCell decodes hot_freeze.lua's three values for one cell.
func frozenCell(r *tiers.Ref, idx int64, now time.Time, v []any) (Freeze, error) {
	state, _ := v[0].(int64)
	a, _ := v[1].(string)
	w, _ := v[2].(string)
	switch state {
	case 0:
		return Freeze{State: NotHot, Dir: a}, nil
	case 2:
		return Freeze{State: MaybeCold}, nil
	case 1:
		if a == "" {
			return Freeze{State: FrozenNow}, nil
		}
		rec, err := hotRecord(r, idx, w == "1", now, a)
		if err != nil {
			return Freeze{}, err
		}
		return Freeze{State: FrozenNow, Record: &rec}, nil
	}
	return Freeze{}, fmt.Errorf("unexpected answer %v", v)
}

// hotRecord is the record of a counter's value v, counted in window idx
// (or the next one).
func hotRecord(r *tiers.Ref, idx int64, next bool, now time.Time, v string) (tiers.Record, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return tiers.Record{}, fmt.Errorf("counter %q: %w", v, err)
	}
	if next {
		idx++
	}
	// Last: a second inside the count's window (Record).
	wS := int64(r.Window / time.Second)
	nowS := tiers.RecordFloorDiv(now.UnixMilli(), 1000)
	last := min(max(nowS, idx*wS), idx*wS+wS-1)
	return tiers.Record{Ref: *r, Count: max(n, 0), Last: last, First: last}, nil
}

// MoveScripts returns the scripts of the hot side of a move that
// WarmStore.Load caches with the directory's (hot_freeze.lua).
func (s *Store) MoveScripts() []*redis.Script { return []*redis.Script{hotFreezeScript} }

// Client returns the store's Redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Package warm is the warm tier (Store: fixed-window cells compressed in
// Redis hashes) and the directory its buckets make, with the tags' cold
// filters: where each cell lives (directory.go, coldfilter.go), the
// directory's part of a move (move.go), the warm and cold move sides
// (side.go) and their Lua scripts, which the
// hot store's scripts build on (DirScript, CheckScript).
package warm

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/redisscript"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

//go:embed warm_cas.lua
var warmCASSource string

// Store keeps fixed-window cells compressed in Redis hashes, many cells
// per hash, so that a cell costs tens of bytes instead of a key:
//
//	key   = prefix + "{" + hex(tag) + "}w" + bucket (2 bytes, big-endian)
//	field = CellID[8:8+FieldBytes] (7 raw bytes by default)
//	value = the record (tiers/warmrecord.go), 7-8 bytes
//
// A tag's buckets follow its population (directory.lua, directory.go): a
// tag starts with one bucket, and a bucket grown to 96 fields splits the
// tag's next bucket in turn (linear hashing on the field's first 4 bytes),
// so buckets hold ~50-95 cells whether an app has a hundred warm cells or
// millions, up to 65,536 buckets a tag. The layout is in the tag's header
// key, and every access locates the field inside a script (warm_read.lua,
// warm_cas.lua), so a split never races a read or a write. Buckets of one
// tag share its hash slot: the cells of one check (which share the app's
// tag) are compared-and-set by one script even on a Redis Cluster. Cells
// of rules without app_id share 4,096 pooled tags (TagOfIdentity), so they
// fill buckets as an app's cells do.
//
// Buckets must stay listpack-encoded (hash-max-listpack-entries, 128 in the
// shipped redis.conf; hash-max-listpack-value 64 is never reached), which
// is what makes a cell cost ~25 bytes instead of ~50-100; a split at 96
// keeps them under 128.
//
// Two cells collide when they share tag and field: a field of FieldBytes*8
// bits gives ~N^2/2^(8*F+1) expected colliding pairs among the N warm
// cells of one tag: 6.9e-6 for a million cells of one app with the default
// 7 bytes. A colliding pair would share one record.
//
// A check reads its cells' records (warm_read.lua, one pipeline for the
// batch), decides in Go, and writes through warm_cas.lua, which writes
// every cell of an op only if none changed since the read; a lost race is
// retried (up to MaxAttempts, with jittered exponential backoff). No lock
// is held across round trips; within one process, checks on a cell queue
// on an in-process stripe lock instead (warm_locks.go), so retries are for
// races between instances. A denied call and a dry run are read-only: one
// round trip.
type Store struct {
	rdb         redis.UniversalClient
	cas         *redis.Script
	prefix      string
	fieldBytes  int
	maxAttempts int
	cluster     bool
	locks       *warmLocks
}

// Options configures a Store.
type Options struct {
	Prefix string // prepended to every key, e.g. "q:"
	// FieldBytes is the width of a hash field, 6..8; 0: 7. Each byte less
	// saves ~1.1 bytes a cell and multiplies the collision odds by 256
	// (see Store).
	FieldBytes  int
	MaxAttempts int // compare-and-set attempts per check before ErrContention; 0: 32
}

// NewStore returns a warm store over rdb.
func NewStore(rdb redis.UniversalClient, o Options) *Store {
	_, cluster := rdb.(*redis.ClusterClient)
	a := o.MaxAttempts
	if a <= 0 {
		a = 32
	}
	f := o.FieldBytes
	if f <= 0 {
		f = 7
	}
	f = min(max(f, 6), 8)
	return &Store{
		rdb:         rdb,
		cas:         DirScript(warmCASSource),
		prefix:      o.Prefix,
		fieldBytes:  f,
		maxAttempts: a,
		cluster:     cluster,
		locks:       newWarmLocks(),
	}
}

// WithClient returns the store over another client (one with longer
// timeouts, for moves) that shares s's in-process cell locks, so that what
// it writes in this process queues with s's checks instead of racing them.
func (s *Store) WithClient(rdb redis.UniversalClient) *Store {
	c := *s
	c.rdb = rdb
	_, c.cluster = rdb.(*redis.ClusterClient)
	return &c
}

// Cluster reports whether the store's client is a Redis Cluster client (a
// script's keys must then share a hash slot).
func (s *Store) Cluster() bool { return s.cluster }

// Tier returns Warm.
func (s *Store) Tier() tiers.Tier { return tiers.Warm }

// Load caches the directory's scripts in Redis, then more (the hot store's
// move scripts: hot.Store.MoveScripts) (a script Redis lost is loaded
// again when it is first missed).
func (s *Store) Load(ctx context.Context, more ...*redis.Script) error {
	for _, sc := range append([]*redis.Script{s.cas, warmReadScript, warmDeleteScript, coldSwitchScript, coldProbeScript}, more...) {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("warm load script: %w", tiers.WrapUnavailable(err))
		}
	}
	return nil
}

// DirLoc is where one cell's record lives: its tag's key base
// (prefix{tag}, directory.go) and its field.
type DirLoc struct {
	base  string
	Field string
}

// Locate returns where the record of the cell of identity id and window
// lives (a DirLoc).
func (s *Store) Locate(id tiers.Identity, window time.Duration, tag tiers.Tag) DirLoc {
	return s.LocateCell(tiers.CellIDOf(id, window), tag)
}

// Location returns where r's record lives: the key base of its tag
// (prefix{tag}: its header is base+"d", its buckets base+"w" and a 2-byte
// index) and its field in its bucket (for tests and tools that read the
// directory's keys).
func (s *Store) Location(r *tiers.Ref) (base, field string) {
	l := s.Locate(r.Identity, r.Window, r.Tag)
	return l.base, l.Field
}

// LocateCell is Locate for a cell whose id is known.
func (s *Store) LocateCell(cid tiers.CellID, tag tiers.Tag) DirLoc {
	var buf [64]byte
	return DirLoc{base: string(s.appendBase(buf[:0], tag)), Field: s.Field(cid)}
}

// TagHeaderKey is the key of tag's directory header (DirLoc.HeaderKey of
// its cells), made as one string.
func (s *Store) TagHeaderKey(tag tiers.Tag) string {
	var buf [64]byte
	return string(append(s.appendBase(buf[:0], tag), 'd'))
}

// appendBase appends the key base of tag's cells (prefix{tag}) to b.
func (s *Store) appendBase(b []byte, tag tiers.Tag) []byte {
	const hexdigits = "0123456789abcdef"
	b = append(b, s.prefix...)
	b = append(b, '{')
	for _, c := range tag {
		b = append(b, hexdigits[c>>4], hexdigits[c&15])
	}
	return append(b, '}')
}

// Field is the field of cell cid in its warm bucket (DirLoc.Field).
func (s *Store) Field(cid tiers.CellID) string { return string(cid[8 : 8+s.fieldBytes]) }

// warmEntry is one record as read, then as the ops of an attempt leave it.
type warmEntry struct {
	raw    string // the stored value ("" = none); after a deciding op, its new value
	state  tiers.RecState
	marker bool // raw is a directory marker, not a record
}

// read fetches the records at locs (readFields) and decodes them.
func (s *Store) read(ctx context.Context, locs []DirLoc) (map[DirLoc]*warmEntry, error) {
	vals, err := s.readFields(ctx, locs)
	if err != nil {
		return nil, err
	}
	out := make(map[DirLoc]*warmEntry, len(vals))
	for _, l := range locs {
		if _, ok := out[l]; ok {
			continue
		}
		e := &warmEntry{}
		out[l] = e
		str := vals[l]
		switch {
		case str == "":
			// no record
		case str == DirMoving || str == DirHot:
			// A directory marker (move.go): the cell is not warm; a
			// check that finds it fails with ErrMoved.
			e.raw = str
			e.state = tiers.RecState{Rec: tiers.Record{Moved: true}, Present: true}
			e.marker = true
		default:
			rec, err := tiers.DecodeWarmValue([]byte(str))
			if err != nil {
				return nil, fmt.Errorf("warm read %s field %x: %w", l.base, l.Field, err)
			}
			e.raw = str
			e.state = tiers.RecState{Rec: rec, Present: true}
		}
	}
	return out, nil
}

// readFields reads the raw values at locs ("" = none): warm_read.lua, one
// call on a single Redis, one per tag on a cluster, in one pipeline.
func (s *Store) readFields(ctx context.Context, locs []DirLoc) (map[DirLoc]string, error) {
	vals, err := PerCell(ctx, s.rdb, warmReadScript, s.DirCalls(locs), len(locs))
	if err != nil {
		return nil, fmt.Errorf("warm read: %w", err)
	}
	out := make(map[DirLoc]string, len(locs))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[locs[i]] = str
		}
	}
	return out, nil
}

// warmCAS is one call of warm_cas.lua.
type warmCAS struct{ redisscript.Call }

// add appends a record's expected and new value, deduplicating the keys.
func (c *warmCAS) add(l DirLoc, old, new string) {
	hk := l.HeaderKey()
	ki := -1
	for i, k := range c.Keys {
		if k == hk {
			ki = i
			break
		}
	}
	if ki < 0 {
		c.Keys = append(c.Keys, hk)
		ki = len(c.Keys) - 1
	}
	c.Args = append(c.Args, ki+1, l.Field, old, new)
}

// runCAS runs the calls in one pipeline and reports which succeeded.
func (s *Store) runCAS(ctx context.Context, calls []warmCAS) ([]bool, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	each := make([]redisscript.Call, len(calls))
	for i := range calls {
		each[i] = calls[i].Call
	}
	cmds, err := redisscript.RunEach(ctx, s.rdb, s.cas, each)
	if err != nil {
		return nil, fmt.Errorf("warm compare-and-set: %w", tiers.WrapUnavailable(err))
	}
	ok := make([]bool, len(calls))
	for i, c := range cmds {
		v, err := c.Int64()
		if err != nil {
			// The outcome of this write is unknown (it may have been
			// applied): report, never retry it.
			return nil, fmt.Errorf("warm compare-and-set: %w", tiers.WrapUnavailable(err))
		}
		ok[i] = v == 1
	}
	return ok, nil
}

// warmPlan is where an op's cells live and, in an attempt, its write.
type warmPlan struct {
	locs []DirLoc
	cas  int // index of the op's call in the attempt, -1 if it wrote nothing
}

// Check decides ops in order, each as if sent alone, all or nothing per op.
// A batch costs one pipeline of reads and, when anything counts, one
// pipeline of compare-and-sets. An op that loses a race is decided again on
// fresh reads, and so is every later op of the batch that read what it
// would have written.
func (s *Store) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	plans := make([]warmPlan, len(ops))
	var all []DirLoc
	for i, op := range ops {
		p := &plans[i]
		p.locs = make([]DirLoc, len(op.Cells))
		for j := range op.Cells {
			c := &op.Cells[j]
			if _, err := tiers.FixedWindowSeconds(c); err != nil {
				return fmt.Errorf("warm check: %w", err)
			}
			p.locs[j] = s.Locate(c.Identity, c.Window, c.Tag)
			if s.cluster && j > 0 && c.Tag != op.Cells[0].Tag {
				return errors.New("warm check: on a Redis Cluster the cells of one check must share a tag")
			}
		}
		all = append(all, p.locs...)
	}
	var stripes [16]uint16
	defer s.locks.unlock(s.locks.lock(all, stripes[:0]))
	pending := make([]int, len(ops))
	for i := range pending {
		pending[i] = i
	}
	locs := all
	for attempt := 1; ; attempt++ {
		entries, err := s.read(ctx, locs)
		if err != nil {
			return err
		}
		var calls []warmCAS
		for _, i := range pending {
			if err := s.decide(ops[i], now, &plans[i], entries, &calls); err != nil {
				return err
			}
		}
		ok, err := s.runCAS(ctx, calls)
		if err != nil {
			return err
		}
		var next []int
		dirty := map[DirLoc]bool{}
		locs = locs[:0:0]
		for _, i := range pending {
			p := &plans[i]
			redo := p.cas >= 0 && !ok[p.cas]
			if p.cas < 0 {
				for _, l := range p.locs {
					redo = redo || dirty[l]
				}
			}
			if redo {
				next = append(next, i)
				for _, l := range p.locs {
					dirty[l] = true
				}
				locs = append(locs, p.locs...)
			}
		}
		if len(next) == 0 {
			return nil
		}
		if attempt >= s.maxAttempts {
			return fmt.Errorf("warm check: %w (%d attempts)", tiers.ErrContention, attempt)
		}
		if err := tiers.Backoff(ctx, attempt); err != nil {
			return fmt.Errorf("warm check: %w", err)
		}
		pending = next
	}
}

// decide decides one op on entries and, when it writes, adds its call.
func (s *Store) decide(op *tiers.Op, now time.Time, p *warmPlan, entries map[DirLoc]*warmEntry, calls *[]warmCAS) error {
	p.cas = -1
	var stBuf [8]*tiers.RecState
	var oldBuf [8]string
	st, olds := stBuf[:0], oldBuf[:0]
	for _, l := range p.locs {
		e := entries[l]
		st = append(st, &e.state)
		olds = append(olds, e.raw)
	}
	changed, err := tiers.DecideFixed(op, now, st, tiers.Warm)
	if err != nil || !changed {
		return err
	}
	var c warmCAS
	for j, l := range p.locs {
		e := entries[l]
		if j > 0 && containsLoc(p.locs[:j], l) {
			continue // a cell named twice: one compare-and-set of its final value
		}
		val, err := tiers.EncodeWarmValue(&e.state.Rec)
		if err != nil {
			return fmt.Errorf("warm check: %w", err)
		}
		e.raw = string(val)
		c.add(l, olds[j], e.raw)
	}
	p.cas = len(*calls)
	*calls = append(*calls, c)
	return nil
}

func containsLoc(ls []DirLoc, l DirLoc) bool {
	for _, x := range ls {
		if x == l {
			return true
		}
	}
	return false
}

// Export returns the records of refs (Mover).
func (s *Store) Export(ctx context.Context, refs []tiers.Ref) ([]tiers.Record, error) {
	locs := make([]DirLoc, len(refs))
	for i := range refs {
		locs[i] = s.Locate(refs[i].Identity, refs[i].Window, refs[i].Tag)
	}
	entries, err := s.read(ctx, locs)
	if err != nil {
		return nil, fmt.Errorf("warm export: %w", err)
	}
	var out []tiers.Record
	for i := range refs {
		if e := entries[locs[i]]; e.state.Present && !e.marker {
			r := e.state.Rec
			r.Ref = refs[i]
			out = append(out, r)
		}
	}
	return out, nil
}

// Import writes recs where no newer record is held (Mover): one
// compare-and-set per hash, in one pipeline, retried for the hashes that
// changed meanwhile. Of several records for one cell, the newest is
// imported.
func (s *Store) Import(ctx context.Context, recs []tiers.Record) error {
	type item struct {
		loc DirLoc
		rec *tiers.Record
		val string
	}
	index := map[DirLoc]int{}
	var items []item
	for i := range recs {
		r := &recs[i]
		if _, err := tiers.FixedWindowSeconds(&tiers.Cell{Algorithm: rules.FixedWindow, Window: r.Window}); err != nil {
			return fmt.Errorf("warm import: %w", err)
		}
		v, err := tiers.EncodeWarmValue(r)
		if err != nil {
			return fmt.Errorf("warm import: %w", err)
		}
		l := s.Locate(r.Identity, r.Window, r.Tag)
		if j, dup := index[l]; dup {
			if r.NewerThan(items[j].rec) {
				items[j] = item{loc: l, rec: r, val: string(v)}
			}
			continue
		}
		index[l] = len(items)
		items = append(items, item{loc: l, rec: r, val: string(v)})
	}
	all := make([]DirLoc, len(items))
	for i := range items {
		all[i] = items[i].loc
	}
	var stripes [16]uint16
	defer s.locks.unlock(s.locks.lock(all, stripes[:0]))
	pending := make([]int, len(items))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 1; ; attempt++ {
		locs := make([]DirLoc, len(pending))
		for j, i := range pending {
			locs[j] = items[i].loc
		}
		entries, err := s.read(ctx, locs)
		if err != nil {
			return fmt.Errorf("warm import: %w", err)
		}
		byKey := map[string]int{}
		var calls []warmCAS
		var members [][]int
		for _, i := range pending {
			it := &items[i]
			e := entries[it.loc]
			if e.marker {
				continue // the directory says the cell is not warm: leave it
			}
			if e.state.Present && !it.rec.NewerThan(&e.state.Rec) {
				continue
			}
			ci, ok := byKey[it.loc.base]
			if !ok {
				ci = len(calls)
				byKey[it.loc.base] = ci
				calls = append(calls, warmCAS{})
				members = append(members, nil)
			}
			calls[ci].add(it.loc, e.raw, it.val)
			members[ci] = append(members[ci], i)
		}
		ok, err := s.runCAS(ctx, calls)
		if err != nil {
			return fmt.Errorf("warm import: %w", err)
		}
		var next []int
		for ci := range calls {
			if !ok[ci] {
				next = append(next, members[ci]...)
			}
		}
		if len(next) == 0 {
			return nil
		}
		if attempt >= s.maxAttempts {
			return fmt.Errorf("warm import: %w (%d attempts)", tiers.ErrContention, attempt)
		}
		if err := tiers.Backoff(ctx, attempt); err != nil {
			return fmt.Errorf("warm import: %w", err)
		}
		pending = next
	}
}

// Delete removes the records of refs (Mover): warm_delete.lua, one call
// on a single Redis, one per tag on a cluster, in one pipeline.
func (s *Store) Delete(ctx context.Context, refs []tiers.Ref) error {
	locs := make([]DirLoc, len(refs))
	for i := range refs {
		locs[i] = s.Locate(refs[i].Identity, refs[i].Window, refs[i].Tag)
	}
	cmds, err := runDirCalls(ctx, s.rdb, warmDeleteScript, s.DirCalls(locs))
	if err != nil {
		return fmt.Errorf("warm delete: %w", err)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return fmt.Errorf("warm delete: %w", tiers.WrapUnavailable(err))
		}
	}
	return nil
}

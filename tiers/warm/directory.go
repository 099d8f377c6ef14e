package warm

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/redisscript"
	"github.com/quota-platform/quota/tiers"
)

// The directory says where a fixed-window cell lives (migrate/PROTOCOL.md).
// Per tag (warm.go's: an app's, or a pool's) it is
//
//	prefix{tag}d       the tag's header: its warm buckets' layout and its
//	                   cold filter (coldfilter.go)
//	prefix{tag}w + 2B  its warm buckets: a field per warm or moving cell
//
// and all of it is read and written inside scripts that start with
// directory.lua, which locates a cell's bucket from the header: a tag's
// buckets grow by linear hashing as its warm cells do, and no split can
// come between a script's look at the layout and its use of it. A hot
// cell has no entry at all; a tag with only hot cells has no keys here.

//go:embed directory.lua
var directorySource string

//go:embed directory_write.lua
var directoryWriteSource string

//go:embed warm_read.lua
var warmReadSource string

//go:embed warm_delete.lua
var warmDeleteSource string

// DirScript is a script that uses the directory: directory.lua's and
// directory_write.lua's functions put in front of src (a script cannot
// load another). checkScript is one with directory.lua's only, for the
// check scripts: Redis makes a script's local functions again at every
// call, so every function a check does not use costs each check (make
// bench-scripts).
func DirScript(src string) *redis.Script {
	return redis.NewScript(directorySource + directoryWriteSource + src)
}

// CheckScript is DirScript with directory.lua's functions only.
func CheckScript(src string) *redis.Script { return redis.NewScript(directorySource + src) }

var (
	warmReadScript   = DirScript(warmReadSource)
	warmDeleteScript = DirScript(warmDeleteSource)
)

// dirHeaderBytes is the size of a header before its layer table
// (directory.lua's DIR_HEADER).
const dirHeaderBytes = 13

// HeaderKey is the key of l's tag's header.
func (l DirLoc) HeaderKey() string { return l.base + "d" }

// HeaderKey returns the key of the directory header of r's tag (its warm
// layout and cold filter).
func (s *Store) HeaderKey(r *tiers.Ref) string { return s.TagHeaderKey(r.Tag) }

// DirCall is one call of a directory script over some cells: their tags'
// headers as KEYS and, per cell, its header's index (1-based) and its
// field as ARGV.
type DirCall struct {
	redisscript.Call
	At  []int // per cell of the call, its index in the caller's list
	hdr []int // per cell of the call, its header's index into Keys (0-based)
}

// DirCalls groups locs into calls: one on a single Redis (a call per tag
// would cost Redis a script call per app, the most of a move's time), one
// per tag on a cluster, where a script's keys must share a slot.
func (s *Store) DirCalls(locs []DirLoc) []DirCall {
	var calls []DirCall
	byBase := map[string]int{} // base -> call (cluster) or header index (single)
	for i, l := range locs {
		hk := l.HeaderKey()
		if s.cluster {
			ci, ok := byBase[l.base]
			if !ok {
				ci = len(calls)
				byBase[l.base] = ci
				calls = append(calls, DirCall{Call: redisscript.Call{Keys: []string{hk}}})
			}
			c := &calls[ci]
			c.Args = append(c.Args, 1, l.Field)
			c.At = append(c.At, i)
			c.hdr = append(c.hdr, 0)
			continue
		}
		if len(calls) == 0 {
			calls = append(calls, DirCall{})
		}
		c := &calls[0]
		ki, ok := byBase[l.base]
		if !ok {
			c.Keys = append(c.Keys, hk)
			ki = len(c.Keys)
			byBase[l.base] = ki
		}
		c.Args = append(c.Args, ki, l.Field)
		c.At = append(c.At, i)
		c.hdr = append(c.hdr, ki-1)
	}
	return calls
}

// ByHeader orders the call's cells by header, each header's in the
// caller's order, and returns each header's count of cells: the mover's
// scripts (hot_state.lua, cold_switch.lua) take a header's cells
// together, so that a cell needs no header index of its own (an argument
// costs Redis about as much as a dozen Lua operations). Call it before the
// cells' counters are added to Keys: Keys are the headers.
func (c *DirCall) ByHeader() []int {
	counts := make([]int, len(c.Keys))
	for _, h := range c.hdr {
		counts[h]++
	}
	next := make([]int, len(counts))
	for k := 1; k < len(counts); k++ {
		next[k] = next[k-1] + counts[k-1]
	}
	at, hdr, args := make([]int, len(c.At)), make([]int, len(c.hdr)), make([]any, len(c.Args))
	for i, h := range c.hdr {
		j := next[h]
		next[h]++
		at[j], hdr[j] = c.At[i], h
		args[2*j], args[2*j+1] = c.Args[2*i], c.Args[2*i+1]
	}
	c.At, c.hdr, c.Args = at, hdr, args
	return counts
}

// runDirCalls runs sc for each call in one pipeline (redisscript.RunEach).
// Per-command errors are left in the commands.
func runDirCalls(ctx context.Context, rdb redis.UniversalClient, sc *redis.Script, calls []DirCall) ([]*redis.Cmd, error) {
	each := make([]redisscript.Call, len(calls))
	for i := range calls {
		each[i] = calls[i].Call
	}
	cmds, err := redisscript.RunEach(ctx, rdb, sc, each)
	if err != nil {
		return nil, tiers.WrapUnavailable(err)
	}
	return cmds, nil
}

// PerCell runs sc over calls (runDirCalls) and returns each cell's value in
// the replies, in the order of the caller's list of n cells.
func PerCell(ctx context.Context, rdb redis.UniversalClient, sc *redis.Script, calls []DirCall, n int) ([]any, error) {
	cmds, err := runDirCalls(ctx, rdb, sc, calls)
	if err != nil {
		return nil, err
	}
	out := make([]any, n)
	for i, c := range calls {
		vals, err := cmds[i].Slice()
		if err != nil {
			return nil, tiers.WrapUnavailable(err)
		}
		if len(vals) != len(c.At) {
			return nil, fmt.Errorf("%d values for %d cells", len(vals), len(c.At))
		}
		for k, at := range c.At {
			out[at] = vals[k]
		}
	}
	return out, nil
}

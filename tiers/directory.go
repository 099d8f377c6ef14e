package tiers

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
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

//go:embed warm_read.lua
var warmReadSource string

//go:embed warm_delete.lua
var warmDeleteSource string

// dirScript is a script that uses the directory: directory.lua's functions
// put in front of src (a script cannot load another).
func dirScript(src string) *redis.Script { return redis.NewScript(directorySource + src) }

var (
	warmReadScript   = dirScript(warmReadSource)
	warmDeleteScript = dirScript(warmDeleteSource)
)

// headerKey is the key of l's tag's header.
func (l warmLoc) headerKey() string { return l.base + "d" }

// HeaderKey returns the key of the directory header of r's tag (its warm
// layout and cold filter).
func (s *WarmStore) HeaderKey(r *Ref) string {
	return s.locate(r.Identity, r.Window, r.Tag).headerKey()
}

// runPerTag runs sc once per tag base, with the tag's header as its key and
// args[base] as its arguments, in one pipeline (EVALSHA; a script Redis
// lost is loaded and the pipeline sent again). Per-command errors are left
// in the commands.
func runPerTag(ctx context.Context, rdb redis.UniversalClient, sc *redis.Script, bases []string, args map[string][]any) ([]*redis.Cmd, error) {
	if len(bases) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, len(bases))
	if len(bases) == 1 {
		cmds[0] = sc.Run(ctx, rdb, []string{bases[0] + "d"}, args[bases[0]]...)
		return cmds, nil
	}
	for attempt := 0; attempt < 2; attempt++ {
		pipe := rdb.Pipeline()
		for i, b := range bases {
			cmds[i] = sc.EvalSha(ctx, pipe, []string{b + "d"}, args[b]...)
		}
		_, err := pipe.Exec(ctx)
		if !isNoScript(err) {
			break
		}
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			return nil, wrapUnavailable(err)
		}
	}
	return cmds, nil
}

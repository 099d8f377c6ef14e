package tiers

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The cold filter lets the hot script tell a new cell from a cold one by
// itself, so that a cell never seen before costs what a hot check costs:
// one script call, no MySQL statement, no marker.
//
// Each tag has one Bloom filter of every cell of the tag ever switched to
// cold, in its directory header (prefix{tag}d, directory.lua has the
// format): a cell sets 4 bits of one 64-bit block of a layer (block and
// bits from its warm field's bytes 1..6), 8 cells a block: about 3 % false
// positives per full layer. Cells are added to the last layer; a full one
// gets a successor at least as large as all earlier layers together (and
// as large as the mover's estimate of the tag's cold cells to come), so a
// tag's layers grow with the log of its cold cells, and a filter costs
// about one to two bytes per cold cell. Bits are never cleared: a cell
// moved out of cold stays a "maybe" (see below for its cost).
//
// The mover adds a cell in the same script that switches its directory to
// cold (cold_switch.lua), and every such switch changes the version. The
// hot script, for a cell with no hot key and no directory field, probes
// the filter: no bit missing in any layer means "may be cold" and the
// router looks the row up; a row found is cold, a row missing (a false
// positive, or a cell moved out of cold) sends the op again with the
// version it saw, and the script counts the cell as new only if the
// version is still that one, i.e. no cell of the tag was switched to cold
// in between. migrate/PROTOCOL.md has why no cold count can be missed.

//go:embed cold_switch.lua
var coldSwitchSource string

var coldSwitchScript = dirScript(coldSwitchSource)

// SwitchToCold is the switch step of moves into cold: for each swap, if
// the cell's directory field holds Old, it deletes the field and adds the
// cell to its tag's cold filter, atomically (one script call per tag, in
// one pipeline). capacity, when set, estimates how many cells of a tag are
// still to go cold (it sizes a new filter layer); nil: as many as switch
// now. It reports per swap whether it switched.
func (s *WarmStore) SwitchToCold(ctx context.Context, swaps []DirSwap, capacity func(Tag) int) ([]bool, error) {
	type call struct {
		tag  Tag
		keys []string
		args []any
		at   []int // indexes into swaps
	}
	byTag := map[string]*call{}
	var calls []*call
	for i := range swaps {
		l := s.locate(swaps[i].Identity, swaps[i].Window, swaps[i].Tag)
		hk := l.headerKey()
		c, ok := byTag[hk]
		if !ok {
			c = &call{tag: s.tagOf(swaps[i].Identity, swaps[i].Tag), keys: []string{hk}, args: []any{0}}
			byTag[hk] = c
			calls = append(calls, c)
		}
		c.args = append(c.args, l.field, swaps[i].Old)
		c.at = append(c.at, i)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		want := len(c.at)
		if capacity != nil {
			want = max(want, capacity(c.tag))
		}
		c.args[0] = want
		cmds[i] = coldSwitchScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	if len(calls) > 0 {
		_, _ = pipe.Exec(ctx) // errors are read per command
	}
	for i, c := range calls {
		// A script missing from Redis' cache (restart, SCRIPT FLUSH) did
		// not run: run that call again, loading the script.
		if isNoScript(cmds[i].Err()) {
			cmds[i] = coldSwitchScript.Run(ctx, s.rdb, c.keys, c.args...)
		}
	}
	out := make([]bool, len(swaps))
	for i, c := range calls {
		res, err := cmds[i].Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("cold switch: %w", wrapUnavailable(err))
		}
		if len(res) != len(c.at) {
			return nil, fmt.Errorf("cold switch: %d results for %d cells", len(res), len(c.at))
		}
		for k, i := range c.at {
			out[i] = res[k] == 1
		}
	}
	return out, nil
}

// DirTag returns the tag whose buckets and cold filter hold r's directory
// (r's own, or its pool's for a rule without app_id).
func (s *WarmStore) DirTag(r *Ref) Tag { return s.tagOf(r.Identity, r.Tag) }

// Client returns the store's Redis client.
func (s *WarmStore) Client() redis.UniversalClient { return s.rdb }

var coldProbeScript = dirScript(`
local out = {}
for i = 1, #ARGV, 2 do
  local m = cold_maybe(dir_header(KEYS[tonumber(ARGV[i])]), ARGV[i + 1])
  if m then out[#out + 1] = 1 else out[#out + 1] = 0 end
end
return out`)

// MayBeCold reports, per ref, whether its tag's cold filter holds it
// (a false positive included): what the hot script's probe answers. One
// call on a single Redis (one per tag on a cluster); for the mover, tools
// and tests, not the check path.
func (s *WarmStore) MayBeCold(ctx context.Context, refs []Ref) ([]bool, error) {
	locs := make([]warmLoc, len(refs))
	for i := range refs {
		locs[i] = s.locate(refs[i].Identity, refs[i].Window, refs[i].Tag)
	}
	calls := s.dirCalls(locs)
	cmds, err := runDirCalls(ctx, s.rdb, coldProbeScript, calls)
	if err != nil {
		return nil, fmt.Errorf("cold filter probe: %w", err)
	}
	out := make([]bool, len(refs))
	for i, c := range calls {
		vals, err := cmds[i].Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("cold filter probe: %w", wrapUnavailable(err))
		}
		if len(vals) != len(c.at) {
			return nil, fmt.Errorf("cold filter probe: %d answers for %d cells", len(vals), len(c.at))
		}
		for k, at := range c.at {
			out[at] = vals[k] == 1
		}
	}
	return out, nil
}

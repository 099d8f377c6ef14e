package warm

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/tiers"
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
// about one to two bytes per cold cell. Moves never clear bits: a cell
// moved out of cold stays a "maybe" (see below for its cost) until
// ReplaceColdFilter writes the filter anew (worker.Worker.CompactColdFilters).
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

var coldSwitchScript = DirScript(coldSwitchSource)

// SwitchToCold is the switch step of moves into cold: for each swap, if
// the cell's directory field holds Old, it deletes the field and adds the
// cell to its tag's cold filter, atomically (one script call on a single
// Redis, one per tag on a cluster, in one pipeline). capacity, when set,
// estimates how many cells of a tag are still to go cold (it sizes a new
// filter layer); nil: as many as switch now. It reports per swap whether
// it switched.
func (s *Store) SwitchToCold(ctx context.Context, swaps []DirSwap, capacity func(tiers.Tag) int) ([]bool, error) {
	locs := make([]DirLoc, len(swaps))
	for i := range swaps {
		locs[i] = s.Locate(swaps[i].Identity, swaps[i].Window, swaps[i].Tag)
	}
	return s.SwitchToColdWith(ctx, swaps, locs, nil, capacity)
}

// SwitchToColdWith is SwitchToCold for swaps located at locs; with live set
// (each swap's Old then ""), a swap also requires that its cell's counter
// of the window holds live[i].Want (none for "") and that of the next does
// not exist, and deletes the first (hot.Mover.SwitchQuietToCold).
func (s *Store) SwitchToColdWith(ctx context.Context, swaps []DirSwap, locs []DirLoc, live []CellCounters, capacity func(tiers.Tag) int) ([]bool, error) {
	calls := s.DirCalls(locs)
	for ci := range calls {
		calls[ci].Args = coldSwitchArgs(&calls[ci], swaps, live, capacity)
	}
	vals, err := PerCell(ctx, s.rdb, coldSwitchScript, calls, len(swaps))
	if err != nil {
		return nil, fmt.Errorf("cold switch: %w", err)
	}
	return ones(vals), nil
}

// coldSwitchArgs turns a dirCall's (header index, field) pairs into
// cold_switch.lua's ARGV, its cells in header order (dirCall.byHeader):
// the number of headers, a layer capacity and a count of cells per header,
// whether counters are named, then (field, and the field's expected value,
// or with live the counter's: the field must then be absent) per cell.
// The counter keys of live, if any, are appended to the call's KEYS after
// the headers, two a cell in the call's order.
func coldSwitchArgs(c *DirCall, swaps []DirSwap, live []CellCounters, capacity func(tiers.Tag) int) []any {
	counts := c.ByHeader()
	tags := make([]tiers.Tag, len(c.Keys))
	for k, at := range c.At {
		tags[c.hdr[k]] = swaps[at].Tag
	}
	args := make([]any, 0, 2+2*len(counts)+2*len(c.At))
	args = append(args, len(counts))
	for hi, n := range counts {
		if capacity != nil {
			n = max(n, capacity(tags[hi]))
		}
		args = append(args, n)
	}
	for _, n := range counts {
		args = append(args, n)
	}
	args = append(args, boolInt(live != nil))
	if live != nil {
		c.Keys = slices.Grow(c.Keys, 2*len(c.At))
	}
	for k, at := range c.At {
		if live != nil {
			args = append(args, c.Args[2*k+1], live[at].Want)
			c.Keys = append(c.Keys, live[at].Cur, live[at].Next)
		} else {
			args = append(args, c.Args[2*k+1], swaps[at].Old)
		}
	}
	return args
}

// ones reports which script reply values are the integer 1.
func ones(vals []any) []bool {
	out := make([]bool, len(vals))
	for i, v := range vals {
		n, _ := v.(int64)
		out[i] = n == 1
	}
	return out
}

// Client returns the store's Redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

//go:embed cold_probe.lua
var coldProbeSource string

var coldProbeScript = DirScript(coldProbeSource)

// MayBeCold reports, per ref, whether its tag's cold filter holds it
// (a false positive included): what the hot script's probe answers. One
// call on a single Redis (one per tag on a cluster); for the mover, tools
// and tests, not the check path.
func (s *Store) MayBeCold(ctx context.Context, refs []tiers.Ref) ([]bool, error) {
	locs := make([]DirLoc, len(refs))
	for i := range refs {
		locs[i] = s.Locate(refs[i].Identity, refs[i].Window, refs[i].Tag)
	}
	vals, err := PerCell(ctx, s.rdb, coldProbeScript, s.DirCalls(locs), len(refs))
	if err != nil {
		return nil, fmt.Errorf("cold filter probe: %w", err)
	}
	return ones(vals), nil
}

//go:embed cold_replace.lua
var coldReplaceSource string

var coldReplaceScript = DirScript(coldReplaceSource)

// FilterCell is what a cell's bits in its tag's cold filter derive from:
// bytes 1-6 of its warm field, bytes 9-14 of its cell id.
type FilterCell [6]byte

// FilterCellOf returns the FilterCell of the cell whose id is id.
func FilterCellOf(id tiers.CellID) FilterCell { return FilterCell(id[8:14]) }

// ColdFilter is what a tag's header says of its cold filter.
type ColdFilter struct {
	Version [4]byte // changed by every switch into cold
	Layers  int
	Cells   int // added to it (a cell whose bits were all set already is not)
	Bytes   int // the header's size
}

// ColdFilters reads the cold filter of each tag (one GETRANGE and one
// STRLEN a tag, in one pipeline).
func (s *Store) ColdFilters(ctx context.Context, tags []tiers.Tag) ([]ColdFilter, error) {
	const most = dirHeaderBytes + 4*255 // the header and a layer table of 255 layers
	pipe := s.rdb.Pipeline()
	heads := make([]*redis.StringCmd, len(tags))
	sizes := make([]*redis.IntCmd, len(tags))
	for i, t := range tags {
		key := s.TagHeaderKey(t)
		heads[i] = pipe.GetRange(ctx, key, 0, most-1)
		sizes[i] = pipe.StrLen(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("cold filters: %w", err)
	}
	out := make([]ColdFilter, len(tags))
	for i := range tags {
		out[i] = parseColdFilter([]byte(heads[i].Val()))
		out[i].Bytes = int(sizes[i].Val())
	}
	return out, nil
}

// parseColdFilter reads a header's cold filter fields (directory.lua's
// layout; a missing or short header reads as zeros).
func parseColdFilter(h []byte) ColdFilter {
	if len(h) < dirHeaderBytes {
		h = append(h, make([]byte, dirHeaderBytes-len(h))...)
	}
	f := ColdFilter{Version: [4]byte(h[4:8]), Layers: int(h[12])}
	last := int(binary.BigEndian.Uint32(h[8:12]))
	f.Cells = last
	for j := 0; j < f.Layers-1 && dirHeaderBytes+4*j+4 <= len(h); j++ {
		f.Cells += 8 * int(binary.BigEndian.Uint32(h[dirHeaderBytes+4*j:]))
	}
	return f
}

// ReplaceColdFilter replaces the cold filter of tag with one layer that
// holds cells (none: no filter), if its version is still version (no cell
// of the tag was switched into cold since it was read); it reports
// whether it did and, if so, the header's size now. The layer has a block of 8
// bytes for every 8 cells, as one sized by the cycle's estimate (~3 %
// false positives).
func (s *Store) ReplaceColdFilter(ctx context.Context, tag tiers.Tag, version [4]byte, cells []FilterCell) (replaced bool, bytes int, err error) {
	filter := buildColdFilter(cells)
	ok, err := coldReplaceScript.Run(ctx, s.rdb, []string{s.TagHeaderKey(tag)}, string(version[:]), filter).Int()
	if err != nil {
		return false, 0, fmt.Errorf("cold filter replace: %w", err)
	}
	if ok != 1 {
		return false, 0, nil
	}
	return true, 8 + len(filter), nil // the warm layout and version, then the filter
}

// buildColdFilter returns a header's filter part (from byte 9 on) for a
// single layer holding cells, with directory.lua's bit layout (cold_pos):
// a block per 8 cells, chosen by bytes 1-3 of the cell, and in it four
// bits, 6-bit positions from bytes 4-6, a byte's high bit first.
func buildColdFilter(cells []FilterCell) []byte {
	if len(cells) == 0 {
		return make([]byte, 5) // no cell in a last layer, no layer
	}
	blocks := (len(cells) + 7) / 8
	out := binary.BigEndian.AppendUint32(nil, uint32(len(cells)))
	out = append(out, 1)
	out = binary.BigEndian.AppendUint32(out, uint32(blocks))
	layer := make([]byte, 8*blocks)
	for _, c := range cells {
		x := int(c[0])<<16 | int(c[1])<<8 | int(c[2])
		blk := layer[8*(x%blocks):]
		for _, p := range [4]byte{c[3] >> 2, c[3]&3<<4 | c[4]>>4, c[4]&15<<2 | c[5]>>6, c[5] & 63} {
			blk[p/8] |= 0x80 >> (p % 8)
		}
	}
	return append(out, layer...)
}

// CellCounters are a cell's counter keys of a window and the next, and,
// for a switch, the value its counter of the window must hold ("": none).
type CellCounters struct{ Cur, Next, Want string }

// boolInt is 1 for true, 0 for false.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

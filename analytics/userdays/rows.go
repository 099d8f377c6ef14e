package userdays

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/quota-platform/quota/analytics/usage"
)

// Key is a per-user figure's (app, interface, user) and day.
type Key struct {
	ID  usage.RowID // app, interface and user
	Day usage.Day
}

// Row is a per-user figure of a flush, to write in a chunk.
type Row struct {
	Key
	usage.Counts
	// userHead, the user's first 8 bytes big-endian, ends most comparisons.
	// Kept: without it 11 % more (BenchmarkRecordAndFlush, GOGC=off).
	userHead uint64
}

// NewRow is the row of k with c.
func NewRow(k Key, c usage.Counts) Row {
	var b [8]byte
	copy(b[:], k.ID.User())
	return Row{Key: k, Counts: c, userHead: binary.BigEndian.Uint64(b[:])}
}

// CompareAppDays orders groups for the write. The user rows are written
// in the order of the chunks' primary key (day, app, then user and
// interface), so that two quotads' transactions never lock chunk rows in
// opposite orders (no deadlock).
func CompareAppDays(a, b AppDay) int {
	return cmp.Or(cmp.Compare(a.Day, b.Day), strings.Compare(a.App, b.App))
}

// compareGroupRows orders rows of one (day, app) by user, then interface.
func compareGroupRows(a, b *Row) int {
	if c := cmp.Compare(a.userHead, b.userHead); c != 0 {
		return c
	}
	_, aIface, aUser := a.ID.Split()
	_, bIface, bUser := b.ID.Split()
	if c := strings.Compare(aUser, bUser); c != 0 {
		return c
	}
	return strings.Compare(aIface, bIface)
}

// AppDay is the (app, day) of a group of user rows: a flush writes each
// group as its own chunks.
type AppDay struct {
	App string
	Day usage.Day
}

// Group is the user rows of one (app, day), in the order added until
// the write sorts them.
type Group struct {
	AppDay
	Rows []Row
}

// SortRows sorts rows into write order (compareGroupRows) and sums rows
// of equal keys, in place, and returns them.
func SortRows(rows []Row) []Row {
	slices.SortFunc(rows, func(a, b Row) int { return compareGroupRows(&a, &b) })
	n := 0
	for i := range rows {
		if n > 0 && rows[n-1].Key == rows[i].Key {
			rows[n-1].Counts.Add(rows[i].Counts)
			continue
		}
		rows[n] = rows[i]
		n++
	}
	clear(rows[n:]) // drop the merged rows' ids
	return rows[:n]
}

// Chunks turns each group's rows into chunks of about maxRaw bytes at most
// before compression, a group at a time, sort (which must leave the
// group's rows in write order, summed: SortRows) before each.
func Chunks(groups []*Group, sort func(*Group), maxRaw int) []userChunk {
	var out []userChunk
	var buf chunkBuffers
	for _, g := range groups {
		sort(g)
		out = appendAppChunks(out, g.Rows, maxRaw, &buf)
	}
	return out
}

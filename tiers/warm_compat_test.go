package tiers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// Warm values as the version before the current form wrote them:
// snappy.Encode(raw), byte for byte (written by that version's
// EncodeWarmValue). Operators upgrade in place, so a bucket may hold them
// next to values of the current form until each cell is written again.
var oldWarmValues = []struct {
	name string
	val  string
	want Record
}{
	{"fresh", "\x07\x18 _\x13\x04\x01\x00\x00",
		Record{Count: 1, Last: recT, First: recT}},
	{"typical", "\x08\x1c _\x13\x04\x0c\x88\x0e\xdf",
		Record{Count: 12, Last: recT, First: recT - 32*86400, MeanInterval: 1800, Samples: 31}},
	{"moved", "\x07\x18 _\x13D\x05\x07)",
		Record{Count: 5, Last: recT, First: recT - 86400, MeanInterval: 7, Samples: 9, Moved: true}},
	{"an hour before", "\x07\x18\x10Q\x13\x04\x03\x00\x00",
		Record{Count: 3, Last: recT - 3600, First: recT - 3600}},
}

func TestWarmValue_PreviousFormIsDecodedAndRewrittenInTheNew(t *testing.T) {
	t.Parallel()
	for _, c := range oldWarmValues {
		got, err := DecodeWarmValue([]byte(c.val))
		if err != nil || got != c.want {
			t.Errorf("%s: decoded %+v %v, want %+v", c.name, got, err, c.want)
			continue
		}
		v, err := EncodeWarmValue(&got)
		if err != nil {
			t.Fatal(err)
		}
		// Two bytes shorter (no snappy framing), and told apart by its
		// first byte.
		if len(v) != len(c.val)-2 || v[0] < 0x80 {
			t.Errorf("%s: new form %q, want %d bytes from 0x80 up", c.name, v, len(c.val)-2)
		}
		if again, err := DecodeWarmValue(v); err != nil || again != c.want {
			t.Errorf("%s: new form decodes to %+v %v, want %+v", c.name, again, err, c.want)
		}
	}
}

// The new form is as strict as the old: a truncated, extended or
// out-of-range value is corrupt, never a record.
func TestWarmValue_NewFormRejectsCorruption(t *testing.T) {
	t.Parallel()
	good, err := EncodeWarmValue(&Record{Count: 3, Last: recT, First: recT, MeanInterval: 10, Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, val := range map[string][]byte{
		"one byte":      good[:1],
		"header only":   good[:4],
		"short":         good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"varint runs":   append(append([]byte{}, good[:4]...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
		"truncated var": append(append([]byte{}, good[:4]...), 0x01, 0x80),
		"too long":      append([]byte{0x80}, make([]byte, recordMaxRaw)...),
	} {
		if r, err := DecodeWarmValue(val); !errors.Is(err, ErrRecordCorrupt) {
			t.Errorf("%s: decoded %+v, %v", name, r, err)
		}
	}
}

// A tag whose bucket holds values of the previous form (written there as
// that version laid them out: the tag's first bucket, its header's warm
// flag) is read and counted exactly through the router and the mover's
// calls, and each value a check or a freeze writes is of the new form.
func TestWarm_BucketOfThePreviousFormIsCountedExactly(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	hot := NewHotStore(rdb, HotOptions{Prefix: prefix})
	warm := NewWarmStore(rdb, WarmOptions{Prefix: prefix})
	r := NewRouter(hot, warm, nil)
	ctx := context.Background()
	now := time.Unix(recT+60, 0)
	app := newConfCell(20, time.Hour).app
	cells := make([]confCell, len(oldWarmValues))
	for i, c := range oldWarmValues {
		cells[i] = newConfCell(20, time.Hour)
		cells[i].app = app // one tag, one bucket
		l := warm.locate(cells[i].at(now).Identity, time.Hour, TagOf(app))
		if err := rdb.HSet(ctx, l.base+"w\x00\x00", l.field, c.val).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.SetRange(ctx, l.headerKey(), 0, "\x01").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range oldWarmValues {
		op := confOp(now, 2, Enforce, cells[i])
		if c.want.Moved {
			// Frozen by a move of the old version: not counted.
			if err := warm.Check(ctx, now, []*Op{op}); !errors.Is(err, ErrMoved) || op.Committed {
				t.Fatalf("%s: %v, %+v; want ErrMoved", c.name, err, op.Out)
			}
			continue
		}
		if err := r.Check(ctx, now, []*Op{op}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		used := c.want.Count
		if c.want.Last < recT {
			used = 0 // an earlier window's count
		}
		if !op.Committed || op.Out[0].Tier != Warm || op.Out[0].Remaining != 20-used-2 {
			t.Fatalf("%s: %+v, want warm, remaining %d", c.name, op.Out, 20-used-2)
		}
	}
	refs := make([]Ref, len(cells))
	for i := range cells {
		cell := cells[i].at(now)
		refs[i] = RefOf(&cell)
	}
	frozen, err := warm.Freeze(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	raws, err := warm.DirRaw(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range oldWarmValues {
		want := c.want
		if !want.Moved {
			want.Count = 2
			if want.Last == recT {
				want.Count += c.want.Count
			}
		}
		rec, ok := IsWarmRecord(raws[i])
		if !frozen[i] || !ok || !rec.Moved || rec.Count != want.Count {
			t.Errorf("%s: after the freeze %+v (%v), want count %d, moved", c.name, rec, frozen[i], want.Count)
		}
		if c.want.Moved {
			if raws[i] != c.val {
				t.Errorf("%s: a record frozen already was rewritten: %q", c.name, raws[i])
			}
		} else if raws[i][0] < 0x80 {
			t.Errorf("%s: still of the old form after two writes: %q", c.name, raws[i])
		}
	}
}

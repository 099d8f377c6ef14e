package tiers

import (
	"errors"
	"testing"
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

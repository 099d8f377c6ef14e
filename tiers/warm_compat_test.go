package tiers

import (
	"errors"
	"testing"
)

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

package tiers

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/golang/snappy"
)

// The record codec of the warm and cold tiers.

var recT = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).Unix()

func TestRecord_RoundTrip(t *testing.T) {
	t.Parallel()
	const day = 86400
	cases := []struct {
		name    string
		rec     Record
		rawSize int   // bytes of raw, and of the warm value
		first   int64 // First after a round trip: the latest its age class allows
	}{
		{"fresh", Record{Count: 1, Last: recT, First: recT}, 7, recT},
		{"typical warm", Record{Count: 12, Last: recT, First: recT - 40*day - 5, MeanInterval: 1800, Samples: 31}, 8, recT - 32*day},
		{"minute-old", Record{Count: 3, Last: recT, First: recT - 120, MeanInterval: 60, Samples: 2}, 7, recT},
		{"moved", Record{Count: 5, Last: recT, First: recT - day - 7, MeanInterval: 7, Samples: 9, Moved: true}, 7, recT - day},
		{"three days", Record{Count: 5, Last: recT, First: recT - 3*day, Samples: 1}, 7, recT - 2*day},
		{"epoch", Record{Count: 0, Last: RecordEpoch, First: RecordEpoch}, 7, RecordEpoch},
		{"last second", Record{Count: 1 << 40, Last: recordMaxLast, First: RecordEpoch, MeanInterval: 1 << recordLastBits, Samples: 31}, 4 + 6 + 5 + 1, recordMaxLast - 64*day},
		{"first after last", Record{Count: 1, Last: recT, First: recT + 50}, 7, recT},
	}
	for _, c := range cases {
		raw, err := AppendRecordRaw(nil, &c.rec)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(raw) != c.rawSize {
			t.Errorf("%s: %d raw bytes, want %d", c.name, len(raw), c.rawSize)
		}
		got, err := ParseRecordRaw(raw)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantRec := c.rec
		wantRec.First = c.first
		if got != wantRec {
			t.Errorf("%s: raw round trip %+v, want %+v", c.name, got, wantRec)
		}
		val, err := EncodeWarmValue(&c.rec)
		if err != nil {
			t.Fatal(err)
		}
		if len(val) != len(raw) {
			t.Errorf("%s: warm value %d bytes, want raw's %d (no framing)", c.name, len(val), len(raw))
		}
		got2, err := DecodeWarmValue(val)
		if err != nil || got2 != wantRec {
			t.Errorf("%s: warm round trip %+v %v, want %+v", c.name, got2, err, wantRec)
		}
	}
}

func TestRecord_EncodeRejectsWhatItCannotHold(t *testing.T) {
	t.Parallel()
	for _, r := range []Record{
		{Count: 1, Last: RecordEpoch - 1},
		{Count: 1, Last: recordMaxLast + 1},
		{Count: -1, Last: recT},
		{Count: 1, Last: recT, MeanInterval: -1},
		{Count: 1, Last: recT, MeanInterval: 1<<recordLastBits + 1},
		{Count: 1, Last: recT, Samples: 32},
	} {
		if _, err := AppendRecordRaw(nil, &r); err == nil {
			t.Errorf("%+v encoded", r)
		}
	}
}

func TestRecord_DecodeRejectsCorruption(t *testing.T) {
	t.Parallel()
	good, _ := AppendRecordRaw(nil, &Record{Count: 3, Last: recT, First: recT, MeanInterval: 10, Samples: 1})
	future := bytes.Clone(good)
	future[3] |= 0x80
	for name, raw := range map[string][]byte{
		"empty":         {},
		"short":         good[:6],
		"future format": future,
		"trailing":      append(bytes.Clone(good), 0),
		"varint runs":   append(bytes.Clone(good[:4]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
		"truncated var": append(bytes.Clone(good[:4]), 0x01, 0x80),
		"huge count":    append(append(bytes.Clone(good[:4]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), 0, 0),
	} {
		if r, err := ParseRecordRaw(raw); !errors.Is(err, ErrRecordCorrupt) {
			t.Errorf("%s: decoded %+v, %v", name, r, err)
		}
		if r, err := DecodeWarmValue(snappy.Encode(nil, raw)); !errors.Is(err, ErrRecordCorrupt) {
			t.Errorf("%s (warm): decoded %+v, %v", name, r, err)
		}
	}
	for name, val := range map[string][]byte{
		"not snappy":     {0xff, 0xff, 0xff},
		"raw, no snappy": good,
		"too long":       snappy.Encode(nil, make([]byte, 100)),
		"bad literal":    {0x09, 0x30, 1, 2},
	} {
		if r, err := DecodeWarmValue(val); !errors.Is(err, ErrRecordCorrupt) {
			t.Errorf("%s: decoded %+v, %v", name, r, err)
		}
	}
}

func TestRecord_IntervalMean(t *testing.T) {
	t.Parallel()
	// The first 25 intervals: the exact mean (up to rounding toward the sample).
	r := Record{}
	sum := int64(0)
	// Exact mean of the first 25 intervals.
	for i := int64(1); i <= 25; i++ {
		x := 10 * i
		sum += x
		r.observe(x)
		if want := sum / i; r.MeanInterval < want-1 || r.MeanInterval > want+1 {
			t.Fatalf("after %d intervals mean %d, want %d", i, r.MeanInterval, want)
		}
	}
	// Then alpha = 2/51: a step change is followed geometrically, and the
	// mean reaches the new level (integer rounding never sticks short of it).
	r = Record{MeanInterval: 3600, Samples: 31}
	r.observe(0)
	if r.MeanInterval != 3600-142 { // 3600*2/51 = 141.2, rounded away from 3600
		t.Fatalf("one step: %d", r.MeanInterval)
	}
	for range 400 {
		r.observe(0)
	}
	if r.MeanInterval != 0 {
		t.Fatalf("mean stuck at %d", r.MeanInterval)
	}
	// After 50 calls at a new interval, the mean is ~87% of the way there,
	// like a 50-call moving mean half-way through (same centre of mass).
	r = Record{MeanInterval: 0, Samples: 31}
	for range 50 {
		r.observe(1000)
	}
	if r.MeanInterval < 850 || r.MeanInterval > 890 {
		t.Fatalf("after 50 calls: %d", r.MeanInterval)
	}
	if r.Samples != 31 {
		t.Fatalf("samples %d, want saturated 31", r.Samples)
	}
}

func TestRecord_CountsByWindow(t *testing.T) {
	t.Parallel()
	ref := Ref{Window: time.Hour}
	s := &RecState{}
	s.count(&ref, 3600, recT+10, 2)
	s.count(&ref, 3600, recT+70, 1)
	if s.Rec.Count != 3 || s.Rec.First != recT+10 || s.Rec.Last != recT+70 || s.Rec.Samples != 1 || s.Rec.MeanInterval != 60 {
		t.Fatalf("%+v", s.Rec)
	}
	if u := s.Used(3600, recT+3599); u != 3 {
		t.Fatalf("same window used %d", u)
	}
	if u := s.Used(3600, recT+3600); u != 0 {
		t.Fatalf("next window used %d, want 0: an older window counts as 0", u)
	}
	// A caller whose clock is behind the last writer's counts in the record's window.
	s.count(&ref, 3600, recT+3600, 1)
	s.count(&ref, 3600, recT+3599, 1)
	if s.Rec.Count != 2 || s.Rec.Last != recT+3600 {
		t.Fatalf("%+v", s.Rec)
	}
	if !s.refund(3600, recT+3600, 5) || s.Rec.Count != 0 {
		t.Fatalf("refund: %+v", s.Rec)
	}
	if s.refund(3600, recT+7200, 1) {
		t.Fatal("refund changed an older window's record")
	}
}

// FuzzWarmRecordDecode: any bytes decode to a record or to an error wrapping
// ErrRecordCorrupt, never a panic; what decodes re-encodes to a value that
// decodes to the same record.
func FuzzWarmRecordDecode(f *testing.F) {
	for _, r := range []Record{
		{Count: 1, Last: recT, First: recT},
		{Count: 12, Last: recT, First: recT - 40*86400, MeanInterval: 1800, Samples: 31},
		{Count: 5, Last: recT, MeanInterval: 7, Samples: 9, Moved: true},
	} {
		v, err := EncodeWarmValue(&r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
		f.Add(v[:len(v)-1])
		bad := bytes.Clone(v)
		bad[len(bad)/2] ^= 0x5a
		f.Add(bad)
		raw, _ := AppendRecordRaw(nil, &r)
		f.Add(raw)
	}
	f.Add([]byte{})
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{0x07, 0x01, 0x0a})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeWarmValue(b)
		if err != nil {
			if !errors.Is(err, ErrRecordCorrupt) {
				t.Fatalf("error %v does not wrap ErrRecordCorrupt", err)
			}
			return
		}
		v, err := EncodeWarmValue(&r)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", r, err)
		}
		r2, err := DecodeWarmValue(v)
		if err != nil || r2 != r {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", r, r2, err)
		}
	})
}

// A record that has seen no call (a move's empty copy) observes no
// interval at its first call: the time since it was made is not one.
func TestRecord_AnEmptyCopyObservesNoIntervalAtItsFirstCall(t *testing.T) {
	t.Parallel()
	ref := Ref{Window: time.Hour}
	s := &RecState{Rec: Record{Ref: ref, Last: recT - 3*3600, First: recT - 3*3600}, Present: true}
	s.count(&ref, 3600, recT+10, 1)
	if s.Rec.Samples != 0 || s.Rec.MeanInterval != 0 || s.Rec.Count != 1 {
		t.Fatalf("after the first call: %+v", s.Rec)
	}
	s.count(&ref, 3600, recT+70, 1)
	if s.Rec.Samples != 1 || s.Rec.MeanInterval != 60 || s.Rec.Count != 2 {
		t.Fatalf("after the second call: %+v", s.Rec)
	}
}

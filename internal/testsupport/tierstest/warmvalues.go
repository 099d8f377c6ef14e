package tierstest

import (
	"time"

	"github.com/quota-platform/quota/tiers"
)

// RecT is the last second of the records of OldWarmValues.
var RecT = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).Unix()

// OldWarmValues are warm values as the version before the current form
// wrote them: snappy.Encode(raw), byte for byte (written by that version's
// EncodeWarmValue). Operators upgrade in place, so a bucket may hold them
// next to values of the current form until each cell is written again.
var OldWarmValues = []struct {
	Name string
	Val  string
	Want tiers.Record
}{
	{"fresh", "\x07\x18 _\x13\x04\x01\x00\x00",
		tiers.Record{Count: 1, Last: RecT, First: RecT}},
	{"typical", "\x08\x1c _\x13\x04\x0c\x88\x0e\xdf",
		tiers.Record{Count: 12, Last: RecT, First: RecT - 32*86400, MeanInterval: 1800, Samples: 31}},
	{"moved", "\x07\x18 _\x13D\x05\x07)",
		tiers.Record{Count: 5, Last: RecT, First: RecT - 86400, MeanInterval: 7, Samples: 9, Moved: true}},
	{"an hour before", "\x07\x18\x10Q\x13\x04\x03\x00\x00",
		tiers.Record{Count: 3, Last: RecT - 3600, First: RecT - 3600}},
}

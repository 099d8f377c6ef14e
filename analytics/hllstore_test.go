package analytics

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/golang/snappy"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// Registers read back whether saved raw (before compression) or
// compressed; anything else is an error, not a HyperLogLog.
func TestUnpackRegisters(t *testing.T) {
	t.Parallel()
	dense := make([]byte, hllDenseSize)
	copy(dense, "HYLL")
	dense[100] = 7
	sparse := []byte("HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x7f\xff")
	cases := []struct {
		name   string
		stored []byte
		want   []byte // nil: an error
	}{
		{"raw sparse, saved before compression", sparse, sparse},
		{"raw dense, saved before compression", dense, dense},
		{"packed dense", packRegisters(dense), dense},
		{"packed sparse (not shorter: raw)", packRegisters(sparse), sparse},
		{"snappy of something else", snappy.Encode(nil, []byte("not a HyperLogLog at all")), nil},
		{"garbage", []byte("\x05garbage"), nil},
		{"empty", nil, nil},
	}
	for _, c := range cases {
		got, err := unpackRegisters(c.stored)
		if c.want == nil {
			if err == nil {
				t.Errorf("%s: no error", c.name)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: %d bytes, %v; want the %d bytes back", c.name, len(got), err, len(c.want))
		}
	}
	if n := len(packRegisters(dense)); n > 1000 {
		t.Errorf("a dense HyperLogLog with one register set packs into %d bytes", n)
	}
}

// A dense HyperLogLog of a few hundred users is saved compressed, and
// read back whole when Redis has lost it.
func TestPersist_DenseRegistersAreSavedCompressed(t *testing.T) {
	t.Parallel()
	r, db, clk := newShardRecorderWith(t, Options{})
	rdb, prefix, opt := r.Flusher.uniq.rdb, r.Flusher.opt.KeyPrefix, r.Flusher.opt
	for u := range 600 {
		r.Recorder.Record("app", "users.get", fmt.Sprint("user-", u), true)
	}
	if err := r.Flusher.Close(t.Context()); err != nil { // flushes (600 users: made dense), then saves every key
		t.Fatal(err)
	}
	var stored []byte
	if err := db.QueryRow("SELECT registers FROM usage_uniques WHERE app_id = 'app' AND scope = 0").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) > hllDenseSize/3 {
		t.Errorf("dense registers saved in %d bytes, want compressed (under %d)", len(stored), hllDenseSize/3)
	}
	if v, err := unpackRegisters(stored); err != nil || len(v) != hllDenseSize || v[4] != 0 {
		t.Fatalf("saved registers unpack to %d bytes (%v), want a dense HyperLogLog", len(v), err)
	}
	testenv.DeletePrefix(t.Context(), rdb, prefix) // Redis loses everything
	r, err := New(opt)                             // restarted on the same servers
	if err != nil {
		t.Fatal(err)
	}
	defer r.Flusher.Close(t.Context())
	s, err := r.Stats.AppDay(t.Context(), "app", DayOf(clk.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if s.UniqueUsers < 588 || s.UniqueUsers > 612 {
		t.Errorf("%d distinct users read back, want 600 within 2%%", s.UniqueUsers)
	}
}

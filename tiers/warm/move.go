package warm

import (
	"context"
	"fmt"

	"github.com/quota-platform/quota/tiers"
)

// This file holds the directory's part of a move (package migrate drives
// the moves through the sides, tiers.MoveSide: warm's and cold's in
// side.go, hot's in package hot; migrate/PROTOCOL.md explains the
// protocol): freezing a warm cell, and reading and switching the
// directory.
//
// The directory of a fixed-window cell is its warm field and its tag's
// cold filter (directory.go), in the same hash slot as the cell's hot keys:
//
//	no field, not in the filter   hot (new cells included)
//	no field, in the filter       cold if the cold tier has a row, else hot
//	a warm record                 warm (Moved set: frozen by a move out of warm)
//	"M"                           frozen by a move out of hot or cold
//	"H"                           hot (written by older versions only)

// Directory markers.
const (
	DirHot    = "H"
	DirMoving = "M"
)

// readRaw reads directory values without decoding: markers are not
// records ("" = none).
func (s *Store) readRaw(ctx context.Context, locs []DirLoc) ([]string, error) {
	vals, err := s.readFields(ctx, locs)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(locs))
	for i, l := range locs {
		out[i] = vals[l]
	}
	return out, nil
}

// DirSwap is one compare-and-set of a directory field.
type DirSwap struct {
	tiers.Ref
	Old, New string // "" = absent
}

// DirCAS sets each field to New where it holds Old (one compare-and-set per
// field, in one pipeline) and reports which did.
func (s *Store) DirCAS(ctx context.Context, swaps []DirSwap) ([]bool, error) {
	calls := make([]warmCAS, len(swaps))
	for i := range swaps {
		l := s.Locate(swaps[i].Identity, swaps[i].Window, swaps[i].Tag)
		calls[i].add(l, swaps[i].Old, swaps[i].New)
	}
	ok, err := s.runCAS(ctx, calls)
	if err != nil {
		return nil, fmt.Errorf("directory switch: %w", err)
	}
	return ok, nil
}

// DirRaw returns the raw directory values of refs ("" = none).
func (s *Store) DirRaw(ctx context.Context, refs []tiers.Ref) ([]string, error) {
	locs := make([]DirLoc, len(refs))
	for i := range refs {
		locs[i] = s.Locate(refs[i].Identity, refs[i].Window, refs[i].Tag)
	}
	out, err := s.readRaw(ctx, locs)
	if err != nil {
		return nil, fmt.Errorf("directory read: %w", err)
	}
	return out, nil
}

// IsRecord reports whether a directory value is a warm record (not a
// marker, not empty) and decodes it.
func IsRecord(v string) (tiers.Record, bool) {
	if v == "" || v == DirMoving || v == DirHot {
		return tiers.Record{}, false
	}
	r, err := tiers.DecodeWarmValue([]byte(v))
	return r, err == nil
}

// EncodeDirRecord is the directory value of a warm cell holding r.
func EncodeDirRecord(r *tiers.Record) (string, error) {
	v, err := tiers.EncodeWarmValue(r)
	return string(v), err
}

// Freeze sets Moved on the warm records of refs (compare-and-set, retried
// on conflict); it reports per ref whether the record is frozen (false:
// the field holds no warm record).
func (s *Store) Freeze(ctx context.Context, refs []tiers.Ref) ([]bool, error) {
	out := make([]bool, len(refs))
	locs := make([]DirLoc, len(refs))
	for i := range refs {
		locs[i] = s.Locate(refs[i].Identity, refs[i].Window, refs[i].Tag)
	}
	var stripes [16]uint16
	defer s.locks.unlock(s.locks.lock(locs, stripes[:0]))
	for attempt := 1; ; attempt++ {
		raws, err := s.DirRaw(ctx, refs)
		if err != nil {
			return nil, err
		}
		var swaps []DirSwap
		for i, v := range raws {
			r, ok := IsRecord(v)
			out[i] = ok
			if !ok || r.Moved {
				continue
			}
			r.Moved = true
			nv, err := EncodeDirRecord(&r)
			if err != nil {
				return nil, err
			}
			swaps = append(swaps, DirSwap{Ref: refs[i], Old: v, New: nv})
		}
		ok, err := s.DirCAS(ctx, swaps)
		if err != nil {
			return nil, err
		}
		lost := false
		for _, b := range ok {
			lost = lost || !b
		}
		if !lost {
			return out, nil
		}
		if attempt >= s.maxAttempts {
			return nil, fmt.Errorf("warm freeze: %w", tiers.ErrContention)
		}
		if err := tiers.Backoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

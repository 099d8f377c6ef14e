package analytics

import (
	"bytes"
	"fmt"

	"github.com/golang/snappy"
)

// usage_uniques.registers holds a HyperLogLog's Redis value as GET returns
// it (it starts "HYLL"), or that value snappy-compressed when that is
// shorter: a dense HyperLogLog of a few hundred users, which the flusher
// now makes (hlldense.go), is 12 KB of mostly zero registers. Dense, then
// packed: 500 users 1,822 bytes (1,050 sparse), 1,000 users 2,884 (1,900
// sparse), 2,000 users 4,283, 20,000 users 11,353, 100,000 users 12,302
// (BenchmarkPackedRegisters, Redis 7.0.15, 2026-11-24). A snappy
// block never starts "HYLL": after its one-byte length ('H') comes a
// literal's tag, whose low bits are 00 ('Y' is 0x59). So rows saved before
// compression read back as they are.

var hllMagic = []byte("HYLL")

// packRegisters is v as usage_uniques stores it.
func packRegisters(v []byte) []byte {
	if c := snappy.Encode(nil, v); len(c) < len(v) {
		return c
	}
	return v
}

// unpackRegisters is the Redis value of a usage_uniques.registers.
func unpackRegisters(b []byte) ([]byte, error) {
	if bytes.HasPrefix(b, hllMagic) {
		return b, nil
	}
	v, err := snappy.Decode(nil, b)
	if err != nil || !bytes.HasPrefix(v, hllMagic) {
		return nil, fmt.Errorf("registers of %d bytes: neither a HyperLogLog nor a compressed one", len(b))
	}
	return v, nil
}

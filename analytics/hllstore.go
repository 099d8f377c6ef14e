package analytics

import (
	"bytes"
	"fmt"

	"github.com/golang/snappy"
)

// usage_uniques.registers holds a HyperLogLog's Redis value as GET returns
// it (it starts "HYLL"), or that value snappy-compressed when that is
// shorter: a dense HyperLogLog of a few hundred users, which Redis makes
// at HLLDenseAt (hlldense.go), is 12 KB of mostly zero registers
// (BenchmarkPackedRegisters: the bytes stored by users). A snappy
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

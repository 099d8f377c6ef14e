package analytics

import (
	"bytes"
	"fmt"

	"github.com/golang/snappy"
)

// usage_uniques.registers holds a HyperLogLog's Redis value (it starts
// "HYLL"), snappy-compressed when that is shorter (a dense key is 12 KB of
// mostly zeros). A snappy block never starts "HYLL" (after its length byte
// 'H' comes a literal's tag, low bits 00; 'Y' is 0x59), so rows saved raw
// read back as they are.
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

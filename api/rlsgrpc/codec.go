package rlsgrpc

import (
	"math"
	"strings"
	"unicode/utf8"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rlsCodec is the gRPC server's codec: grpc-go's protobuf codec, except
// that a RateLimitRequest of the shape Envoy's rate limit actions produce
// (a domain, descriptors of key/value entries, the request's hits_addend)
// is decoded by decodeRateLimitRequest, in five allocations with its
// strings cut from one, instead of protobuf's reflective decoder with one
// allocation per descriptor, entry and string. Anything else that request
// may hold (a descriptor's limit override, hits_addend or
// is_negative_hits, an unknown field, an unexpected wire type, invalid
// UTF-8) and every other message go to protobuf's decoder, so the request
// decoded is always the one proto.Unmarshal makes (FuzzDecodeRateLimitRequest).
// Paid for by bench/grpcbench's BenchmarkCall (-benchmem; make bench-grpc end to end): 5 allocations a request instead of protobuf's 26.
type rlsCodec struct {
	encoding.CodecV2 // grpc-go's protobuf codec: Marshal, Name, other messages
}

func newRLSCodec() rlsCodec { return rlsCodec{encoding.GetCodecV2(grpcproto.Name)} }

func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if decodeRateLimitRequest(b, req) {
		return nil
	}
	proto.Reset(req)
	return proto.Unmarshal(b, req)
}

// The fields decodeRateLimitRequest reads.
const (
	reqDomain      = 1 // RateLimitRequest.domain
	reqDescriptors = 2 // RateLimitRequest.descriptors
	reqHitsAddend  = 3 // RateLimitRequest.hits_addend
	descEntries    = 1 // RateLimitDescriptor.entries
	entryKey       = 1 // RateLimitDescriptor.Entry.key
	entryValue     = 2 // RateLimitDescriptor.Entry.value
)

// decodeRateLimitRequest decodes b into req (zero) when b holds only the
// fields it reads, each with its wire type and valid UTF-8; otherwise it
// reports false, req possibly half filled. A first pass checks b and
// counts; the second fills descriptors and entries allocated at their
// number and strings copied into one.
func decodeRateLimitRequest(b []byte, req *rlsv3.RateLimitRequest) bool {
	var descs, entries, text int
	ok := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) bool {
		switch {
		case num == reqDomain && typ == protowire.BytesType:
			text += len(v)
			return utf8.Valid(v)
		case num == reqHitsAddend && typ == protowire.VarintType:
			return n <= math.MaxUint32
		case num == reqDescriptors && typ == protowire.BytesType:
			descs++
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) bool {
				if num != descEntries || typ != protowire.BytesType {
					return false
				}
				entries++
				return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) bool {
					text += len(v)
					return (num == entryKey || num == entryValue) && typ == protowire.BytesType && utf8.Valid(v)
				})
			})
		}
		return false
	})
	if !ok {
		return false
	}
	var sb strings.Builder
	sb.Grow(text)
	// cut copies v into the one string and returns its part.
	cut := func(v []byte) string {
		start := sb.Len()
		sb.Write(v)
		return sb.String()[start:]
	}
	ds := make([]rlcommon.RateLimitDescriptor, descs)
	es := make([]rlcommon.RateLimitDescriptor_Entry, entries)
	if descs > 0 {
		req.Descriptors = make([]*rlcommon.RateLimitDescriptor, 0, descs)
	}
	entryPtrs := make([]*rlcommon.RateLimitDescriptor_Entry, 0, entries)
	eachField(b, func(num protowire.Number, _ protowire.Type, v []byte, n uint64) bool {
		switch num {
		case reqDomain:
			req.Domain = cut(v) // the last one, as protobuf has it
		case reqHitsAddend:
			req.HitsAddend = uint32(n)
		case reqDescriptors:
			d := &ds[len(req.Descriptors)]
			req.Descriptors = append(req.Descriptors, d)
			first := len(entryPtrs)
			eachField(v, func(_ protowire.Number, _ protowire.Type, v []byte, _ uint64) bool {
				e := &es[len(entryPtrs)]
				entryPtrs = append(entryPtrs, e)
				eachField(v, func(num protowire.Number, _ protowire.Type, v []byte, _ uint64) bool {
					if num == entryKey {
						e.Key = cut(v)
					} else {
						e.Value = cut(v)
					}
					return true
				})
				return true
			})
			if len(entryPtrs) > first {
				d.Entries = entryPtrs[first:len(entryPtrs):len(entryPtrs)]
			}
		}
		return true
	})
	return true
}

// eachField calls f with each field of message b: its number, wire type,
// and its bytes (length-delimited) or value (varint); other wire types
// pass their encoding as bytes. It reports false on malformed wire data
// or when f does.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) bool) bool {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return false
		}
		b = b[k:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b)
		default:
			k = protowire.ConsumeFieldValue(num, typ, b)
			if k >= 0 {
				v = b[:k]
			}
		}
		if k < 0 || !f(num, typ, v, n) {
			return false
		}
		b = b[k:]
	}
	return true
}

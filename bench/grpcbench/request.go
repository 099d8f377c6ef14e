package main

import (
	"encoding/binary"
	"strconv"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/quota-platform/quota/bench/loadgen"
)

// platformValues are the descriptor values of key k, rendered as loadgen
// renders them in POST /v1/check's body (loadgen.AppendCheck), into
// buffers reused from call to call.
type platformValues struct {
	app, ip, user, iface []byte
}

func (v *platformValues) set(k loadgen.Key) {
	v.app = strconv.AppendUint(append(v.app[:0], "app-"...), k.App, 10)
	v.ip = loadgen.AppendIP(v.ip[:0], k.IP)
	v.user = strconv.AppendUint(append(v.user[:0], "user-"...), k.User, 10)
	v.iface = strconv.AppendUint(append(v.iface[:0], "iface-"...), k.Iface, 10)
}

// The fields of RateLimitRequest, RateLimitDescriptor and its Entry that
// the benchmark sends.
const (
	fieldDomain      = 1 // RateLimitRequest.domain
	fieldDescriptors = 2 // RateLimitRequest.descriptors
	fieldEntries     = 1 // RateLimitDescriptor.entries
	fieldKey         = 1 // RateLimitDescriptor.Entry.key
	fieldValue       = 2 // RateLimitDescriptor.Entry.value
)

// appendRequest appends the gRPC message of ShouldRateLimit with the
// platform's two descriptors, (app_id, ip) and (app_id, user_id,
// interface_id), for key k: the 5-byte prefix (uncompressed, length) and
// the protobuf, byte for byte what proto.Marshal makes of the request
// (newRequest), without building it.
func appendRequest(b []byte, domain string, v *platformValues) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0)
	b = protowire.AppendTag(b, fieldDomain, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = appendDescriptor(b, kv{"app_id", v.app}, kv{"ip", v.ip})
	b = appendDescriptor(b, kv{"app_id", v.app}, kv{"user_id", v.user}, kv{"interface_id", v.iface})
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-5))
	return b
}

// kv is one entry of a descriptor.
type kv struct {
	key   string
	value []byte
}

// appendDescriptor appends a descriptors field with entries es.
func appendDescriptor(b []byte, es ...kv) []byte {
	size := 0
	for _, e := range es {
		size += protowire.SizeTag(fieldEntries) + protowire.SizeBytes(entrySize(e.key, e.value))
	}
	b = protowire.AppendTag(b, fieldDescriptors, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	for _, e := range es {
		b = protowire.AppendTag(b, fieldEntries, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(e.key, e.value)))
		b = protowire.AppendTag(b, fieldKey, protowire.BytesType)
		b = protowire.AppendString(b, e.key)
		b = protowire.AppendTag(b, fieldValue, protowire.BytesType)
		b = protowire.AppendBytes(b, e.value)
	}
	return b
}

func entrySize(key string, value []byte) int {
	return protowire.SizeTag(fieldKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fieldValue) + protowire.SizeBytes(len(value))
}

// newRequest is the same request as a message, for grpc-go's client.
func newRequest(domain string, v *platformValues) *rlsv3.RateLimitRequest {
	app := string(v.app)
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app}, {Key: "ip", Value: string(v.ip)}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app},
			{Key: "user_id", Value: string(v.user)}, {Key: "interface_id", Value: string(v.iface)}}},
	}}
}

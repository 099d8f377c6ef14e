package rlsgrpc

import (
	"strconv"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// platformRequests are ShouldRateLimit requests with the platform's two
// descriptors (deploy/envoy/ratelimit.yaml), for n different keys.
func platformRequests(n int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		app := "app-" + strconv.Itoa(i%100)
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "platform", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app}, {Key: "ip", Value: "10.0.0." + strconv.Itoa(i%250)}}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app},
				{Key: "user_id", Value: "user-" + strconv.Itoa(i)}, {Key: "interface_id", Value: "iface-3"}}},
		}}
	}
	return reqs
}

func entries(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// codecDecode decodes b as the server does.
func codecDecode(b []byte) (*rlsv3.RateLimitRequest, error) {
	req := new(rlsv3.RateLimitRequest)
	return req, newRLSCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, req)
}

// checkAsProto fails unless the codec decodes b as proto.Unmarshal does,
// and reports whether the hand decoder took it.
func checkAsProto(t testing.TB, b []byte) bool {
	t.Helper()
	want := new(rlsv3.RateLimitRequest)
	wantErr := proto.Unmarshal(b, want)
	got, err := codecDecode(b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("% x: error %v, proto.Unmarshal's %v", b, err, wantErr)
	}
	if err == nil && !proto.Equal(got, want) {
		t.Fatalf("% x:\n got %v\nwant %v", b, got, want)
	}
	return decodeRateLimitRequest(b, new(rlsv3.RateLimitRequest))
}

func TestRLSCodec_DecodesAsProto(t *testing.T) {
	withLimit := entries("k", "v")
	withLimit.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_HOUR}
	withHits := entries("k", "v")
	withHits.HitsAddend = wrapperspb.UInt64(2)
	negative := entries("k", "v")
	negative.IsNegativeHits = true
	byHand := platformRequests(3)
	byHand = append(byHand,
		&rlsv3.RateLimitRequest{},
		&rlsv3.RateLimitRequest{Domain: "d"},
		&rlsv3.RateLimitRequest{Domain: "ü名", HitsAddend: 7, Descriptors: []*rlcommon.RateLimitDescriptor{entries("", ""), {}, entries("a", strings.Repeat("x", 300), "b", "c")}},
	)
	for _, r := range byHand {
		if !checkAsProto(t, mustMarshal(t, r)) {
			t.Errorf("%v: left to proto.Unmarshal", r)
		}
	}
	// A field given twice: the last one wins, as in protobuf.
	twice := protowire.AppendString(protowire.AppendTag(mustMarshal(t, byHand[0]), reqDomain, protowire.BytesType), "second")
	if !checkAsProto(t, twice) {
		t.Error("a repeated domain was left to proto.Unmarshal")
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(mustMarshal(t, byHand[0]), 99, protowire.VarintType), 1)
	badUTF8 := protowire.AppendBytes(protowire.AppendTag(nil, reqDomain, protowire.BytesType), []byte{0xff, 'x'})
	hugeHits := protowire.AppendVarint(protowire.AppendTag(nil, reqHitsAddend, protowire.VarintType), 1<<40)
	for name, b := range map[string][]byte{
		"limit override":   mustMarshal(t, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{withLimit}}),
		"descriptor hits":  mustMarshal(t, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{withHits}}),
		"negative hits":    mustMarshal(t, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{negative}}),
		"unknown field":    unknown,
		"invalid UTF-8":    badUTF8,
		"hits over uint32": hugeHits,
		"truncated":        mustMarshal(t, byHand[0])[:20],
	} {
		if checkAsProto(t, b) {
			t.Errorf("%s: decoded by hand", name)
		}
	}
}

func TestRLSCodec_PlatformRequestInFiveAllocations(t *testing.T) {
	b := mustMarshal(t, platformRequests(1)[0])
	if n := testing.AllocsPerRun(100, func() {
		if !decodeRateLimitRequest(b, new(rlsv3.RateLimitRequest)) {
			t.Fatal("left to proto.Unmarshal")
		}
	}); n > 5 { // descriptors, entries, their two pointer slices, the strings
		t.Fatalf("%v allocations", n)
	}
}

func FuzzDecodeRateLimitRequest(f *testing.F) {
	for _, r := range platformRequests(2) {
		f.Add(mustMarshal(f, r))
	}
	withHits := entries("k", "v")
	withHits.HitsAddend = wrapperspb.UInt64(2)
	f.Add(mustMarshal(f, &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{withHits, {}}}))
	f.Add([]byte{0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) { checkAsProto(t, b) })
}

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quota-platform/quota/bench/loadgen"
)

// The request appended field by field is the one grpc-go's client would
// marshal, and its values are the ones the HTTP side sends for the same key.
func TestAppendRequest_IsTheMarshalledRequestWithTheHTTPSidesValues(t *testing.T) {
	src := loadgen.NewKeySource(loadgen.DefaultConfig().Keys, 7, 3)
	var v platformValues
	for range 200 {
		k := src.Next()
		v.set(k)
		got := appendRequest([]byte("junk"), "platform", &v)[4:]
		pb, err := proto.Marshal(newRequest("platform", &v))
		if err != nil {
			t.Fatal(err)
		}
		want := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(pb)))
		want = append(want, pb...)
		if !bytes.Equal(got, want) {
			t.Fatalf("key %+v:\n got % x\nwant % x", k, got, want)
		}
		var body map[string]string
		if err := json.Unmarshal(loadgen.AppendCheck(nil, k), &body); err != nil {
			t.Fatal(err)
		}
		req := newRequest("platform", &v)
		for _, d := range req.Descriptors {
			for _, e := range d.Entries {
				if body[e.Key] != e.Value {
					t.Fatalf("key %+v: %s=%q, the HTTP side sends %q", k, e.Key, e.Value, body[e.Key])
				}
			}
		}
	}
}

func TestAppendRequest_AllocatesNothing(t *testing.T) {
	var v platformValues
	v.set(loadgen.Key{App: 123, User: 45678, IP: 9999, Iface: 12})
	buf := appendRequest(nil, "platform", &v)
	k := loadgen.Key{App: 7, User: 8, IP: 9, Iface: 10}
	if n := testing.AllocsPerRun(100, func() {
		v.set(k)
		buf = appendRequest(buf[:0], "platform", &v)
	}); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}

// The header blocks decode to a gRPC call's headers: the first one adds
// them to the dynamic table, later ones refer to them there, and the
// stateless one leaves the table alone.
func TestRequestHeads_DecodeToAGRPCCallsHeaders(t *testing.T) {
	heads := newRequestHeads("127.0.0.1:8081", rlsPath, 10*time.Second)
	want := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: rlsPath}, {Name: ":authority", Value: "127.0.0.1:8081"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "grpcbench"}, {Name: "grpc-timeout", Value: "10S"},
	}
	var got []hpack.HeaderField
	decode := func(dec *hpack.Decoder, block []byte, what string) {
		t.Helper()
		got = got[:0]
		if _, err := dec.Write(block); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := dec.Close(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: fields %v, want %v", what, got, want)
		}
		for i := range want {
			if got[i].Name != want[i].Name || got[i].Value != want[i].Value {
				t.Fatalf("%s: field %d: %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	emit := func(f hpack.HeaderField) { got = append(got, f) }
	dec := hpack.NewDecoder(4096, emit)
	decode(dec, heads.first, "first")
	for range 3 {
		decode(dec, heads.next, "next")
	}
	if len(heads.next) != len(want) {
		t.Fatalf("later calls' block is %d bytes, want one a field", len(heads.next))
	}
	// A decoder whose table holds nothing reads the stateless block, on
	// every call.
	none := hpack.NewDecoder(0, emit)
	for range 2 {
		decode(none, heads.stateless, "stateless")
	}
	small := hpack.NewDecoder(heads.tableSize-1, emit)
	decode(small, heads.first, "first, small table")
	if _, err := small.Write(heads.next); err == nil {
		t.Fatal("tableSize is more than the fields need")
	}
	for d, want := range map[time.Duration]string{10 * time.Second: "10S", 1500 * time.Millisecond: "1500m", 20 * time.Millisecond: "20m", 3 * time.Microsecond: "3u"} {
		if got := grpcTimeout(d); got != want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

// fakeRLS answers ShouldRateLimit by the request's app: app-0 is over the
// limit, domain "bad" is INVALID_ARGUMENT, anything else OK; it keeps
// the requests it got.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	mu   sync.Mutex
	reqs []*rlsv3.RateLimitRequest
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if req.Domain == "bad" {
		return nil, status.Error(codes.InvalidArgument, "bad domain")
	}
	code := rlsv3.RateLimitResponse_OK
	if req.Descriptors[0].Entries[0].Value == "app-0" {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: code}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: 7})
	}
	return resp, nil
}

func serveFake(t *testing.T, opts ...grpc.ServerOption) (*fakeRLS, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	f := &fakeRLS{}
	rlsv3.RegisterRateLimitServiceServer(gs, f)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return f, ln.Addr().String()
}

// serverVariants are grpc-go servers the raw clients must handle: its
// default dynamic windows, static ones, and a header table too small for
// the request's fields.
var serverVariants = map[string][]grpc.ServerOption{
	"dynamic windows":    nil,
	"static windows":     {grpc.StaticStreamWindowSize(64 << 10), grpc.StaticConnWindowSize(64 << 10)},
	"small header table": {grpc.HeaderTableSize(64)},
}

// Against grpc-go's server, with its default dynamic windows (a BDP ping
// to acknowledge per request), with static ones, and with a header table
// too small for the request's fields: thousands of calls (several times
// the server's 64 KiB initial connection window, which it must grant
// again), each answer and each request as sent.
func TestRawGRPC_CallsAGRPCGoServer(t *testing.T) {
	for name, opts := range serverVariants {
		t.Run(name, func(t *testing.T) {
			f, addr := serveFake(t, opts...)
			c := newRawGRPC(newRawGRPCTarget(addr, 5*time.Second))
			defer c.close()
			var v platformValues
			var msg []byte
			const n = 3000
			for i := range n {
				v.set(loadgen.Key{App: uint64(i % 5), User: uint64(i), IP: uint64(i), Iface: 3})
				msg = appendRequest(msg[:0], "platform", &v)
				a, err := c.call(msg)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				want := int32(rlsv3.RateLimitResponse_OK)
				if i%5 == 0 {
					want = int32(rlsv3.RateLimitResponse_OVER_LIMIT)
				}
				if a.overall != want || a.statuses != 2 {
					t.Fatalf("call %d: %+v, want overall %d and 2 statuses", i, a, want)
				}
			}
			if got := c.t.stateless.Load(); got != (name == "small header table") {
				t.Fatalf("header fields sent as stateless literals: %v", got)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.reqs) != n {
				t.Fatalf("server got %d requests, want %d", len(f.reqs), n)
			}
			for i, got := range f.reqs {
				v.set(loadgen.Key{App: uint64(i % 5), User: uint64(i), IP: uint64(i), Iface: 3})
				if want := newRequest("platform", &v); !proto.Equal(got, want) {
					t.Fatalf("request %d: %v, want %v", i, got, want)
				}
			}
		})
	}
}

// A status other than OK is an error naming the status, and the
// connection goes on serving calls.
func TestRawGRPC_StatusErrorKeepsTheConnection(t *testing.T) {
	_, addr := serveFake(t)
	c := newRawGRPC(newRawGRPCTarget(addr, 5*time.Second))
	defer c.close()
	err := statusErrorKeepsTheConnection(t, c.call, func() net.Conn { return c.conn })
	if kind := grpcErrorKind(err); kind != "grpc_InvalidArgument" {
		t.Fatalf("kind %q", kind)
	}
}

// statusErrorKeepsTheConnection fails t unless a call the server answers
// INVALID_ARGUMENT fails with that status and the next call succeeds on the
// same connection; it returns the first call's error.
func statusErrorKeepsTheConnection[C comparable](t *testing.T, call func([]byte) (grpcAnswer, error), conn func() C) error {
	t.Helper()
	var v platformValues
	v.set(loadgen.Key{App: 1})
	_, err := call(appendRequest(nil, "bad", &v))
	var se *grpcStatusError
	if !errors.As(err, &se) || se.code != codes.InvalidArgument || se.msg != "bad domain" {
		t.Fatalf("error %v, want INVALID_ARGUMENT: bad domain", err)
	}
	before := conn()
	if a, err := call(appendRequest(nil, "platform", &v)); err != nil || a.overall != int32(rlsv3.RateLimitResponse_OK) {
		t.Fatalf("after the error: %+v, %v", a, err)
	}
	if conn() != before {
		t.Fatal("the connection was replaced after a status error")
	}
	return err
}

// A server that ends connections (GOAWAY at its maximum connection age)
// costs no call: the client dials again.
func TestRawGRPC_RedialsAfterGoAway(t *testing.T) {
	f, addr := serveFake(t, grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: 50 * time.Millisecond, MaxConnectionAgeGrace: 50 * time.Millisecond,
	}))
	c := newRawGRPC(newRawGRPCTarget(addr, 5*time.Second))
	defer c.close()
	var v platformValues
	v.set(loadgen.Key{App: 1})
	msg := appendRequest(nil, "platform", &v)
	conns := map[net.Conn]bool{}
	deadline := time.Now().Add(600 * time.Millisecond)
	calls := 0
	for time.Now().Before(deadline) {
		if _, err := c.call(msg); err != nil {
			t.Fatalf("call %d: %v", calls, err)
		}
		conns[c.conn] = true
		calls++
		time.Sleep(time.Duration(calls%3) * 10 * time.Millisecond)
	}
	if len(conns) < 3 {
		t.Fatalf("%d connections over %d calls: the server's GOAWAYs were not seen", len(conns), calls)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) < calls {
		t.Fatalf("server got %d requests for %d calls", len(f.reqs), calls)
	}
}

// Answers that are not valid gRPC are errors, never decisions.
func TestParseRateLimitResponse(t *testing.T) {
	good, _ := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{}, {LimitRemaining: 3}}})
	a, err := parseRateLimitResponse(good)
	if err != nil || a.overall != int32(rlsv3.RateLimitResponse_OVER_LIMIT) || a.statuses != 2 {
		t.Fatalf("%+v, %v", a, err)
	}
	for _, bad := range [][]byte{good[:len(good)-1], {0x08}, {0x12, 0x05, 0x01}, {0xff}} {
		if _, err := parseRateLimitResponse(bad); err == nil {
			t.Errorf("% x: no error", bad)
		}
	}
}

// A turn counts every call, the denied ones and, by kind, the failed ones,
// with either client.
func TestGRPCTurn_CountsDecisionsAndErrors(t *testing.T) {
	_, addr := serveFake(t)
	for _, client := range []string{clientRaw, clientGRPCGo} {
		for _, domain := range []string{"platform", "bad"} {
			o := options{grpcAddr: addr, domain: domain, grpcClient: client, conns: 4, grpcConns: 2, phase: 200 * time.Millisecond}
			g, err := newGRPCTarget(o)
			if err != nil {
				t.Fatal(err)
			}
			s, h, _ := g.run(context.Background(), o, 0, 1, nil)
			g.close()
			if s.Checks == 0 || h.TotalCount() != s.Checks {
				t.Fatalf("%s %s: %d checks, %d latencies", client, domain, s.Checks, h.TotalCount())
			}
			switch domain {
			case "platform":
				if s.Errors != 0 || s.Denied == 0 || s.Denied == s.Checks {
					t.Fatalf("%s: %+v: want no error, some (app-0) denied", client, s)
				}
			case "bad":
				if s.Errors != s.Checks || s.ErrorsByKind["grpc_InvalidArgument"] != s.Checks {
					t.Fatalf("%s: %+v: want every call an INVALID_ARGUMENT error", client, s)
				}
			}
		}
	}
}

// An open-loop turn keeps its schedule when calls fail (no pause after a
// failure, as loadgen's open loop), so the failures' latencies are not
// inflated by the client's own back-off.
func TestGRPCTurn_OpenLoopKeepsItsScheduleAfterFailures(t *testing.T) {
	_, addr := serveFake(t)
	const rate, phase = 2000.0, 300 * time.Millisecond
	o := options{grpcAddr: addr, domain: "bad", grpcClient: clientRaw, conns: 4, grpcConns: 4, phase: phase}
	g, err := newGRPCTarget(o)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	s, _, late := g.run(context.Background(), o, rate, 1, nil)
	// With a 10 ms pause per failure, 4 callers could make at most 120.
	if want := int64(rate * phase.Seconds()); s.Errors != s.Checks || s.Checks < want*3/4 {
		t.Fatalf("%d calls (%d errors), want about %d, all failed", s.Checks, s.Errors, want)
	}
	if late.TotalCount() != s.Checks {
		t.Fatalf("%d sends' lateness recorded, want one per call (%d)", late.TotalCount(), s.Checks)
	}
}

func TestTimeline_KeepsTheWorstLatencyAndLatenessOfEachWindow(t *testing.T) {
	start := time.Unix(1000, 0)
	ms := time.Millisecond
	const head = "# r\tstart 1970-01-01T00:16:40Z\n"
	type call struct{ at, lat, late time.Duration }
	for _, tc := range []struct {
		name  string
		calls []call
		want  string
	}{
		{"one call", []call{{5 * ms, 2 * ms, ms}}, head + "r\t0\t2.000\t1.000\n"},
		{"the worst of a window, each figure on its own", []call{{1 * ms, 3 * ms, 2 * ms}, {9 * ms, 7 * ms, 0}, {2 * ms, 1 * ms, 0}}, head + "r\t0\t7.000\t2.000\n"},
		{"windows apart, empty ones left out", []call{{1 * ms, 1 * ms, 0}, {35 * ms, 120 * ms, 100 * ms}}, head + "r\t0\t1.000\t0.000\nr\t30\t120.000\t100.000\n"},
		{"outside the turn ignored", []call{{-1 * ms, 9 * ms, 9 * ms}, {time.Hour, 9 * ms, 9 * ms}}, head},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := newTimeline(100 * ms)
			tl.start = start
			for _, c := range tc.calls {
				tl.recordLate(start.Add(c.at), c.late)
				tl.record(start.Add(c.at), c.lat)
			}
			var b bytes.Buffer
			if err := tl.write(&b, "r"); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
	var none *timeline
	none.record(start, ms) // a turn without a timeline records nothing, and does not panic
	none.recordLate(start, ms)
}

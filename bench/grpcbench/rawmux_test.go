package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/quota-platform/quota/bench/loadgen"
)

// Many callers on two shared connections against grpc-go's server, with
// its default dynamic windows, with static ones (several times the 64 KiB
// connection window, which it must grant again) and with a header table
// too small for the request's fields: each caller gets its own answer, and
// the server gets each request as sent.
func TestRawMux_CallersShareConnectionsToAGRPCGoServer(t *testing.T) {
	for name, opts := range serverVariants {
		t.Run(name, func(t *testing.T) {
			f, addr := serveFake(t, opts...)
			tg := newRawGRPCTarget(addr, 5*time.Second)
			muxes := []*rawMux{newRawMux(tg), newRawMux(tg)}
			defer muxes[0].close()
			defer muxes[1].close()
			const callers, calls = 16, 200
			key := func(g, i int) loadgen.Key {
				return loadgen.Key{App: uint64(i % 5), User: uint64(g*calls + i), IP: uint64(i), Iface: 3}
			}
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for g := range callers {
				k := newMuClient(muxes[g%2])
				wg.Go(func() {
					var v platformValues
					var msg []byte
					for i := range calls {
						v.set(key(g, i))
						msg = appendRequest(msg[:0], "platform", &v)
						a, err := k.call(msg)
						want := int32(rlsv3.RateLimitResponse_OK)
						if i%5 == 0 {
							want = int32(rlsv3.RateLimitResponse_OVER_LIMIT)
						}
						if err != nil || a.overall != want || a.statuses != 2 {
							errs <- errors.Join(err, errors.New("wrong answer"))
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if got := tg.stateless.Load(); got != (name == "small header table") {
				t.Fatalf("header fields sent as stateless literals: %v", got)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.reqs) != callers*calls {
				t.Fatalf("server got %d requests, want %d", len(f.reqs), callers*calls)
			}
			want := map[string]bool{}
			var v platformValues
			for g := range callers {
				for i := range calls {
					v.set(key(g, i))
					b, _ := proto.Marshal(newRequest("platform", &v))
					want[string(b)] = true
				}
			}
			for i, got := range f.reqs {
				b, _ := proto.Marshal(got)
				if !want[string(b)] {
					t.Fatalf("request %d: %v was never sent", i, got)
				}
				delete(want, string(b))
			}
		})
	}
}

// A status other than OK is an error naming it; the shared connection
// goes on serving.
func TestRawMux_StatusErrorKeepsTheConnection(t *testing.T) {
	_, addr := serveFake(t)
	m := newRawMux(newRawGRPCTarget(addr, 5*time.Second))
	defer m.close()
	statusErrorKeepsTheConnection(t, newMuClient(m).call, func() *muConn { return m.c })
}

// A server that ends connections (GOAWAY at its maximum connection age)
// costs no call: new calls go on a new connection.
func TestRawMux_RedialsAfterGoAway(t *testing.T) {
	_, addr := serveFake(t, grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: 50 * time.Millisecond, MaxConnectionAgeGrace: 50 * time.Millisecond,
	}))
	m := newRawMux(newRawGRPCTarget(addr, 5*time.Second))
	defer m.close()
	conns := map[*muConn]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(600 * time.Millisecond)
	var failed error
	for range 4 {
		k := newMuClient(m)
		wg.Go(func() {
			var v platformValues
			v.set(loadgen.Key{App: 1})
			msg := appendRequest(nil, "platform", &v)
			for time.Now().Before(deadline) {
				if _, err := k.call(msg); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				m.mu.Lock()
				c := m.c
				m.mu.Unlock()
				mu.Lock()
				conns[c] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	if len(conns) < 3 {
		t.Fatalf("%d connections in 600 ms of 50 ms ones", len(conns))
	}
}

// A turn with fewer connections than callers multiplexes them, and counts
// as the one-connection-per-caller turn does.
func TestGRPCTurn_MultiplexedCountsDecisionsAndErrors(t *testing.T) {
	_, addr := serveFake(t)
	for _, domain := range []string{"platform", "bad"} {
		o := options{grpcAddr: addr, domain: domain, grpcClient: clientRaw, conns: 8, grpcConns: 2, phase: 200 * time.Millisecond}
		g, err := newGRPCTarget(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.mux) != 2 || g.raw != nil {
			t.Fatalf("%d shared connections, %d own: want 2 shared", len(g.mux), len(g.raw))
		}
		s, _, _ := g.run(context.Background(), o, 0, 1, nil)
		g.close()
		switch {
		case s.Checks == 0:
			t.Fatalf("%s: no checks", domain)
		case domain == "platform" && (s.Errors != 0 || s.Denied == 0):
			t.Fatalf("%+v: want no error, some (app-0) denied", s)
		case domain == "bad" && s.ErrorsByKind["grpc_InvalidArgument"] != s.Checks:
			t.Fatalf("%+v: want every call an INVALID_ARGUMENT error", s)
		}
	}
}

// A run takes turns between the entries it is given, the grpc-mux entry
// included, and reports each under its own name.
func TestRun_ReportsEachEntryItTakesTurnsWith(t *testing.T) {
	_, addr := serveFake(t)
	dir := t.TempDir()
	var out bytes.Buffer
	args := []string{"-grpc", addr, "-entries", "grpc,grpc-mux", "-c", "4", "-grpc-conns", "4", "-mux-conns", "2",
		"-rounds", "2", "-phase", "100ms", "-rate", "0", "-json", dir + "/r.json", "-timeline", dir + "/t.txt"}
	if err := run(args, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"round 1 grpc ", "round 1 grpc-mux ", "round 2 grpc-mux ", "round 2 grpc ", "TOTAL    grpc ", "TOTAL    grpc-mux "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(dir + "/r.json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Options struct {
			MuxConnections int `json:"mux_connections"`
		} `json:"options"`
		Results []summary `json:"results"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 2 || r.Results[0].Entry != "grpc" || r.Results[1].Entry != "grpc-mux" || r.Results[1].Checks == 0 || r.Options.MuxConnections != 2 {
		t.Fatalf("results %+v", r)
	}
	tl, err := os.ReadFile(dir + "/t.txt")
	if err != nil || !strings.Contains(string(tl), "round 2 grpc-mux closed loop\t") {
		t.Fatalf("timeline: %v\n%.300s", err, tl)
	}
}

// A connection serves calls for longer than one call's timeout: the
// deadline of the call that dialled it is not the connection's.
func TestRawMux_ConnectionOutlivesTheCallTimeout(t *testing.T) {
	t.Parallel()
	_, addr := serveFake(t)
	const timeout = 200 * time.Millisecond
	m := newRawMux(newRawGRPCTarget(addr, timeout))
	defer m.close()
	current := func() *muConn {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.c
	}
	var v platformValues
	v.set(loadgen.Key{App: 1})
	msg := appendRequest(nil, "platform", &v)
	k := newMuClient(m)
	opened := time.Now()
	if _, err := k.call(msg); err != nil {
		t.Fatal(err)
	}
	first := current()
	for time.Since(opened) < 4*timeout {
		if _, err := k.call(msg); err != nil {
			t.Fatalf("call %v after the connection opened: %v", time.Since(opened), err)
		}
	}
	if c := current(); c != first {
		t.Fatalf("the calls went on a new connection (the first ended: %v)", first.err)
	}
}

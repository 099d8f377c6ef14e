package api_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// slotHolder is a readiness check that blocks until released: a GET
// /readyz then holds an in-flight slot with work in progress.
type slotHolder struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newSlotHolder() *slotHolder {
	return &slotHolder{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (sh *slotHolder) option() harnessOption {
	return readiness(api.ReadinessCheck{Name: "blocker", Check: func(ctx context.Context) error {
		sh.entered <- struct{}{}
		select {
		case <-sh.release:
		case <-ctx.Done():
		}
		return nil
	}})
}

// hold sends GET /readyz and returns once it holds its slot; the slot is
// freed by free or when the test ends.
func (sh *slotHolder) hold(t *testing.T, h *harness) {
	t.Helper()
	t.Cleanup(sh.free)
	go func() {
		if resp, err := http.Get(h.srv.URL + "/readyz"); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-sh.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("GET /readyz never reached its readiness check")
	}
}

func (sh *slotHolder) free() { sh.once.Do(func() { close(sh.release) }) }

// slowRequest is a POST whose body the client has only begun to send.
type slowRequest struct {
	conn net.Conn
	rest string
}

// startSlowBody sends the headers of a POST of body to path and its first
// byte, and returns once the server has begun to read the body: the request
// asks `Expect: 100-continue`, and net/http answers "100 Continue" on the
// first read of the body.
func startSlowBody(t *testing.T, h *harness, path, body string) *slowRequest {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+itoa(len(body))+"\r\nExpect: 100-continue\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("%s: want 100 Continue, got %q %v", path, line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the interim answer's blank line
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, body[:1]); err != nil {
		t.Fatal(err)
	}
	return &slowRequest{conn: conn, rest: body[1:]}
}

// finish sends the rest of the body and returns the answer's status.
func (r *slowRequest) finish(t *testing.T) int {
	t.Helper()
	if _, err := io.WriteString(r.conn, r.rest); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(r.conn), nil)
	if err != nil {
		t.Fatalf("answer to the slow request: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

var slowBodies = []struct{ path, body string }{
	{"/v1/check", `{"user_id":"slow"}`},
	{"/v1/check/batch", `{"checks":[{"user_id":"slow"}]}`},
}

// A client that sends its body slowly holds a connection but no in-flight
// slot: with a cap of 1, other checks are still decided meanwhile, and the
// slow request is decided when its body is complete.
func TestInFlightCap_SlowBodyHoldsNoSlot(t *testing.T) {
	t.Parallel()
	for _, tc := range slowBodies {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.MaxInFlight = 1 }))
			slow := startSlowBody(t, h, tc.path, tc.body)
			for i := range 3 {
				if r := h.check(`{"user_id":"u` + itoa(i) + `"}`); r.status != http.StatusOK {
					t.Fatalf("check %d while a body trickles in: %d %s", i, r.status, r.raw)
				}
			}
			if st := slow.finish(t); st != http.StatusOK {
				t.Fatalf("the slow request once its body is complete: %d", st)
			}
		})
	}
}

// Once its body is read, a request that finds every slot taken by work in
// progress gets a fast 503 overloaded, however its body arrived.
func TestInFlightCap_CompleteBodyGetsFast503WhenSlotsAreBusy(t *testing.T) {
	t.Parallel()
	for _, tc := range slowBodies {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			sh := newSlotHolder()
			h := newHarness(t, oneRule, settings(func(s *config.Settings) { s.MaxInFlight = 1 }), sh.option())
			slow := startSlowBody(t, h, tc.path, tc.body)
			sh.hold(t, h)
			began := time.Now()
			r := h.do("POST", tc.path, "application/json", tc.body)
			if r.status != http.StatusServiceUnavailable || r.errorCode() != "overloaded" || time.Since(began) > time.Second {
				t.Fatalf("with the slot busy: %d %s after %s", r.status, r.raw, time.Since(began))
			}
			if st := slow.finish(t); st != http.StatusServiceUnavailable {
				t.Fatalf("the slow request completed while the slot is busy: %d, want 503", st)
			}
			sh.free()
			deadline := time.Now().Add(5 * time.Second)
			for r := h.do("POST", tc.path, "application/json", tc.body); r.status != http.StatusOK; r = h.do("POST", tc.path, "application/json", tc.body) {
				if time.Now().After(deadline) {
					t.Fatalf("after the slot was freed: %d %s", r.status, r.raw)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// A client trickling a request is cut off: its head must arrive within
// the header timeout (5 s, from the connection's first byte for its first
// request) and its body within 10 s of its head, as net/http's
// ReadHeaderTimeout and ReadTimeout had it. Whatever it sends meanwhile,
// the connection ends with a 408 or nothing.
func TestEdge_ATrickledRequestIsCutOffAtItsTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, start string
		cutAfter    time.Duration
	}{
		{"head", "POST /v1/check HTTP/1.1\r\nHost: x\r\n", 5 * time.Second},
		{"body", "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, oneRule)
			conn, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			began := time.Now()
			if _, err := io.WriteString(conn, tc.start); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go testenv.Trickle(conn, "X", 500*time.Millisecond, stop)
			_ = conn.SetReadDeadline(began.Add(tc.cutAfter + 4*time.Second))
			// The server ends the connection with EOF, or with a reset when
			// trickled bytes arrive after it closed; only the client's own
			// deadline means it is still open.
			answer, err := io.ReadAll(conn)
			took := time.Since(began)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the connection was still open after %s", took.Round(time.Millisecond))
			}
			if took < tc.cutAfter-500*time.Millisecond || took > tc.cutAfter+2*time.Second {
				t.Errorf("cut off after %s, want %s", took.Round(time.Millisecond), tc.cutAfter)
			}
			if len(answer) > 0 && (!strings.HasPrefix(string(answer), "HTTP/1.1 408 ") || !strings.Contains(string(answer), `"request_timeout"`)) {
				t.Errorf("answer: %q, want nothing or 408 request_timeout", answer)
			}
		})
	}
}

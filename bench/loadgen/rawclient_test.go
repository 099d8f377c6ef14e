package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tinyAnswer is a 200 as quotad sends it for one rule decided in Redis.
var tinyAnswer = func() []byte {
	body := `{"allowed":true,"rules":[{"rule":"per-user","limit":100,"remaining":99,"reset_ms":1000,"tier":"hot"}]}`
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Mon, 23 Nov 2026 06:24:00 GMT\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// tinyServer answers every request on every connection with answer. It
// reads requests with a bufio.Reader and a hand-rolled Content-Length
// scan, so it allocates nothing per request: allocations measured while it
// runs are the client's.
func tinyServer(tb testing.TB, answer []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				br := bufio.NewReaderSize(c, 4096)
				for {
					n := 0
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						const cl = "content-length:"
						if len(line) > len(cl) && bytes.EqualFold(line[:len(cl)], []byte(cl)) {
							for _, d := range line[len(cl):] {
								if d >= '0' && d <= '9' {
									n = n*10 + int(d-'0')
								}
							}
						}
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// testW is a worker outside Run and its count of connections dialled.
type testW struct {
	*worker
	opened *atomic.Int64
}

// testWorker is one worker of a closed-loop single-check run against url
// with client (and token s3cret), outside Run.
func testWorker(tb testing.TB, url, client string, timeout time.Duration) testW {
	tb.Helper()
	cfg := testConfig(url, client)
	cfg.Connections = 1
	cfg.Token = "s3cret"
	if timeout > 0 {
		cfg.Timeout = timeout
	}
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	var opened atomic.Int64
	sh, closeIdle, err := newShared(context.Background(), &cfg, newReporter(nil, 1, false), &opened)
	if err != nil {
		tb.Fatal(err)
	}
	sh.end = sh.start.Add(time.Hour)
	w := newWorker(sh, 0)
	tb.Cleanup(func() {
		if w.raw != nil {
			w.raw.close()
		}
		closeIdle()
	})
	return testW{w, &opened}
}

func openedBy(w testW) int64 { return w.opened.Load() }

// scriptServer reads requests with net/http's parser (checking what the
// client sent) and lets answer write each reply on the raw connection. n
// counts requests from 0 across connections; answer returns false to
// close the connection after its reply.
func scriptServer(t *testing.T, answer func(n int, conn net.Conn) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seq atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, err := io.ReadAll(req.Body)
					if err != nil {
						return
					}
					if err := checkRequest(req, body); err != nil {
						t.Errorf("request %d: %v", seq.Load(), err)
						return
					}
					if !answer(int(seq.Add(1)-1), c) {
						return
					}
				}
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// checkRequest is what every request of testWorker must look like.
func checkRequest(req *http.Request, body []byte) error {
	var check map[string]string
	switch {
	case req.Method != http.MethodPost || req.URL.Path != "/v1/check" || req.Proto != "HTTP/1.1":
		return errors.New("request line " + req.Method + " " + req.URL.String() + " " + req.Proto)
	case req.Header.Get("Content-Type") != "application/json":
		return errors.New("content type " + req.Header.Get("Content-Type"))
	case req.Header.Get("Authorization") != "Bearer s3cret":
		return errors.New("authorization " + req.Header.Get("Authorization"))
	case req.ContentLength != int64(len(body)) || req.Host == "" || len(req.TransferEncoding) > 0:
		return errors.New("framing: length " + strconv.FormatInt(req.ContentLength, 10) + " host " + req.Host)
	case json.Unmarshal(body, &check) != nil || len(check) != 4 || check["app_id"] == "":
		return errors.New("body " + string(body))
	}
	return nil
}

// write writes s to c, ignoring errors (the client may have gone).
func write(c net.Conn, s string) { _, _ = io.WriteString(c, s) }

const okBody = `{"allowed":true,"rules":[{"rule":"r","tier":"warm"}]}`

func okAnswer(extraHeaders string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extraHeaders +
		"Content-Length: " + strconv.Itoa(len(okBody)) + "\r\n\r\n" + okBody
}

// roundTrip sends one request of w's raw client.
func roundTrip(t *testing.T, w testW) (rawAnswer, bool, error) {
	t.Helper()
	w.buf = AppendCheck(w.buf[:0], w.keys.Next())
	return w.raw.roundTrip(w.buf)
}

func mustAnswer(t *testing.T, w testW, wantStatus int, wantBody string) rawAnswer {
	t.Helper()
	a, _, err := roundTrip(t, w)
	if err != nil {
		t.Fatalf("request failed: %v", err)
	}
	if a.status != wantStatus || string(a.body) != wantBody {
		t.Fatalf("got %d %q, want %d %q", a.status, a.body, wantStatus, wantBody)
	}
	return a
}

func TestRawClientReadsContentLengthBodiesOnOneKeptAliveConnection(t *testing.T) {
	t.Parallel()
	url := scriptServer(t, func(n int, c net.Conn) bool {
		if n%2 == 1 {
			write(c, okAnswer("quota-enforced: FALSE\r\n"))
		} else {
			write(c, okAnswer(""))
		}
		return true
	})
	w := testWorker(t, url, ClientRaw, 0)
	for i := range 5 {
		a := mustAnswer(t, w, 200, okBody)
		if a.unenforced != (i%2 == 1) {
			t.Errorf("request %d: unenforced %v", i, a.unenforced)
		}
	}
	if n := openedBy(w); n != 1 {
		t.Errorf("opened %d connections for 5 requests, want 1", n)
	}
}

func TestRawClientReadsChunkedBodies(t *testing.T) {
	t.Parallel()
	url := scriptServer(t, func(n int, c net.Conn) bool {
		// A chunk extension, an upper-case hex size and a trailer field.
		write(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"+
			"b;ext=1\r\n{\"allowed\":\r\n"+
			"19\r\ntrue,\"rules\":[{\"tier\":\"co\r\n"+
			"5\r\nld\"}]\r\n"+
			"1\r\n}\r\n"+
			"0\r\nX-Trailer: yes\r\n\r\n")
		return true
	})
	w := testWorker(t, url, ClientRaw, 0)
	for range 3 {
		a := mustAnswer(t, w, 200, `{"allowed":true,"rules":[{"tier":"cold"}]}`)
		if tierClass(a.body) != "cold" {
			t.Errorf("tier %q", tierClass(a.body))
		}
	}
	if n := openedBy(w); n != 1 {
		t.Errorf("opened %d connections for 3 chunked answers, want 1", n)
	}
}

func TestRawClientClosesAfterConnectionClose(t *testing.T) {
	t.Parallel()
	var closes atomic.Int64
	url := scriptServer(t, func(n int, c net.Conn) bool {
		write(c, okAnswer("Connection: close\r\n"))
		closes.Add(1)
		// Keep the connection open, as a lazy server may: the client
		// must close it because the answer said so, not wait for EOF.
		return true
	})
	w := testWorker(t, url, ClientRaw, 0)
	for range 3 {
		mustAnswer(t, w, 200, okBody)
		if w.raw.conn != nil {
			t.Fatal("connection kept after Connection: close")
		}
	}
	if n := openedBy(w); n != 3 {
		t.Errorf("opened %d connections for 3 answers saying Connection: close, want 3", n)
	}
}

func TestRawClientReadsUnframedBodyToEndOfConnection(t *testing.T) {
	t.Parallel()
	url := scriptServer(t, func(n int, c net.Conn) bool {
		write(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"+okBody)
		return false
	})
	w := testWorker(t, url, ClientRaw, 0)
	mustAnswer(t, w, 200, okBody)
	mustAnswer(t, w, 200, okBody)
	if n := openedBy(w); n != 2 {
		t.Errorf("opened %d connections, want 2", n)
	}
}

func TestRawClientSkipsInterimResponses(t *testing.T) {
	t.Parallel()
	url := scriptServer(t, func(n int, c net.Conn) bool {
		write(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"+okAnswer(""))
		return true
	})
	w := testWorker(t, url, ClientRaw, 0)
	mustAnswer(t, w, 200, okBody)
	mustAnswer(t, w, 200, okBody)
}

func TestRawClientReportsServerClosingMidResponse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer string
		inBody bool
	}{
		{"before any byte of a fresh connection", "", false},
		{"in the status line", "HTTP/1.1 20", false},
		{"in the headers", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n", false},
		{"in a Content-Length body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"allowed\"", true},
		{"in a chunked body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n{\"allowed\"", true},
		{"before the last chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := scriptServer(t, func(n int, c net.Conn) bool {
				if n == 0 {
					write(c, tc.answer)
					return false
				}
				write(c, okAnswer(""))
				return true
			})
			w := testWorker(t, url, ClientRaw, 0)
			_, inBody, err := roundTrip(t, w)
			if err == nil || classify(err) != "eof" || inBody != tc.inBody {
				t.Fatalf("error %v (kind %q), in body %v; want eof, in body %v", err, classify(err), inBody, tc.inBody)
			}
			if w.raw.conn != nil {
				t.Error("connection kept after an error")
			}
			mustAnswer(t, w, 200, okBody) // on a new connection
			if n := openedBy(w); n != 2 {
				t.Errorf("opened %d connections, want 2", n)
			}
		})
	}
}

func TestRawClientRejectsMalformedResponses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer string
		inBody bool
	}{
		{"malformed status line", "garbage\r\n\r\n", false},
		{"status code not digits", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"status code too short", "HTTP/1.1 20 OK\r\n\r\n", false},
		{"HTTP/2 status line", "HTTP/2 200\r\n\r\n", false},
		{"101 never asked for", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", false},
		{"header line without colon", "HTTP/1.1 200 OK\r\nContent-Length 2\r\n\r\n{}", false},
		{"folded header line", "HTTP/1.1 200 OK\r\nX-A: 1\r\n  continued\r\nContent-Length: 2\r\n\r\n{}", false},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n{}", false},
		{"Content-Length not a number", "HTTP/1.1 200 OK\r\nContent-Length: 2a\r\n\r\n{}", false},
		{"negative Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}", false},
		{"conflicting Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", false},
		{"Content-Length beyond 16 MiB", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n{}", false},
		{"gzip transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", false},
		{"header line longer than the buffer", "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("x", rawBufSize) + "\r\n\r\n", false},
		{"chunk size not hex", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", true},
		{"chunk without its CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}xx\r\n0\r\n\r\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := scriptServer(t, func(n int, c net.Conn) bool {
				if n == 0 {
					write(c, tc.answer)
					return true // the client must not wait for more
				}
				write(c, okAnswer(""))
				return true
			})
			w := testWorker(t, url, ClientRaw, 2*time.Second)
			_, inBody, err := roundTrip(t, w)
			var me *malformedError
			if !errors.As(err, &me) || classify(err) != "malformed_response" || inBody != tc.inBody {
				t.Fatalf("error %v (kind %q), in body %v; want a malformed response, in body %v", err, classify(err), inBody, tc.inBody)
			}
			if w.raw.conn != nil {
				t.Error("connection kept after a malformed response")
			}
			mustAnswer(t, w, 200, okBody)
		})
	}
}

func TestRawClientTimesOutOnSlowServer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		first  func(c net.Conn)
		inBody bool
	}{
		{"no answer", func(c net.Conn) { time.Sleep(time.Second) }, false},
		{"headers then a stalled body", func(c net.Conn) {
			write(c, "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"allowed\"")
			time.Sleep(time.Second)
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := scriptServer(t, func(n int, c net.Conn) bool {
				if n == 0 {
					tc.first(c)
					return false
				}
				write(c, okAnswer(""))
				return true
			})
			w := testWorker(t, url, ClientRaw, 100*time.Millisecond)
			start := time.Now()
			_, inBody, err := roundTrip(t, w)
			took := time.Since(start)
			if err == nil || classify(err) != "timeout" || inBody != tc.inBody {
				t.Fatalf("error %v (kind %q), in body %v; want timeout, in body %v", err, classify(err), inBody, tc.inBody)
			}
			if took < 90*time.Millisecond || took > 600*time.Millisecond {
				t.Errorf("timed out after %s, want ~100 ms", took)
			}
			mustAnswer(t, w, 200, okBody)
			if n := openedBy(w); n != 2 {
				t.Errorf("opened %d connections, want 2", n)
			}
		})
	}
}

func TestRawClientResendsOnceWhenAKeptAliveConnectionWasClosed(t *testing.T) {
	t.Parallel()
	// The server answers, then closes the connection while it idles (as an
	// idle timeout does). The next request must not fail for it.
	url := scriptServer(t, func(n int, c net.Conn) bool {
		write(c, okAnswer(""))
		return false
	})
	w := testWorker(t, url, ClientRaw, 0)
	mustAnswer(t, w, 200, okBody)
	time.Sleep(50 * time.Millisecond) // let the close arrive
	mustAnswer(t, w, 200, okBody)
	if n := openedBy(w); n != 2 {
		t.Errorf("opened %d connections, want 2", n)
	}
}

func TestRawClientDoesNotResendOnAFreshConnection(t *testing.T) {
	t.Parallel()
	var seen atomic.Int64
	url := scriptServer(t, func(n int, c net.Conn) bool {
		seen.Add(1)
		return false // close without answering
	})
	w := testWorker(t, url, ClientRaw, 0)
	if _, _, err := roundTrip(t, w); classify(err) != "eof" {
		t.Fatalf("error %v, want eof", err)
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("server saw the request %d times, want once", n)
	}
}

// TestWorkerCountsStatusesAndKeepsTheConnection: a 429 is denied, a 503
// and a 500 count by status, and none of them costs the raw client its
// connection.
func TestWorkerCountsStatusesAndKeepsTheConnection(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		url := scriptServer(t, func(n int, c net.Conn) bool {
			switch n % 4 {
			case 0:
				write(c, okAnswer(""))
			case 1:
				write(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 17\r\n\r\n{\"allowed\":false}")
			case 2:
				write(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 13\r\n\r\n{\"error\":\"x\"}")
			default:
				write(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
			}
			return true
		})
		w := testWorker(t, url, client, 0)
		for range 8 {
			if !w.do(time.Now()) {
				t.Fatalf("exchange failed: %v", w.kinds)
			}
		}
		if w.requests.Load() != 8 || w.allowed.Load() != 2 || w.denied.Load() != 2 || w.errors.Load() != 4 ||
			w.statuses[503] != 2 || w.statuses[500] != 2 || len(w.kinds) != 0 {
			t.Errorf("requests %d allowed %d denied %d errors %d statuses %v kinds %v",
				w.requests.Load(), w.allowed.Load(), w.denied.Load(), w.errors.Load(), w.statuses, w.kinds)
		}
		if w.tiers["warm"] == nil || w.tiers["warm"].TotalCount() != 2 {
			t.Errorf("tiers %v", w.tiers)
		}
		if n := openedBy(w); client == ClientRaw && n != 1 {
			t.Errorf("opened %d connections, want 1", n)
		}
	})
}

func TestRunCountsMalformedResponses(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		url := scriptServer(t, func(n int, c net.Conn) bool {
			write(c, "HTTP/1.1 2xx Fine\r\nContent-Length: 0\r\n\r\n")
			return true
		})
		cfg := testConfig(url, client)
		cfg.Token = "s3cret"
		cfg.Connections = 2
		cfg.Duration = 100 * time.Millisecond
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 || res.ErrorsByKind["malformed_response"] != res.Requests {
			t.Errorf("result %+v", res)
		}
		assertConsistent(t, res)
	})
}

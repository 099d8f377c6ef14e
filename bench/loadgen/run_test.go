package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tally is what a stub server answered.
type tally struct {
	mu                                  sync.Mutex
	requests, ok, denied, failed, unenf int64
	checksAllowed, checksDenied, bad    int64
	seq                                 atomic.Int64
	badNote                             string
}

func (c *tally) add(f func(*tally)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *tally) badRequest(w http.ResponseWriter, note string) {
	c.add(func(c *tally) { c.bad++; c.badNote = note })
	w.WriteHeader(http.StatusBadRequest)
}

// clients are the HTTP clients every Run test runs with.
var clients = []string{ClientRaw, ClientNetHTTP}

// eachClient runs f as a parallel subtest per client.
func eachClient(t *testing.T, f func(t *testing.T, client string)) {
	t.Helper()
	t.Parallel()
	for _, client := range clients {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			f(t, client)
		})
	}
}

func testConfig(url, client string) Config {
	cfg := DefaultConfig()
	cfg.URL = url
	cfg.Client = client
	cfg.Connections = 4
	cfg.Duration = 300 * time.Millisecond
	cfg.Timeout = 5 * time.Second
	cfg.Keys.Dist = DistZipf
	return cfg
}

// checkServer answers /v1/check: every 7th request 500, then even
// requests 200 and odd ones 429; every 5th answer says Quota-Enforced: false.
func checkServer(t *testing.T, c *tally, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/check" || r.Header.Get("Content-Type") != "application/json" {
			c.badRequest(w, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
			return
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+token && !(token == "" && got == "") {
			c.badRequest(w, "authorization "+got)
			return
		}
		var body map[string]string
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body) != 4 ||
			body["app_id"] == "" || body["user_id"] == "" || body["ip"] == "" || body["interface_id"] == "" {
			c.badRequest(w, "body")
			return
		}
		n := c.seq.Add(1)
		unenforced := n%5 == 0
		if unenforced {
			w.Header().Set("Quota-Enforced", "false")
		}
		switch {
		case n%7 == 0:
			c.add(func(c *tally) { c.requests++; c.failed++ })
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"code":"internal","message":"boom"}}`)
			return
		case n%2 == 0:
			c.add(func(c *tally) {
				c.requests++
				c.ok++
				if unenforced {
					c.unenf++
				}
			})
			io.WriteString(w, `{"allowed":true,"rules":[]}`)
		default:
			c.add(func(c *tally) {
				c.requests++
				c.denied++
				if unenforced {
					c.unenf++
				}
			})
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"allowed":false,"rules":[]}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func assertConsistent(t *testing.T, res *Result) {
	t.Helper()
	if res.Allowed+res.Denied+res.ErrorChecks != res.Checks {
		t.Errorf("allowed %d + denied %d + error checks %d != checks %d", res.Allowed, res.Denied, res.ErrorChecks, res.Checks)
	}
	var kinds int64
	for _, n := range res.ErrorsByKind {
		kinds += n
	}
	if kinds != res.Errors {
		t.Errorf("errors by kind %v add up to %d, not %d", res.ErrorsByKind, kinds, res.Errors)
	}
	if res.Histogram.TotalCount() != res.Requests {
		t.Errorf("histogram holds %d latencies for %d requests", res.Histogram.TotalCount(), res.Requests)
	}
	var inTimeline int64
	for i, p := range res.Timeline {
		inTimeline += p.Requests
		if i > 0 && p.Second < res.Timeline[i-1].Second {
			t.Errorf("timeline goes back: %+v after %+v", p, res.Timeline[i-1])
		}
	}
	if inTimeline != res.Requests {
		t.Errorf("timeline points hold %d requests, the run %d", inTimeline, res.Requests)
	}
}

// TestRunTimelineHasAPointAboutEverySecond: a run of 2.5 s has at least two
// points, each with requests, the seconds rising.
func TestRunTimelineHasAPointAboutEverySecond(t *testing.T) {
	t.Parallel()
	var c tally
	srv := checkServer(t, &c, "")
	cfg := testConfig(srv.URL, ClientRaw)
	cfg.Rate = 200
	cfg.Duration = 2500 * time.Millisecond
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Timeline) < 2 {
		t.Fatalf("timeline %+v: want a point about every second of 2.5 s", res.Timeline)
	}
	for _, p := range res.Timeline {
		if p.Requests <= 0 || p.P99Ms < p.P50Ms || p.MaxMs < p.P99Ms {
			t.Errorf("point %+v", p)
		}
	}
	assertConsistent(t, res)
}

func TestRunClosedLoopCountsAddUp(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		var c tally
		srv := checkServer(t, &c, "s3cret")
		cfg := testConfig(srv.URL, client)
		cfg.Token = "s3cret"
		var progress bytes.Buffer
		cfg.Progress = &progress
		cfg.Duration = 1200 * time.Millisecond
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.bad != 0 {
			t.Fatalf("server saw %d malformed requests (last: %s)", c.bad, c.badNote)
		}
		if res.Requests == 0 || res.Requests != c.requests || res.Checks != res.Requests {
			t.Errorf("client counted %d requests (%d checks), server %d", res.Requests, res.Checks, c.requests)
		}
		if res.Allowed != c.ok || res.Denied != c.denied || res.Errors != c.failed ||
			res.ErrorsByKind["http_500"] != c.failed || res.Unenforced != c.unenf {
			t.Errorf("client allowed/denied/errors/unenforced %d/%d/%d(%v)/%d, server %d/%d/%d/%d",
				res.Allowed, res.Denied, res.Errors, res.ErrorsByKind, res.Unenforced, c.ok, c.denied, c.failed, c.unenf)
		}
		if c.failed == 0 || c.denied == 0 || c.ok == 0 || c.unenf == 0 {
			t.Errorf("the run was too short to see every answer: %+v", &c)
		}
		// net/http may now and then replace a connection; one per request
		// would mean keep-alive is broken. The raw client keeps its own
		// connection through 429s and 500s.
		if res.ConnsOpened < 1 || res.ConnsOpened > 2*int64(cfg.Connections) ||
			(client == ClientRaw && res.ConnsOpened != int64(cfg.Connections)) {
			t.Errorf("opened %d connections for %d workers: keep-alive broken?", res.ConnsOpened, cfg.Connections)
		}
		if res.Client != client {
			t.Errorf("result names client %q, ran %q", res.Client, client)
		}
		if res.Mode != "closed" || res.Late != 0 || res.P50Ms <= 0 || res.MaxMs < res.P99Ms || res.P99Ms < res.P50Ms {
			t.Errorf("result %+v", res)
		}
		if !bytes.Contains(progress.Bytes(), []byte("\r")) || !bytes.Contains(progress.Bytes(), []byte("req/s")) {
			t.Errorf("no progress line in %q", progress.String())
		}
		assertConsistent(t, res)
	})
}

func TestRunOpenLoopSendsExactlyRateTimesDuration(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		var c tally
		srv := checkServer(t, &c, "")
		cfg := testConfig(srv.URL, client)
		cfg.Rate = 400
		cfg.Duration = 500 * time.Millisecond
		cfg.Keys.Identities = 10_000_000
		start := time.Now()
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 450*time.Millisecond {
			t.Errorf("200 sends at 400/s took only %s", took)
		}
		if c.bad != 0 {
			t.Fatalf("server saw %d malformed requests (last: %s)", c.bad, c.badNote)
		}
		if res.Requests != 200 || c.requests != 200 {
			t.Errorf("sent %d requests (server saw %d), want 400/s * 0.5 s = 200", res.Requests, c.requests)
		}
		if res.Allowed != c.ok || res.Denied != c.denied || res.Errors != c.failed || res.Unenforced != c.unenf {
			t.Errorf("client %d/%d/%d/%d, server %d/%d/%d/%d",
				res.Allowed, res.Denied, res.Errors, res.Unenforced, c.ok, c.denied, c.failed, c.unenf)
		}
		if res.Mode != "open" || res.Late < 0 || res.Late > res.Requests || res.Rate != 400 {
			t.Errorf("result %+v", res)
		}
		assertConsistent(t, res)
	})
}

// TestRunOpenLoopMeasuresFromIntendedTime: one connection to a server that
// takes 20 ms, asked for 200 req/s, can only send 50/s. Latency must then
// grow with the backlog (measured from the intended send times), and the
// sends count as late.
func TestRunOpenLoopMeasuresFromIntendedTime(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			time.Sleep(20 * time.Millisecond)
		}))
		t.Cleanup(srv.Close)
		cfg := testConfig(srv.URL, client)
		cfg.Connections = 1
		cfg.Rate = 200
		cfg.Duration = 200 * time.Millisecond // 40 intended sends, ~0.8 s of work
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 40 || res.Allowed != 40 {
			t.Fatalf("requests %d allowed %d, want 40", res.Requests, res.Allowed)
		}
		if res.Late < 30 {
			t.Errorf("only %d of 40 sends late", res.Late)
		}
		// The last send was intended at 195 ms and finished after ~800 ms.
		if res.MaxMs < 400 {
			t.Errorf("max latency %.1f ms: not measured from the intended time", res.MaxMs)
		}
		assertConsistent(t, res)
	})
}

func TestRunBatchCountsChecks(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		const k = 10
		var c tally
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/check/batch" {
				c.badRequest(w, r.URL.Path)
				return
			}
			var body struct {
				Checks []map[string]string `json:"checks"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Checks) != k {
				c.badRequest(w, "body")
				return
			}
			n := c.seq.Add(1)
			if n%4 == 3 {
				c.add(func(c *tally) { c.requests++; c.failed++ })
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			var out bytes.Buffer
			out.WriteString(`{"results":[`)
			var allowed int64
			for i := range k {
				if i > 0 {
					out.WriteByte(',')
				}
				ok := (int(n)+i)%3 != 0
				if ok {
					allowed++
				}
				// the nested per-rule verdict says the opposite, to be ignored
				out.WriteString(`{"allowed":` + strconv.FormatBool(ok) +
					`,"rules":[{"rule":"r","limit":1,"remaining":0,"tier":"hot","allowed":` + strconv.FormatBool(!ok) + `}]}`)
			}
			out.WriteString(`]}`)
			c.add(func(c *tally) {
				c.requests++
				c.ok++
				c.checksAllowed += allowed
				c.checksDenied += k - allowed
			})
			w.Write(out.Bytes())
		}))
		t.Cleanup(srv.Close)
		cfg := testConfig(srv.URL, client)
		cfg.Batch = k
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c.bad != 0 {
			t.Fatalf("server saw %d malformed requests (last: %s)", c.bad, c.badNote)
		}
		if res.Requests == 0 || res.Requests != c.requests || res.Checks != k*res.Requests {
			t.Errorf("client %d requests / %d checks, server %d requests", res.Requests, res.Checks, c.requests)
		}
		if res.Allowed != c.checksAllowed || res.Denied != c.checksDenied ||
			res.Errors != c.failed || res.ErrorChecks != k*c.failed || res.ErrorsByKind["http_503"] != c.failed {
			t.Errorf("client allowed/denied/errors %d/%d/%d (%v), server %d/%d/%d",
				res.Allowed, res.Denied, res.Errors, res.ErrorsByKind, c.checksAllowed, c.checksDenied, c.failed)
		}
		assertConsistent(t, res)
	})
}

func TestRunBatchRejectsMalformedAnswers(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, `{"results":[{"allowed":true}]}`) // 1 result for 3 checks
		}))
		t.Cleanup(srv.Close)
		cfg := testConfig(srv.URL, client)
		cfg.Batch = 3
		cfg.Duration = 100 * time.Millisecond
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 || res.Errors != res.Requests || res.ErrorsByKind["bad_batch_response"] != res.Requests || res.Allowed != 0 {
			t.Errorf("result %+v", res)
		}
		assertConsistent(t, res)
	})
}

func TestRunCountsTransportErrors(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		cfg := testConfig("http://"+addr, client)
		cfg.Connections = 2
		cfg.Duration = 100 * time.Millisecond
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 || res.Errors != res.Requests || res.ErrorsByKind["conn_refused"] != res.Requests {
			t.Errorf("result %+v", res)
		}
		assertConsistent(t, res)
	})
}

func TestRunStopsOnCancel(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		var c tally
		srv := checkServer(t, &c, "")
		for _, rate := range []float64{0, 1} {
			cfg := testConfig(srv.URL, client)
			cfg.Duration = time.Hour
			cfg.Rate = rate
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			start := time.Now()
			res, err := Run(ctx, cfg)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("rate %g: Run took %s after cancel", rate, took)
			}
			if res.Requests == 0 {
				t.Errorf("rate %g: no request sent", rate)
			}
			assertConsistent(t, res)
		}
	})
}

func TestRunRejectsInvalidConfig(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		cfg := testConfig("http://127.0.0.1:1", client)
		cfg.Connections = 0
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Error("Run accepted -c 0")
		}
	})
}

// BenchmarkWorkerDo measures the client side of one exchange, per
// client, against tinyServer (rawclient_test.go), which allocates nothing
// per request: the allocations reported are the generator's own.
func BenchmarkWorkerDo(b *testing.B) {
	addr := tinyServer(b, tinyAnswer)
	for _, client := range clients {
		b.Run(client, func(b *testing.B) {
			w := testWorker(b, "http://"+addr, client, 0)
			b.ReportAllocs()
			for b.Loop() {
				w.do(time.Now())
			}
			if w.allowed.Load() != w.requests.Load() {
				b.Fatalf("%d of %d allowed (errors %v %v)", w.allowed.Load(), w.requests.Load(), w.kinds, w.statuses)
			}
		})
	}
}

func TestRunCountsTimeouts(t *testing.T) {
	eachClient(t, func(t *testing.T, client string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			time.Sleep(150 * time.Millisecond) // past the client's 30 ms timeout
		}))
		t.Cleanup(srv.Close)
		cfg := testConfig(srv.URL, client)
		cfg.Connections = 2
		cfg.Duration = 200 * time.Millisecond
		cfg.Timeout = 30 * time.Millisecond
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 || res.ErrorsByKind["timeout"] != res.Requests || res.Allowed != 0 {
			t.Errorf("result %+v", res)
		}
		assertConsistent(t, res)
	})
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "dial", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}, "conn_refused"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "conn_reset"},
		{fmt.Errorf("write: %w", syscall.EPIPE), "conn_reset"},
		{fmt.Errorf("post: %w", context.DeadlineExceeded), "timeout"},
		{&url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, "eof"},
		{io.ErrUnexpectedEOF, "eof"},
		{errors.New("tls: bad certificate"), "transport"},
		{errBadStatusLine, "malformed_response"},
		{fmt.Errorf("read head: %w", errBadChunk), "malformed_response"},
		{&url.Error{Op: "Post", URL: "http://x", Err: errors.New(`net/http: HTTP/1.x transport connection broken: malformed HTTP status code "2xx"`)}, "malformed_response"},
	}
	for _, tc := range cases {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

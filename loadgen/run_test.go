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

func testConfig(url string) Config {
	cfg := DefaultConfig()
	cfg.URL = url
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
}

func TestRunClosedLoopCountsAddUp(t *testing.T) {
	t.Parallel()
	var c tally
	srv := checkServer(t, &c, "s3cret")
	cfg := testConfig(srv.URL)
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
	// would mean keep-alive is broken.
	if res.ConnsOpened < 1 || res.ConnsOpened > 2*int64(cfg.Connections) {
		t.Errorf("opened %d connections for %d workers: keep-alive broken?", res.ConnsOpened, cfg.Connections)
	}
	if res.Mode != "closed" || res.Late != 0 || res.P50Ms <= 0 || res.MaxMs < res.P99Ms || res.P99Ms < res.P50Ms {
		t.Errorf("result %+v", res)
	}
	if !bytes.Contains(progress.Bytes(), []byte("\r")) || !bytes.Contains(progress.Bytes(), []byte("req/s")) {
		t.Errorf("no progress line in %q", progress.String())
	}
	assertConsistent(t, res)
}

func TestRunOpenLoopSendsExactlyRateTimesDuration(t *testing.T) {
	t.Parallel()
	var c tally
	srv := checkServer(t, &c, "")
	cfg := testConfig(srv.URL)
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
}

// TestRunOpenLoopMeasuresFromIntendedTime: one connection to a server that
// takes 20 ms, asked for 200 req/s, can only send 50/s. Latency must then
// grow with the backlog (measured from the intended send times), and the
// sends count as late.
func TestRunOpenLoopMeasuresFromIntendedTime(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(srv.URL)
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
}

func TestRunBatchCountsChecks(t *testing.T) {
	t.Parallel()
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
	cfg := testConfig(srv.URL)
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
}

func TestRunBatchRejectsMalformedAnswers(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"results":[{"allowed":true}]}`) // 1 result for 3 checks
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(srv.URL)
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
}

func TestRunCountsTransportErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := testConfig("http://" + addr)
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
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	var c tally
	srv := checkServer(t, &c, "")
	for _, rate := range []float64{0, 1} {
		cfg := testConfig(srv.URL)
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
}

func TestRunRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	cfg := testConfig("http://127.0.0.1:1")
	cfg.Connections = 0
	if _, err := Run(context.Background(), cfg); err == nil {
		t.Error("Run accepted -c 0")
	}
}

// BenchmarkWorkerDo measures the client side of one exchange against a
// trivial server: its allocations are the generator's per-request cost.
func BenchmarkWorkerDo(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"allowed":true,"rules":[]}`)
	}))
	defer srv.Close()
	cfg := testConfig(srv.URL)
	cfg.Connections = 1
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	sh := &shared{
		cfg: &cfg, endpoint: cfg.endpoint(), header: http.Header{"Content-Type": {"application/json"}},
		client: &http.Client{Transport: tr, Timeout: cfg.Timeout}, rep: newReporter(nil, 1, false),
		done: make(chan struct{}), start: time.Now(), end: time.Now().Add(time.Hour), perCheck: 1,
	}
	w := newWorker(sh, 0)
	b.ReportAllocs()
	for b.Loop() {
		w.do(time.Now())
	}
	if w.allowed.Load() != w.requests.Load() {
		b.Fatalf("%d of %d allowed", w.allowed.Load(), w.requests.Load())
	}
}

func TestRunCountsTimeouts(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(150 * time.Millisecond) // past the client's 30 ms timeout
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(srv.URL)
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
	}
	for _, tc := range cases {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// LateThreshold is how far behind its intended time an open-loop send may
// start before it counts as late.
const LateThreshold = time.Millisecond

// errorBackoff is the pause a closed-loop worker takes after a transport
// error, so a dead server is not hammered with dials in a tight loop.
const errorBackoff = 10 * time.Millisecond

// flushEvery is how often a worker hands its latency histogram to the
// reporter: twice per progress line, so each line has fresh percentiles.
const flushEvery = 500 * time.Millisecond

// Run sends load as cfg says until cfg.Duration has passed or ctx is
// cancelled (then no new request starts; those in flight finish), and
// returns the merged result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := newReporter(cfg.Progress, cfg.Connections, cfg.Mode() == "open")
	var opened atomic.Int64
	sh, closeIdle, err := newShared(ctx, &cfg, rep, &opened)
	if err != nil {
		return nil, err
	}
	defer closeIdle()
	start := sh.start
	workers := make([]*worker, cfg.Connections)
	for i := range workers {
		workers[i] = newWorker(sh, i)
	}
	rep.workers = workers
	rep.start = start
	repDone := make(chan struct{})
	go func() { rep.loop(); close(repDone) }()

	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.run)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(rep.stop)
	<-repDone

	// The reporter has merged every histogram workers handed over; what is
	// left in the workers' current histograms is merged here.
	hist := rep.cum
	res := &Result{
		Mode:         cfg.Mode(),
		Client:       cfg.clientKind(),
		URL:          sh.endpoint,
		Seconds:      round(elapsed.Seconds(), 3),
		ErrorsByKind: map[string]int64{},
		Connections:  cfg.Connections,
		ConnsOpened:  opened.Load(),
		Rate:         cfg.Rate,
		Dist:         cfg.Keys.Dist,
		Batch:        cfg.Batch,
		Identities:   cfg.Keys.Identities,
		Seed:         cfg.Seed,
		LateMs:       float64(LateThreshold) / float64(time.Millisecond),
	}
	if cfg.Keys.Dist == DistZipf {
		res.ZipfS = cfg.Keys.ZipfS
	}
	for _, w := range workers {
		if w.raw != nil {
			w.raw.close()
		}
		if w.hist != nil {
			hist.Merge(w.hist)
			rep.win.Merge(w.hist)
		}
		res.Requests += w.requests.Load()
		res.Checks += w.checks.Load()
		res.Allowed += w.allowed.Load()
		res.Denied += w.denied.Load()
		res.Errors += w.errors.Load()
		res.ErrorChecks += w.errorChecks
		res.Unenforced += w.unenforced
		res.Late += w.late.Load()
		for k, n := range w.kinds {
			res.ErrorsByKind[k] += n
		}
		for code, n := range w.statuses {
			res.ErrorsByKind["http_"+strconv.Itoa(code)] += n
		}
	}
	if s := elapsed.Seconds(); s > 0 {
		res.RPS = round(float64(res.Requests)/s, 1)
		res.ChecksPerSec = round(float64(res.Checks)/s, 1)
	}
	res.Histogram = hist
	res.setLatencies(Summarize(hist))
	if cpu := SelfCPU(); cpu > 0 {
		res.CPUSeconds = round(cpu.Seconds(), 3)
		if res.Requests > 0 {
			res.CPUPerRequestUs = round(float64(cpu.Microseconds())/float64(res.Requests), 2)
		}
	}
	res.Tiers = tierStats(workers)
	rep.sample(time.Now()) // what the workers kept to the end
	res.Timeline = rep.points
	return res, nil
}

// newShared builds a run's shared state, starting now, with the client
// cfg names; opened counts the connections dialled. closeIdle closes the
// net/http client's idle connections (the raw clients' connections are
// the workers').
func newShared(ctx context.Context, cfg *Config, rep *reporter, opened *atomic.Int64) (sh *shared, closeIdle func(), err error) {
	sh = &shared{
		cfg:      cfg,
		endpoint: cfg.endpoint(),
		rep:      rep,
		done:     ctx.Done(),
		perCheck: cfg.ChecksPerRequest(),
	}
	closeIdle = func() {}
	if cfg.clientKind() == ClientRaw {
		sh.raw, err = newRawTarget(sh.endpoint, cfg.Token, cfg.Timeout, opened)
		if err != nil {
			return nil, nil, err
		}
	} else {
		dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
		tr := &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dialer.DialContext(ctx, network, addr)
				if err == nil {
					opened.Add(1)
				}
				return c, err
			},
			MaxIdleConns:        cfg.Connections,
			MaxIdleConnsPerHost: cfg.Connections,
			MaxConnsPerHost:     cfg.Connections,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
			TLSHandshakeTimeout: cfg.Timeout,
		}
		closeIdle = tr.CloseIdleConnections
		sh.client = &http.Client{
			Transport:     tr,
			Timeout:       cfg.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		sh.header = http.Header{"Content-Type": {"application/json"}}
		if cfg.Token != "" {
			sh.header["Authorization"] = []string{"Bearer " + cfg.Token}
		}
	}
	sh.start = time.Now()
	sh.end = sh.start.Add(cfg.Duration)
	if cfg.Rate > 0 {
		sh.interval = float64(time.Second) / cfg.Rate
	}
	return sh, closeIdle, nil
}

// shared is the read-only state of a run, plus the open-loop ticket counter.
type shared struct {
	cfg      *Config
	endpoint string
	raw      *rawTarget   // -client raw; else:
	header   http.Header  // -client nethttp
	client   *http.Client // -client nethttp
	rep      *reporter
	done     <-chan struct{}
	start    time.Time
	end      time.Time
	perCheck int
	interval float64 // open loop: ns between intended sends; 0: closed loop

	_      [64]byte // keep the ticket counter off the read-mostly fields' line
	ticket atomic.Int64
}

// worker is one goroutine with its own connection, key source, request,
// buffers, counters and histogram. Only the reporter reads its atomic
// counters while it runs; everything else is read after it has finished.
type worker struct {
	sh   *shared
	keys *KeySource
	hist *hdrhistogram.Histogram

	buf []byte   // request body, reused
	raw *rawConn // -client raw: the connection and its buffers

	// -client nethttp:
	br   *bytes.Reader // reader over buf
	body io.ReadCloser // io.NopCloser(br): net/http sends it with the headers
	req  *http.Request // reused while requests succeed
	resp bytes.Buffer  // answers are read into it

	requests, checks, allowed, denied, errors, late atomic.Int64

	errorChecks, unenforced int64
	kinds                   map[string]int64
	statuses                map[int]int64
	tiers                   tierHists // single checks' latency per tier class

	_ [64]byte // no false sharing between neighbouring workers
}

func newWorker(sh *shared, i int) *worker {
	w := &worker{
		sh:       sh,
		keys:     NewKeySource(sh.cfg.Keys, sh.cfg.Seed, uint64(i)),
		hist:     NewHistogram(),
		kinds:    map[string]int64{},
		statuses: map[int]int64{},
		tiers:    tierHists{},
	}
	if sh.raw != nil {
		w.buf = make([]byte, 0, 128+96*sh.perCheck)
		w.raw = newRawConn(sh.raw)
	} else {
		w.resetRequest()
	}
	return w
}

// resetRequest gives the worker a fresh request, body buffer and reader.
// It runs at start and after any failed exchange, after which net/http may
// still hold the old body (it can close or even read a request body after
// RoundTrip returns when the exchange failed).
func (w *worker) resetRequest() {
	w.buf = make([]byte, 0, 128+96*w.sh.perCheck)
	w.br = bytes.NewReader(nil)
	w.body = io.NopCloser(w.br)
	req, err := http.NewRequest(http.MethodPost, w.sh.endpoint, nil)
	if err != nil {
		panic(err) // the URL was validated
	}
	req.Header = w.sh.header.Clone()
	w.req = req
}

func (w *worker) run() {
	if w.sh.interval > 0 {
		w.runOpen()
	} else {
		w.runClosed()
	}
	w.hist = w.sh.rep.flushFinal(w.hist)
}

func (w *worker) stopped() bool {
	select {
	case <-w.sh.done:
		return true
	default:
		return false
	}
}

func (w *worker) runClosed() {
	nextFlush := w.sh.start.Add(flushEvery)
	for !w.stopped() {
		now := time.Now()
		if !now.Before(w.sh.end) {
			return
		}
		ok := w.do(now)
		if now.After(nextFlush) {
			w.hist = w.sh.rep.flush(w.hist)
			nextFlush = now.Add(flushEvery)
		}
		if !ok {
			time.Sleep(errorBackoff)
		}
	}
}

func (w *worker) runOpen() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	nextFlush := w.sh.start.Add(flushEvery)
	for !w.stopped() {
		seq := w.sh.ticket.Add(1) - 1
		intended := w.sh.start.Add(time.Duration(float64(seq) * w.sh.interval))
		if !intended.Before(w.sh.end) {
			return
		}
		if wait := time.Until(intended); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-w.sh.done:
				return
			}
		}
		now := time.Now()
		if now.Sub(intended) > LateThreshold {
			w.late.Add(1)
		}
		w.do(intended)
		if now.After(nextFlush) {
			w.hist = w.sh.rep.flush(w.hist)
			nextFlush = now.Add(flushEvery)
		}
	}
}

// do sends one request, records its latency from t0 and counts its outcome.
// It reports whether the exchange completed (any HTTP status, or an error
// only while reading the body).
func (w *worker) do(t0 time.Time) bool {
	n := w.sh.perCheck
	if w.sh.cfg.Batch > 0 {
		w.buf = AppendBatch(w.buf[:0], w.keys, n)
	} else {
		w.buf = AppendCheck(w.buf[:0], w.keys.Next())
	}
	var (
		a      rawAnswer
		inBody bool
		err    error
	)
	if w.raw != nil {
		a, inBody, err = w.raw.roundTrip(w.buf)
	} else {
		a, inBody, err = w.roundTripNetHTTP()
	}
	took := time.Since(t0)
	recordLatency(w.hist, took)
	if err != nil {
		if inBody {
			w.fail("body_"+classify(err), 0)
			return true
		}
		w.fail(classify(err), 0)
		return false
	}
	var allowed, denied int
	switch {
	case a.status == http.StatusOK && w.sh.cfg.Batch > 0:
		var results int
		var ok bool
		allowed, denied, results, ok = scanBatch(a.body)
		if !ok || results != n {
			w.fail("bad_batch_response", 0)
			return true
		}
	case a.status == http.StatusOK:
		allowed = n
	case a.status == http.StatusTooManyRequests:
		denied = n
	default:
		w.fail("", a.status)
		return true
	}
	w.requests.Add(1)
	w.checks.Add(int64(n))
	if w.sh.cfg.Batch == 0 {
		// The answer names each rule's tier.
		w.tiers.record(tierClass(a.body), took)
	}
	if allowed > 0 {
		w.allowed.Add(int64(allowed))
	}
	if denied > 0 {
		w.denied.Add(int64(denied))
	}
	if a.unenforced {
		w.unenforced += int64(n)
	}
	return true
}

// roundTripNetHTTP is roundTrip (rawclient.go) through net/http's client.
// Answers of 200 and 429 are read into w.resp; others are discarded.
func (w *worker) roundTripNetHTTP() (a rawAnswer, inBody bool, err error) {
	w.br.Reset(w.buf)
	w.req.Body = w.body
	w.req.ContentLength = int64(len(w.buf))
	resp, err := w.sh.client.Do(w.req)
	if err != nil {
		w.resetRequest()
		return a, false, err
	}
	a.status = resp.StatusCode
	w.resp.Reset()
	if a.status == http.StatusOK || a.status == http.StatusTooManyRequests {
		_, err = w.resp.ReadFrom(resp.Body)
		a.body = w.resp.Bytes()
		if v := resp.Header["Quota-Enforced"]; len(v) > 0 && strings.EqualFold(v[0], "false") {
			a.unenforced = true
		}
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	switch {
	case err != nil:
		w.resetRequest()
		return a, true, err
	case a.status != http.StatusOK && a.status != http.StatusTooManyRequests:
		// The server may have answered without reading the whole body;
		// net/http can then still be sending it, so do not reuse it.
		w.resetRequest()
	}
	return a, false, nil
}

// fail counts a failed request: by kind, or by HTTP status when status != 0.
func (w *worker) fail(kind string, status int) {
	n := int64(w.sh.perCheck)
	w.requests.Add(1)
	w.checks.Add(n)
	w.errors.Add(1)
	w.errorChecks += n
	if status != 0 {
		w.statuses[status]++
	} else {
		w.kinds[kind]++
	}
}

// ErrorKind names the kind of a transport error as the run's
// errors_by_kind does (timeout, conn_refused, conn_reset, eof, ...), for
// other load generators that report errors alike (bench/grpcbench).
func ErrorKind(err error) string { return classify(err) }

// classify names a transport error.
func classify(err error) string {
	var ne net.Error
	var me *malformedError
	switch {
	case errors.As(err, &me):
		return "malformed_response"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "conn_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "conn_reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case strings.Contains(err.Error(), "malformed HTTP"):
		// net/http's "malformed HTTP response", "malformed HTTP status code"…
		return "malformed_response"
	default:
		return "transport"
	}
}

// reporter merges the histograms workers hand over about once a second
// (so workers never share one, and no lock guards the hot path), and
// prints the progress line.
type reporter struct {
	out     io.Writer
	open    bool
	in      chan *hdrhistogram.Histogram
	free    chan *hdrhistogram.Histogram
	stop    chan struct{}
	cum     *hdrhistogram.Histogram
	win     *hdrhistogram.Histogram // latencies handed over since the last tick
	points  []TimelinePoint
	workers []*worker
	start   time.Time
	last    time.Time // of the previous progress line
	lastReq int64     // requests at the previous progress line
}

func newReporter(out io.Writer, workers int, open bool) *reporter {
	return &reporter{
		out:  out,
		open: open,
		in:   make(chan *hdrhistogram.Histogram, workers),
		free: make(chan *hdrhistogram.Histogram, workers),
		stop: make(chan struct{}),
		cum:  NewHistogram(),
		win:  NewHistogram(),
	}
}

// flush hands h to the reporter if it can take it now and returns the
// histogram to record into next: a recycled empty one, or h itself when the
// reporter is busy (its values then go with the next flush).
func (r *reporter) flush(h *hdrhistogram.Histogram) *hdrhistogram.Histogram {
	if h.TotalCount() == 0 {
		return h
	}
	select {
	case r.in <- h:
	default:
		return h
	}
	select {
	case h = <-r.free:
		return h
	default:
		return NewHistogram()
	}
}

// flushFinal is the worker's last flush. It returns nil when the reporter
// took h, and h when it could not, for Run to merge.
func (r *reporter) flushFinal(h *hdrhistogram.Histogram) *hdrhistogram.Histogram {
	if h.TotalCount() == 0 {
		return nil
	}
	select {
	case r.in <- h:
		return nil
	default:
		return h
	}
}

func (r *reporter) merge(h *hdrhistogram.Histogram) {
	r.cum.Merge(h)
	r.win.Merge(h)
	h.Reset()
	select {
	case r.free <- h:
	default:
	}
}

func (r *reporter) loop() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case h := <-r.in:
			r.merge(h)
		case now := <-tick.C:
			r.sample(now)
			r.progress(now)
		case <-r.stop:
			for {
				select {
				case h := <-r.in:
					r.merge(h)
				default:
					r.sample(time.Now())
					if r.out != nil {
						r.progress(time.Now()) // the final figures
						fmt.Fprintln(r.out)
					}
					return
				}
			}
		}
	}
}

// sample closes the timeline's current point: the latencies handed over
// since the previous one. Workers hand theirs over every flushEvery, so a
// point's requests were answered up to that long before its second.
func (r *reporter) sample(now time.Time) {
	if r.win.TotalCount() == 0 {
		return
	}
	l := Summarize(r.win)
	r.points = append(r.points, TimelinePoint{
		Second:   round(now.Sub(r.start).Seconds(), 1),
		Requests: r.win.TotalCount(),
		P50Ms:    l.P50, P99Ms: l.P99, MaxMs: l.Max,
	})
	r.win.Reset()
}

// progress rewrites the progress line: elapsed time, req/s since the last
// line, requests so far, cumulative p99, errors (and late sends).
func (r *reporter) progress(now time.Time) {
	if r.out == nil {
		return
	}
	var req, errs, late int64
	for _, w := range r.workers {
		req += w.requests.Load()
		errs += w.errors.Load()
		late += w.late.Load()
	}
	if r.last.IsZero() {
		r.last = r.start
	}
	rate := 0.0
	if dt := now.Sub(r.last).Seconds(); dt > 0 {
		rate = float64(req-r.lastReq) / dt
	}
	r.lastReq, r.last = req, now
	lateText := ""
	if r.open {
		lateText = fmt.Sprintf("  late %d", late)
	}
	fmt.Fprintf(r.out, "\r%6.1fs  %9.0f req/s  %10d requests  p99 %8.3f ms  errors %d%s   ",
		now.Sub(r.start).Seconds(), rate, req, usToMs(r.cum.ValueAtQuantile(99)), errs, lateText)
}

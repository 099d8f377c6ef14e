// Package faults holds quotad's fault-injection tests: real quotad binaries
// against private redis-server and mariadbd processes on spare loopback
// ports, which the tests kill, hang and restart under load. The tests carry
// the build tag `faults` (`make test-faults`), so `make test` does not run
// them; this file is the open-loop load generator and the sample arithmetic
// they share.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Sample is the outcome of one request of a load.
type Sample struct {
	Seq      int64
	Target   int           // which of LoadConfig.URLs it went to
	Intended time.Time     // when it was due (open loop: latency counts from here)
	Latency  time.Duration // from Intended to the end of the answer
	Status   int           // HTTP status; 0 for a transport error
	Enforced string        // the Quota-Enforced header
	Code     string        // the error code of an error body
	Err      string        // the transport error
}

// Done is when the answer was complete.
func (s Sample) Done() time.Time { return s.Intended.Add(s.Latency) }

// LoadConfig is an open-loop load: Rate requests a second, each due at a
// fixed time whatever the answers of the others, sent by up to Workers
// concurrent connections; a request that waits for a free worker has that
// wait in its latency, so a stalled server is not hidden.
type LoadConfig struct {
	URLs    []string // base URLs; request seq goes to URLs[seq % len(URLs)]
	Path    string   // default /v1/check
	Rate    float64  // requests per second
	Workers int      // default 64
	Timeout time.Duration
	// Body is the JSON body of request seq. It is called concurrently.
	Body func(seq int64) []byte
	// Header is added to every request (e.g. Authorization).
	Header http.Header
	// Count, when > 0, stops the load after that many requests (Wait
	// returns when all have been answered).
	Count int64
}

// Load is a running open-loop load.
type Load struct {
	cfg     LoadConfig
	client  *http.Client
	tickets chan ticket
	stop    context.CancelFunc
	ctx     context.Context
	wg      sync.WaitGroup

	mu      sync.Mutex
	samples []Sample
}

type ticket struct {
	seq      int64
	intended time.Time
}

// StartLoad starts sending.
func StartLoad(cfg LoadConfig) *Load {
	if cfg.Path == "" {
		cfg.Path = "/v1/check"
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Workers * len(cfg.URLs),
		MaxIdleConnsPerHost: cfg.Workers,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	l := &Load{
		cfg:     cfg,
		client:  &http.Client{Transport: tr, Timeout: cfg.Timeout},
		tickets: make(chan ticket, 1<<16),
		stop:    cancel,
		ctx:     ctx,
	}
	for range cfg.Workers {
		l.wg.Go(l.work)
	}
	l.wg.Go(l.dispatch)
	return l
}

func (l *Load) dispatch() {
	defer close(l.tickets)
	start := time.Now()
	interval := float64(time.Second) / l.cfg.Rate
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for seq := int64(0); l.cfg.Count <= 0 || seq < l.cfg.Count; seq++ {
		due := start.Add(time.Duration(float64(seq) * interval))
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.ctx.Done():
				return
			}
		} else if l.ctx.Err() != nil {
			return
		}
		select {
		case l.tickets <- ticket{seq, due}:
		case <-l.ctx.Done():
			return
		}
	}
}

func (l *Load) work() {
	var local []Sample
	defer func() {
		l.mu.Lock()
		l.samples = append(l.samples, local...)
		l.mu.Unlock()
	}()
	for tk := range l.tickets {
		local = append(local, l.send(tk))
	}
}

func (l *Load) send(tk ticket) Sample {
	target := int(tk.seq % int64(len(l.cfg.URLs)))
	s := Sample{Seq: tk.seq, Target: target, Intended: tk.intended}
	req, err := http.NewRequest(http.MethodPost, l.cfg.URLs[target]+l.cfg.Path, bytes.NewReader(l.cfg.Body(tk.seq)))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range l.cfg.Header {
		req.Header[k] = v
	}
	resp, err := l.client.Do(req)
	if err != nil {
		s.Latency = time.Since(tk.intended)
		s.Err = err.Error()
		return s
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	s.Latency = time.Since(tk.intended)
	s.Status = resp.StatusCode
	s.Enforced = resp.Header.Get("Quota-Enforced")
	if err != nil {
		s.Err = "body: " + err.Error()
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusTooManyRequests {
		s.Code = ErrorCode(body)
	}
	return s
}

// Wait waits until a load with a Count has sent all its requests and had
// their answers, and returns the samples as Stop does.
func (l *Load) Wait() Samples {
	l.wg.Wait()
	return l.Stop()
}

// Stop stops sending, waits for the answers of the requests already due
// and returns every sample, in the order they were due.
func (l *Load) Stop() Samples {
	l.stop()
	l.wg.Wait()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.samples)
	slices.SortFunc(out, func(a, b Sample) int { return int(a.Seq - b.Seq) })
	return out
}

// ErrorCode is the code of a {"error":{"code":…}} body ("" if none).
func ErrorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

// Samples is a load's outcome.
type Samples []Sample

// Due returns the samples due in [from, to).
func (ss Samples) Due(from, to time.Time) Samples {
	var out Samples
	for _, s := range ss {
		if !s.Intended.Before(from) && s.Intended.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// Where returns the samples for which keep is true.
func (ss Samples) Where(keep func(Sample) bool) Samples {
	var out Samples
	for _, s := range ss {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// Latency summarises latencies.
type Latency struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

func (l Latency) String() string {
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s", l.N, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// Latencies computes nearest-rank percentiles of the samples' latencies.
func (ss Samples) Latencies() Latency {
	if len(ss) == 0 {
		return Latency{}
	}
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = s.Latency
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(ds)))) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return Latency{N: len(ds), P50: q(50), P90: q(90), P99: q(99), Max: ds[len(ds)-1]}
}

// Tally counts samples by outcome: "200", "429", "503 store_unavailable",
// "200 unenforced", "transport error".
func (ss Samples) Tally() map[string]int {
	out := map[string]int{}
	for _, s := range ss {
		out[s.Outcome()]++
	}
	return out
}

// Outcome names what a sample got.
func (s Sample) Outcome() string {
	switch {
	case s.Status == 0:
		return "transport error"
	case s.Err != "":
		return fmt.Sprintf("%d unreadable body", s.Status)
	case s.Status == http.StatusOK && s.Enforced == "false":
		return "200 unenforced"
	case s.Code != "":
		return fmt.Sprintf("%d %s", s.Status, s.Code)
	default:
		return fmt.Sprint(s.Status)
	}
}

// PollUntil calls cond every interval until it returns nil or timeout has
// passed; it returns cond's last error.
func PollUntil(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// ErrNotYet is a convenient PollUntil condition error.
var ErrNotYet = errors.New("not yet")

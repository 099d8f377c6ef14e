// Command grpcbench compares quotad's two check entry points in one run:
// Envoy's rate limit service (ShouldRateLimit over gRPC, with the
// platform's two descriptors) and quota's own POST /v1/check (loadgen's
// HTTP client), same keys, taking turns. It runs rounds of a closed loop
// (as fast as the connections go) and then rounds at a fixed rate, and
// prints checks/s and latency percentiles of both, with the CPU time per
// check of quotad and of this load generator. `make bench-grpc` runs it
// against a quotad it starts (bench/grpc.sh).
//
// The gRPC side is its own lean client by default (rawgrpc.go), as the
// HTTP side is loadgen's raw client: on a machine whose cores the load
// generator shares with quotad, a costly client takes the server's CPU
// and the comparison measures the clients. -grpc-client grpc-go uses
// grpc-go's client instead, with the callers spread over -grpc-conns
// connections. The grpc-mux entry is the raw client with the callers'
// calls multiplexed on -mux-conns connections, the way Envoy's rate limit
// filter shares one connection per worker thread.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quota-platform/quota/bench/loadgen"
)

type options struct {
	url, grpcAddr, domain string
	grpcClient            string
	conns, grpcConns      int
	muxConns              int
	rounds                int
	phase                 time.Duration
	rate                  float64
	closed                bool
	entries               []string
	jsonPath              string
	timelinePath          string
	serverPID             int
	seed                  uint64
}

// The gRPC clients of -grpc-client.
const (
	clientRaw    = "raw"
	clientGRPCGo = "grpc-go"
)

// callTimeout bounds one call, of either entry point.
const callTimeout = 10 * time.Second

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcbench:", err)
		os.Exit(1)
	}
}

// parseOptions reads grpcbench's flags.
func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("grpcbench", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:18090", "quotad's HTTP base URL")
	fs.StringVar(&o.grpcAddr, "grpc", "127.0.0.1:18091", "quotad's gRPC address")
	fs.StringVar(&o.domain, "domain", "platform", "envoy domain of the two platform descriptors")
	fs.IntVar(&o.conns, "c", 64, "concurrent requests of each entry point (HTTP: one connection each)")
	fs.StringVar(&o.grpcClient, "grpc-client", clientRaw, "gRPC client: raw (lean) or grpc-go")
	fs.IntVar(&o.grpcConns, "grpc-conns", 64, "HTTP/2 connections the concurrent gRPC requests are spread over (raw: one call at a time on each when as many as -c, else each call a stream of its own on a shared connection, as Envoy)")
	fs.IntVar(&o.muxConns, "mux-conns", 4, "connections of the grpc-mux entry (raw client, the callers' calls multiplexed on them)")
	fs.IntVar(&o.rounds, "rounds", 3, "turns of each entry point, per mode")
	fs.DurationVar(&o.phase, "phase", 5*time.Second, "length of one turn")
	fs.BoolVar(&o.closed, "closed", true, "run the closed-loop turns")
	fs.Float64Var(&o.rate, "rate", 4630, "checks/s of the fixed-rate turns (0: none)")
	entries := fs.String("entries", "grpc,grpc-mux,http", "entry points to run, comma-separated: grpc (-grpc-client over -grpc-conns), grpc-mux (raw, -c calls on -mux-conns connections, as an Envoy), http")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON here")
	fs.StringVar(&o.timelinePath, "timeline", "", "write the gRPC turns' worst latency and worst send lateness per 10 ms of send times here")
	fs.Uint64Var(&o.seed, "seed", 0, "added to each round's key seed (round 1: seed+1), so that separate runs draw other keys")
	fs.IntVar(&o.serverPID, "server-pid", 0, "quotad's pid: report its CPU time per check (Linux /proc)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.conns < 1 || o.grpcConns < 1 || o.muxConns < 1 || o.rounds < 1 || o.phase <= 0 {
		return o, errors.New("-c, -grpc-conns, -mux-conns, -rounds and -phase must be positive")
	}
	if o.grpcClient != clientRaw && o.grpcClient != clientGRPCGo {
		return o, fmt.Errorf("-grpc-client %q: want raw or grpc-go", o.grpcClient)
	}
	for _, e := range strings.Split(*entries, ",") {
		if e != "grpc" && e != "grpc-mux" && e != "http" {
			return o, fmt.Errorf("-entries: unknown entry point %q (grpc, grpc-mux, http)", e)
		}
		o.entries = append(o.entries, e)
	}
	return o, nil
}

// openTargets connects the gRPC entry points: "grpc" (o's client and
// connections) and, when o runs it, "grpc-mux" (the raw client, callers'
// calls multiplexed on -mux-conns connections, as om says); closeAll closes
// them.
func openTargets(o options) (targets map[string]*grpcTarget, om options, closeAll func(), err error) {
	g, err := newGRPCTarget(o)
	if err != nil {
		return nil, om, nil, err
	}
	om = o // the grpc-mux entry's
	om.grpcClient, om.grpcConns = clientRaw, min(o.muxConns, o.conns-1)
	if o.conns == 1 {
		om.grpcConns = 1
	}
	targets = map[string]*grpcTarget{"grpc": g}
	if slices.Contains(o.entries, "grpc-mux") {
		gm, err := newGRPCTarget(om)
		if err != nil {
			g.close()
			return nil, om, nil, err
		}
		targets["grpc-mux"] = gm
	}
	return targets, om, func() {
		for _, t := range targets {
			t.close()
		}
	}, nil
}

func run(args []string, out io.Writer) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	targets, om, closeTargets, err := openTargets(o)
	if err != nil {
		return err
	}
	defer closeTargets()
	var tlOut io.Writer
	if o.timelinePath != "" {
		f, err := os.Create(o.timelinePath)
		if err != nil {
			return err
		}
		defer f.Close()
		tlOut = f
	}
	ctx := context.Background()
	var modes []float64
	if o.closed {
		modes = append(modes, 0)
	}
	if o.rate > 0 {
		modes = append(modes, o.rate)
	}
	if len(modes) == 0 {
		return errors.New("nothing to run: -closed=false and -rate 0")
	}
	var results []summary
	for _, rate := range modes {
		hist, lateHist, total := map[string]*hdrhistogram.Histogram{}, map[string]*hdrhistogram.Histogram{}, map[string]*summary{}
		for _, e := range o.entries {
			hist[e], lateHist[e], total[e] = newHist(), newHist(), &summary{Entry: e, Rate: rate}
		}
		for round := range o.rounds {
			seed := o.seed + uint64(round+1)
			// Rotate which goes first so none always runs on a warmer Redis.
			k := round % len(o.entries)
			order := append(slices.Clone(o.entries[k:]), o.entries[:k]...)
			for _, entry := range order {
				var s summary
				var h, late *hdrhistogram.Histogram
				srv0, cli0 := loadgen.ProcessCPU(o.serverPID), loadgen.SelfCPU()
				if gt := targets[entry]; gt != nil {
					var tl *timeline
					if tlOut != nil {
						tl = newTimeline(o.phase)
					}
					s, h, late = gt.run(ctx, o, rate, seed, tl)
					s.Entry = entry
					if tl != nil {
						if err := tl.write(tlOut, fmt.Sprintf("round %d %s %s", round+1, entry, s.mode())); err != nil {
							return err
						}
					}
				} else {
					s, h, err = runHTTP(ctx, o, rate, seed)
					if err != nil {
						return err
					}
				}
				s.ServerCPUSec, s.ClientCPUSec = (loadgen.ProcessCPU(o.serverPID) - srv0).Seconds(), (loadgen.SelfCPU() - cli0).Seconds()
				fmt.Fprintf(out, "round %d %-8s %s\n", round+1, entry, s.line())
				hist[entry].Merge(h)
				if late != nil {
					lateHist[entry].Merge(late)
				}
				total[entry].add(s)
			}
		}
		for _, entry := range o.entries {
			t := total[entry]
			t.finish(hist[entry])
			if rate > 0 && targets[entry] != nil {
				t.SendLateP99Ms = float64(lateHist[entry].ValueAtQuantile(99)) / 1000
			}
			fmt.Fprintf(out, "TOTAL    %-8s %s\n", entry, t.line())
			if len(t.ErrorsByKind) > 0 {
				fmt.Fprintf(out, "         %-8s errors by kind: %v\n", entry, t.ErrorsByKind)
			}
			results = append(results, *t)
		}
	}
	if o.jsonPath != "" {
		b, _ := json.MarshalIndent(map[string]any{"options": map[string]any{
			"connections": o.conns, "grpc_client": o.grpcClient, "grpc_connections": o.grpcConns, "mux_connections": om.grpcConns, "rounds": o.rounds,
			"phase_s": o.phase.Seconds(), "rate": o.rate,
		}, "results": results}, "", "  ")
		return os.WriteFile(o.jsonPath, append(b, '\n'), 0o644)
	}
	return nil
}

func newHist() *hdrhistogram.Histogram { return loadgen.NewHistogram() } // µs, as loadgen's

// summary is one entry point's figures over one turn, or all its turns
// of one mode (Rate 0: closed loop).
type summary struct {
	Entry        string  `json:"entry"`
	Rate         float64 `json:"rate"`
	Checks       int64   `json:"checks"`
	Seconds      float64 `json:"seconds"`
	ChecksPerSec float64 `json:"checks_per_sec"`
	Errors       int64   `json:"errors"`
	// ErrorsByKind: gRPC status codes (grpc_Unavailable...), malformed
	// answers, transport errors as loadgen names them; HTTP: loadgen's.
	ErrorsByKind map[string]int64 `json:"errors_by_kind,omitempty"`
	Denied       int64            `json:"denied"`
	P50Ms        float64          `json:"p50_ms"`
	P99Ms        float64          `json:"p99_ms"`
	P999Ms       float64          `json:"p999_ms"`
	MaxMs        float64          `json:"max_ms"`
	// SendLateP99Ms (gRPC at a fixed rate): the 99th percentile of how
	// far behind its intended time a call was sent, which its latency
	// includes; on cores shared with the server, the load generator's own
	// share of the tail.
	SendLateP99Ms float64 `json:"send_late_p99_ms,omitempty"`
	ServerCPUSec  float64 `json:"server_cpu_s"` // quotad's CPU time over the turns (0 without -server-pid)
	ClientCPUSec  float64 `json:"client_cpu_s"` // this process's
}

func (s *summary) add(o summary) {
	s.Checks += o.Checks
	s.Seconds += o.Seconds
	s.Errors += o.Errors
	for k, n := range o.ErrorsByKind {
		if s.ErrorsByKind == nil {
			s.ErrorsByKind = map[string]int64{}
		}
		s.ErrorsByKind[k] += n
	}
	s.Denied += o.Denied
	s.ServerCPUSec += o.ServerCPUSec
	s.ClientCPUSec += o.ClientCPUSec
}

func (s *summary) finish(h *hdrhistogram.Histogram) {
	if s.Seconds > 0 {
		s.ChecksPerSec = float64(s.Checks) / s.Seconds
	}
	ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	s.P50Ms, s.P99Ms, s.P999Ms, s.MaxMs = ms(50), ms(99), ms(99.9), float64(h.Max())/1000
}

// mode is "closed loop" or "at R/s".
func (s *summary) mode() string {
	if s.Rate > 0 {
		return "at " + strconv.FormatFloat(s.Rate, 'f', 0, 64) + "/s"
	}
	return "closed loop"
}

func (s *summary) line() string {
	perCheck := func(sec float64) float64 {
		if s.Checks == 0 {
			return 0
		}
		return sec * 1e6 / float64(s.Checks)
	}
	late := ""
	if s.SendLateP99Ms > 0 {
		late = fmt.Sprintf("  sent late p99 %.2f ms", s.SendLateP99Ms)
	}
	return fmt.Sprintf("%-11s %6.0f checks/s  p50 %7.2f ms  p99 %7.2f ms  p99.9 %7.2f ms  max %7.2f ms  CPU/check: quotad %4.0f µs, client %4.0f µs  errors %d  denied %d%s",
		s.mode(), s.ChecksPerSec, s.P50Ms, s.P99Ms, s.P999Ms, s.MaxMs, perCheck(s.ServerCPUSec), perCheck(s.ClientCPUSec), s.Errors, s.Denied, late)
}

// runHTTP is one turn of POST /v1/check through loadgen (what make bench's
// quotabench sends): the two platform rules of deploy/rules.yaml apply to
// each check.
func runHTTP(ctx context.Context, o options, rate float64, seed uint64) (summary, *hdrhistogram.Histogram, error) {
	cfg := loadgen.DefaultConfig()
	cfg.URL, cfg.Connections, cfg.Duration, cfg.Rate, cfg.Seed = o.url, o.conns, o.phase, rate, seed
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return summary{}, nil, err
	}
	h := res.Histogram
	s := summary{Entry: "http", Rate: rate, Checks: res.Checks, Seconds: res.Seconds, Errors: res.Errors, ErrorsByKind: res.ErrorsByKind, Denied: res.Denied}
	// loadgen's histogram is in the same unit (µs); its figures are taken as they are.
	s.finish(h)
	return s, h, nil
}

// grpcTarget holds the gRPC side's connections, kept from turn to turn
// as loadgen keeps its within a run.
type grpcTarget struct {
	domain  string
	raw     []*rawGRPC // -grpc-client raw, -grpc-conns ≥ -c: one per caller
	mux     []*rawMux  // -grpc-client raw, -grpc-conns < -c: shared
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
}

func newGRPCTarget(o options) (*grpcTarget, error) {
	g := &grpcTarget{domain: o.domain}
	if o.grpcClient == clientRaw {
		t := newRawGRPCTarget(o.grpcAddr, callTimeout)
		if o.grpcConns < o.conns {
			for range o.grpcConns {
				g.mux = append(g.mux, newRawMux(t))
			}
			return g, nil
		}
		for range o.conns {
			g.raw = append(g.raw, newRawGRPC(t))
		}
		return g, nil
	}
	for range o.grpcConns {
		// Each ClientConn is its own HTTP/2 connection.
		c, err := grpc.NewClient(o.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.close()
			return nil, err
		}
		g.conns = append(g.conns, c)
		g.clients = append(g.clients, rlsv3.NewRateLimitServiceClient(c))
	}
	return g, nil
}

func (g *grpcTarget) close() {
	for _, c := range g.raw {
		c.close()
	}
	for _, m := range g.mux {
		m.close()
	}
	for _, c := range g.conns {
		c.Close()
	}
}

// caller is caller i's ShouldRateLimit with the platform's two
// descriptors of values v.
func (g *grpcTarget) caller(ctx context.Context, i int) func(v *platformValues) (grpcAnswer, error) {
	if g.mux != nil {
		k := newMuClient(g.mux[i%len(g.mux)])
		var msg []byte
		return func(v *platformValues) (grpcAnswer, error) {
			msg = appendRequest(msg[:0], g.domain, v)
			return k.call(msg)
		}
	}
	if g.raw != nil {
		c := g.raw[i]
		var msg []byte
		return func(v *platformValues) (grpcAnswer, error) {
			msg = appendRequest(msg[:0], g.domain, v)
			return c.call(msg)
		}
	}
	client := g.clients[i%len(g.clients)]
	return func(v *platformValues) (grpcAnswer, error) {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		resp, err := client.ShouldRateLimit(cctx, newRequest(g.domain, v))
		if err != nil {
			return grpcAnswer{}, err
		}
		return grpcAnswer{overall: int32(resp.GetOverallCode()), statuses: len(resp.GetStatuses())}, nil
	}
}

// grpcErrorKind names a failed call's error for errors_by_kind.
func grpcErrorKind(err error) string {
	var se *grpcStatusError
	var me *malformedGRPCError
	switch {
	case errors.As(err, &se):
		return "grpc_" + se.code.String()
	case errors.As(err, &me):
		return "malformed_response"
	}
	if s, ok := status.FromError(err); ok { // grpc-go's client
		return "grpc_" + s.Code().String()
	}
	return loadgen.ErrorKind(err)
}

// run is one turn of ShouldRateLimit with the platform's two descriptors,
// (app_id, ip) and (app_id, user_id, interface_id), keys drawn as loadgen
// draws them for the same seed. At a fixed rate each request has an
// intended start and its latency counts from there (no coordinated
// omission), as loadgen's open loop does. A call counts as an error unless
// it is answered OK or OVER_LIMIT with one status per descriptor. tl (nil:
// none) keeps the worst latency per step of start times. At a fixed rate
// it also returns how late each call was sent (a histogram, µs).
func (g *grpcTarget) run(ctx context.Context, o options, rate float64, seed uint64, tl *timeline) (summary, *hdrhistogram.Histogram, *hdrhistogram.Histogram) {
	keys := loadgen.DefaultConfig().Keys
	start := time.Now()
	end := start.Add(o.phase)
	if tl != nil {
		tl.start = start
	}
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	var ticket, checks, errs, denied atomic.Int64
	hists := make([]*hdrhistogram.Histogram, o.conns)
	lates := make([]*hdrhistogram.Histogram, o.conns)
	kinds := make([]map[string]int64, o.conns)
	var wg sync.WaitGroup
	for i := range o.conns {
		hists[i], lates[i], kinds[i] = newHist(), newHist(), map[string]int64{}
		call := g.caller(ctx, i)
		src := loadgen.NewKeySource(keys, seed, uint64(i))
		wg.Go(func() {
			var v platformValues
			for {
				t0 := time.Now()
				if interval > 0 {
					seq := ticket.Add(1) - 1
					t0 = start.Add(time.Duration(seq) * interval)
					if !t0.Before(end) {
						return
					}
					time.Sleep(time.Until(t0))
				} else if !t0.Before(end) {
					return
				}
				v.set(src.Next())
				if interval > 0 {
					late := time.Since(t0)
					_ = lates[i].RecordValue(max(1, late.Microseconds()))
					tl.recordLate(t0, late)
				}
				a, err := call(&v)
				lat := time.Since(t0)
				_ = hists[i].RecordValue(max(1, lat.Microseconds()))
				tl.record(t0, lat)
				kind := ""
				switch {
				case err != nil:
					kind = grpcErrorKind(err)
				case a.statuses != 2:
					kind = "wrong_status_count"
				case a.overall == int32(rlsv3.RateLimitResponse_OVER_LIMIT):
					denied.Add(1)
				case a.overall != int32(rlsv3.RateLimitResponse_OK):
					kind = "bad_overall_code"
				}
				if kind != "" {
					errs.Add(1)
					kinds[i][kind]++
					// As loadgen: a closed loop backs off after a failure, an
					// open loop keeps its schedule (a pause there would make
					// the calls after it late by the pause).
					if interval == 0 {
						time.Sleep(10 * time.Millisecond)
					}
				}
				checks.Add(1)
			}
		})
	}
	wg.Wait()
	h, late := newHist(), newHist()
	for i := range hists {
		h.Merge(hists[i])
		late.Merge(lates[i])
	}
	s := summary{Entry: "grpc", Rate: rate, Checks: checks.Load(), Seconds: time.Since(start).Seconds(), Errors: errs.Load(), Denied: denied.Load()}
	for _, k := range kinds {
		for kind, n := range k {
			if s.ErrorsByKind == nil {
				s.ErrorsByKind = map[string]int64{}
			}
			s.ErrorsByKind[kind] += n
		}
	}
	s.finish(h)
	if interval > 0 {
		s.SendLateP99Ms = float64(late.ValueAtQuantile(99)) / 1000
	}
	return s, h, late
}

// timelineStep is the width of a timeline's windows of start times.
const timelineStep = 10 * time.Millisecond

// timeline is a turn's worst latency among the calls meant to start in
// each timelineStep, and the worst lateness of their sends (how far behind
// its intended time the load generator sent a call: a stall of the
// generator's own, where it is as late as the latency, or of the server,
// where it is not). It tells a tail's shapes apart: a stall followed by a
// queue that drains at the spare capacity is a step and then a slope;
// calls slow one by one are scattered spikes.
type timeline struct {
	start time.Time
	worst []atomic.Int64 // ns
	late  []atomic.Int64 // ns
}

func newTimeline(phase time.Duration) *timeline {
	n := int(phase/timelineStep) + 1
	return &timeline{worst: make([]atomic.Int64, n), late: make([]atomic.Int64, n)}
}

// record keeps lat if it is the worst of the window of t0; nil records nothing.
func (t *timeline) record(t0 time.Time, lat time.Duration) {
	if t != nil {
		keepWorst(t.worst, t.start, t0, lat)
	}
}

// recordLate keeps late, how far behind t0 its call was sent, if it is
// the worst of the window of t0; nil records nothing.
func (t *timeline) recordLate(t0 time.Time, late time.Duration) {
	if t != nil {
		keepWorst(t.late, t.start, t0, late)
	}
}

// keepWorst keeps d in the window of t0 (windows from start) if it is the
// worst there.
func keepWorst(worst []atomic.Int64, start, t0 time.Time, d time.Duration) {
	off := t0.Sub(start)
	if off < 0 || off/timelineStep >= time.Duration(len(worst)) {
		return
	}
	i := int(off / timelineStep)
	for w := &worst[i]; ; {
		old := w.Load()
		if int64(d) <= old || w.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// write appends a comment line with the turn's start (RFC 3339, to line
// its windows up with the server's logs), then one line per window that
// had a call: label, the window's start (ms into the turn), its worst
// latency and its worst send lateness (ms).
func (t *timeline) write(w io.Writer, label string) error {
	if _, err := fmt.Fprintf(w, "# %s\tstart %s\n", label, t.start.UTC().Format(time.RFC3339Nano)); err != nil {
		return err
	}
	for i := range t.worst {
		if v := t.worst[i].Load(); v > 0 {
			ms := time.Duration(i) * timelineStep / time.Millisecond
			if _, err := fmt.Fprintf(w, "%s\t%d\t%.3f\t%.3f\n", label, ms, float64(v)/1e6, float64(t.late[i].Load())/1e6); err != nil {
				return err
			}
		}
	}
	return nil
}

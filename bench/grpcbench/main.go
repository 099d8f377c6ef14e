// Command grpcbench compares quotad's two check entry points in one run:
// Envoy's rate limit service (ShouldRateLimit over gRPC, with the
// platform's two descriptors) and quota's own POST /v1/check (loadgen's
// HTTP client), same keys, taking turns. It runs rounds of a closed loop
// (as fast as the connections go) and then rounds at a fixed rate, and
// prints checks/s and latency percentiles of both. `make bench-grpc` runs
// it against a quotad it starts (bench/grpc.sh).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quota-platform/quota/bench/loadgen"
)

type options struct {
	url, grpcAddr, domain string
	conns, grpcConns      int
	rounds                int
	phase                 time.Duration
	rate                  float64
	jsonPath              string
	serverPID             int
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcbench:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("grpcbench", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:18090", "quotad's HTTP base URL")
	fs.StringVar(&o.grpcAddr, "grpc", "127.0.0.1:18091", "quotad's gRPC address")
	fs.StringVar(&o.domain, "domain", "platform", "envoy domain of the two platform descriptors")
	fs.IntVar(&o.conns, "c", 64, "concurrent requests of each entry point (HTTP: one keep-alive connection each)")
	fs.IntVar(&o.grpcConns, "grpc-conns", 64, "gRPC connections the concurrent requests are spread over")
	fs.IntVar(&o.rounds, "rounds", 3, "turns of each entry point, per mode")
	fs.DurationVar(&o.phase, "phase", 5*time.Second, "length of one turn")
	fs.Float64Var(&o.rate, "rate", 4630, "checks/s of the fixed-rate turns (0: none)")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON here")
	fs.IntVar(&o.serverPID, "server-pid", 0, "quotad's pid: report its CPU time per check (Linux /proc)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.conns < 1 || o.grpcConns < 1 || o.rounds < 1 || o.phase <= 0 {
		return errors.New("-c, -grpc-conns, -rounds and -phase must be positive")
	}
	g, err := newGRPCTarget(o)
	if err != nil {
		return err
	}
	defer g.close()
	ctx := context.Background()
	modes := []float64{0}
	if o.rate > 0 {
		modes = append(modes, o.rate)
	}
	var results []summary
	for _, rate := range modes {
		hist := map[string]*hdrhistogram.Histogram{"grpc": newHist(), "http": newHist()}
		total := map[string]*summary{"grpc": {Entry: "grpc", Rate: rate}, "http": {Entry: "http", Rate: rate}}
		for round := range o.rounds {
			seed := uint64(round + 1)
			// Alternate which goes first so neither always runs on a warmer Redis.
			order := []string{"grpc", "http"}
			if round%2 == 1 {
				order = []string{"http", "grpc"}
			}
			for _, entry := range order {
				var s summary
				var h *hdrhistogram.Histogram
				srv0, cli0 := procCPU(o.serverPID), selfCPU()
				if entry == "grpc" {
					s, h = g.run(ctx, o, rate, seed)
				} else {
					s, h, err = runHTTP(ctx, o, rate, seed)
					if err != nil {
						return err
					}
				}
				s.ServerCPUSec, s.ClientCPUSec = (procCPU(o.serverPID) - srv0).Seconds(), (selfCPU() - cli0).Seconds()
				fmt.Fprintf(out, "round %d %-4s %s\n", round+1, entry, s.line())
				hist[entry].Merge(h)
				total[entry].add(s)
			}
		}
		for _, entry := range []string{"grpc", "http"} {
			t := total[entry]
			t.finish(hist[entry])
			fmt.Fprintf(out, "TOTAL    %-4s %s\n", entry, t.line())
			results = append(results, *t)
		}
	}
	if o.jsonPath != "" {
		b, _ := json.MarshalIndent(map[string]any{"options": map[string]any{
			"connections": o.conns, "grpc_connections": o.grpcConns, "rounds": o.rounds,
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
	Denied       int64   `json:"denied"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	P999Ms       float64 `json:"p999_ms"`
	MaxMs        float64 `json:"max_ms"`
	ServerCPUSec float64 `json:"server_cpu_s"` // quotad's CPU time over the turns (0 without -server-pid)
	ClientCPUSec float64 `json:"client_cpu_s"` // this process's
}

func (s *summary) add(o summary) {
	s.Checks += o.Checks
	s.Seconds += o.Seconds
	s.Errors += o.Errors
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

func (s *summary) line() string {
	mode := "closed loop"
	if s.Rate > 0 {
		mode = "at " + strconv.FormatFloat(s.Rate, 'f', 0, 64) + "/s"
	}
	perCheck := func(sec float64) float64 {
		if s.Checks == 0 {
			return 0
		}
		return sec * 1e6 / float64(s.Checks)
	}
	return fmt.Sprintf("%-11s %6.0f checks/s  p50 %7.2f ms  p99 %7.2f ms  p99.9 %7.2f ms  max %7.2f ms  CPU/check: quotad %4.0f µs, client %4.0f µs  errors %d  denied %d",
		mode, s.ChecksPerSec, s.P50Ms, s.P99Ms, s.P999Ms, s.MaxMs, perCheck(s.ServerCPUSec), perCheck(s.ClientCPUSec), s.Errors, s.Denied)
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
	s := summary{Entry: "http", Rate: rate, Checks: res.Checks, Seconds: res.Seconds, Errors: res.Errors, Denied: res.Denied}
	// loadgen's histogram is in the same unit (µs); its figures are taken as they are.
	s.finish(h)
	return s, h, nil
}

type grpcTarget struct {
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
}

func newGRPCTarget(o options) (*grpcTarget, error) {
	g := &grpcTarget{}
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
	for _, c := range g.conns {
		c.Close()
	}
}

// run is one turn of ShouldRateLimit with the platform's two descriptors,
// (app_id, ip) and (app_id, user_id, interface_id), keys drawn as loadgen
// draws them for the same seed. At a fixed rate each request has an
// intended start and its latency counts from there (no coordinated
// omission), as loadgen's open loop does.
func (g *grpcTarget) run(ctx context.Context, o options, rate float64, seed uint64) (summary, *hdrhistogram.Histogram) {
	keys := loadgen.DefaultConfig().Keys
	start := time.Now()
	end := start.Add(o.phase)
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	var ticket, checks, errs, denied atomic.Int64
	hists := make([]*hdrhistogram.Histogram, o.conns)
	var wg sync.WaitGroup
	for i := range o.conns {
		hists[i] = newHist()
		client := g.clients[i%len(g.clients)]
		src := loadgen.NewKeySource(keys, seed, uint64(i))
		wg.Go(func() {
			var ip []byte
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
				k := src.Next()
				ip = loadgen.AppendIP(ip[:0], k.IP)
				app := "app-" + strconv.FormatUint(k.App, 10)
				req := &rlsv3.RateLimitRequest{Domain: o.domain, Descriptors: []*rlcommon.RateLimitDescriptor{
					{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app}, {Key: "ip", Value: string(ip)}}},
					{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "app_id", Value: app},
						{Key: "user_id", Value: "user-" + strconv.FormatUint(k.User, 10)},
						{Key: "interface_id", Value: "iface-" + strconv.FormatUint(k.Iface, 10)}}},
				}}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := client.ShouldRateLimit(cctx, req)
				cancel()
				_ = hists[i].RecordValue(max(1, time.Since(t0).Microseconds()))
				switch {
				case err != nil:
					errs.Add(1)
					time.Sleep(10 * time.Millisecond)
				case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
					denied.Add(1)
				}
				checks.Add(1)
			}
		})
	}
	wg.Wait()
	h := newHist()
	for _, x := range hists {
		h.Merge(x)
	}
	s := summary{Entry: "grpc", Rate: rate, Checks: checks.Load(), Seconds: time.Since(start).Seconds(), Errors: errs.Load(), Denied: denied.Load()}
	s.finish(h)
	return s, h
}

// procCPU is the user+system CPU time of process pid so far (0 if unknown).
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

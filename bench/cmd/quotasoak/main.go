// Command quotasoak is quotad's soak test (what `make soak` runs). It starts
// a private redis-server on a spare port, two fresh shard databases on the
// local MariaDB and quotad, measures the maximum throughput (closed loop,
// -probe-d at -c connections), then sends an open-loop load at -frac of it
// (or at -rate, to compare two builds at one rate) for -d, sampling
// quotad's /metrics every -sample. It passes when, after -warmup, RSS grew
// by less than -max-rss-growth, the goroutine count stayed
// within -max-goroutine-change, and no request got a 5xx or a transport
// error; it prints a summary and writes <out>/soak.json, soak.txt and
// soak-quotad.log. Exit status 0 pass, 1 fail, 2 bad usage or set-up.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/bench/loadgen"
)

type options struct {
	quotad, redisServer, out, mysqlBase     string
	duration, warmup, probe, sample         time.Duration
	conns, openConns                        int
	frac, rate, maxRSSGrowth, maxGoroutines float64
	dist                                    string
	zipfS                                   float64
	identities                              uint64
}

func main() {
	os.Exit(run())
}

func run() int {
	o := options{}
	def := 10 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(os.Stderr, "quotasoak: SOAK_DURATION %q: want a duration like 10m\n", v)
			return 2
		}
		def = d
	}
	flag.StringVar(&o.quotad, "quotad", "bin/quotad", "quotad binary")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary (a private one is started)")
	flag.StringVar(&o.out, "out", envOr("SOAK_OUT", "bench-out"), "output directory")
	flag.StringVar(&o.mysqlBase, "mysql", envOr("SOAK_MYSQL_DSN_BASE", "quota:quota@tcp(127.0.0.1:3306)/"), "MariaDB account that may create databases quota%")
	flag.DurationVar(&o.duration, "d", def, "soak duration (env SOAK_DURATION)")
	flag.DurationVar(&o.warmup, "warmup", time.Minute, "warm-up excluded from the RSS and goroutine criteria")
	flag.DurationVar(&o.probe, "probe-d", 20*time.Second, "duration of the closed-loop maximum-throughput run")
	flag.DurationVar(&o.sample, "sample", 10*time.Second, "how often /metrics is sampled")
	flag.IntVar(&o.conns, "c", 64, "connections of the closed-loop run")
	flag.IntVar(&o.openConns, "open-c", 256, "workers (connections) of the open loop: enough that a slow answer does not hold back the sends due after it")
	flag.Float64Var(&o.frac, "frac", 0.7, "soak rate as a fraction of the measured maximum")
	flag.Float64Var(&o.rate, "rate", envFloat("SOAK_RATE"), "soak rate in req/s instead of -frac of the maximum, e.g. to compare two builds at one rate (env SOAK_RATE)")
	flag.StringVar(&o.dist, "dist", envOr("SOAK_DIST", loadgen.DistUniform), "key distribution of both runs: uniform or zipf (env SOAK_DIST)")
	flag.Float64Var(&o.zipfS, "zipf-s", 1.1, "zipf exponent")
	flag.Uint64Var(&o.identities, "identities", 0, "draw (app, user, interface) from this many identities (0: each dimension independently), as quotabench -identities")
	flag.Float64Var(&o.maxRSSGrowth, "max-rss-growth", 10, "pass: RSS growth after warm-up below this % ")
	flag.Float64Var(&o.maxGoroutines, "max-goroutine-change", 10, "pass: goroutines within ± this % of their post-warm-up level")
	flag.Parse()
	if o.duration <= o.warmup {
		fmt.Fprintf(os.Stderr, "quotasoak: -d %s must be longer than -warmup %s\n", o.duration, o.warmup)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quotasoak:", err)
		return 2
	}
	if !rep.Pass {
		return 1
	}
	return 0
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

// Sample is one read of quotad's /metrics.
type Sample struct {
	AtSeconds   float64 `json:"t_s"`
	RSSBytes    float64 `json:"rss_bytes"`
	HeapInUse   float64 `json:"heap_inuse_bytes"`
	Goroutines  float64 `json:"goroutines"`
	InFlight    float64 `json:"in_flight"`
	Checks      float64 `json:"check_requests"` // cumulative /v1/check requests
	Errors5xx   float64 `json:"http_5xx"`       // cumulative
	RPS         float64 `json:"rps"`            // since the previous sample
	P99Ms       float64 `json:"p99_ms"`         // server-side, since the previous sample (bucket interpolation)
	Load1       float64 `json:"machine_load1"`  // /proc/loadavg: the machine is shared
	PendingRows float64 `json:"analytics_pending_rows,omitempty"`
	Dropped     float64 `json:"analytics_dropped,omitempty"`
	metrics     map[string]float64
}

// Idle is quotad with no load and no client connection.
type Idle struct {
	Goroutines float64 `json:"goroutines"`
	RSSBytes   float64 `json:"rss_bytes"`
}

// Report is soak.json.
type Report struct {
	Started     time.Time       `json:"started"`
	Cores       int             `json:"cores"`
	Max         *loadgen.Result `json:"max_throughput_run"`
	TargetRate  float64         `json:"target_rate"`
	Soak        *loadgen.Result `json:"soak_run"`
	Samples     []Sample        `json:"samples"`
	WarmupS     float64         `json:"warmup_s"`
	SampleS     float64         `json:"sample_every_s"`
	Analytics   string          `json:"analytics"`           // QUOTA_ANALYTICS as quotad got it
	RSSBase     float64         `json:"rss_fit_start_bytes"` // least-squares line through the samples after warm-up, at its first sample
	RSSEnd      float64         `json:"rss_fit_end_bytes"`   // … and at its last
	RSSMax      float64         `json:"rss_max_bytes"`
	RSSGrowth   float64         `json:"rss_growth_pct"`
	IdleBefore  Idle            `json:"idle_before_soak"`
	IdleAfter   Idle            `json:"idle_after_soak"`
	GorChange   float64         `json:"idle_goroutines_change_pct"`
	LoadGorMin  float64         `json:"goroutines_under_load_min"`
	LoadGorMax  float64         `json:"goroutines_under_load_max"`
	P99Median   float64         `json:"server_p99_ms_median_of_intervals"`
	P99Worst    float64         `json:"server_p99_ms_worst_interval"`
	Server5xx   float64         `json:"server_5xx"`
	ShutdownS   float64         `json:"graceful_shutdown_s"`
	ShutdownErr string          `json:"graceful_shutdown_error,omitempty"`
	Failures    []string        `json:"failures"`
	Pass        bool            `json:"pass"`
}

func soak(ctx context.Context, o options) (*Report, error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now().UTC(), Cores: runtime.NumCPU(), WarmupS: o.warmup.Seconds(), SampleS: o.sample.Seconds(),
		Analytics: envOr("QUOTA_ANALYTICS", "on")}

	// Private Redis.
	redisPort, err := freePort()
	if err != nil {
		return nil, err
	}
	rcmd := exec.Command(o.redisServer, "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	rcmd.Stdout, rcmd.Stderr = os.Stderr, os.Stderr
	if err := rcmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.redisServer, err)
	}
	defer func() { _ = rcmd.Process.Kill(); _ = rcmd.Wait() }()
	redisAddr := "127.0.0.1:" + strconv.Itoa(redisPort)
	if err := waitTCP(redisAddr, 10*time.Second); err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}

	// Fresh shard databases.
	dsns, drop, err := createShards(ctx, o.mysqlBase, 2)
	if err != nil {
		return nil, err
	}
	defer drop()

	listenPort, err := freePort()
	if err != nil {
		return nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(listenPort)
	env := append(os.Environ(), "QUOTA_LISTEN="+listen, "QUOTA_GRPC_LISTEN=off", "QUOTA_REDIS_ADDRS="+redisAddr,
		"QUOTA_MYSQL_SHARDS="+strings.Join(dsns, ","))
	mig := exec.CommandContext(ctx, o.quotad, "migrate-schema")
	mig.Env = env
	if out, err := mig.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("quotad migrate-schema: %v: %s", err, out)
	}
	logf, err := os.Create(filepath.Join(o.out, "soak-quotad.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	q := exec.Command(o.quotad, "serve")
	q.Env = env
	q.Stdout, q.Stderr = logf, logf
	if err := q.Start(); err != nil {
		return nil, fmt.Errorf("start quotad: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- q.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = q.Process.Kill()
			<-exited
		}
	}()
	base := "http://" + listen
	if err := waitReady(base, exited, 30*time.Second); err != nil {
		return nil, err
	}
	logln("quotad ready on %s (redis %s, shards %d); output in %s", listen, redisAddr, len(dsns), o.out)

	// 1. The maximum throughput, closed loop.
	cfg := loadgen.DefaultConfig()
	cfg.URL, cfg.Connections, cfg.Duration = base, o.conns, o.probe
	cfg.Keys.IPs = 100000
	cfg.Keys.Dist, cfg.Keys.ZipfS, cfg.Keys.Identities = o.dist, o.zipfS, o.identities
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logln("max throughput: closed loop, %d connections, %s", cfg.Connections, cfg.Duration)
	peak, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	rep.Max = peak
	logln("  %.0f req/s, p99 %.2f ms, errors %d", peak.RPS, peak.P99Ms, peak.Errors)
	if peak.RPS <= 0 {
		return nil, errors.New("the closed-loop run answered nothing")
	}

	// Idle baseline: loadgen has closed its connections.
	if rep.IdleBefore, err = idle(base); err != nil {
		return nil, err
	}
	logln("idle: %.0f goroutines, RSS %.1f MiB", rep.IdleBefore.Goroutines, rep.IdleBefore.RSSBytes/(1<<20))

	// 2. The soak, open loop, with /metrics sampled alongside.
	rep.TargetRate = math.Round(peak.RPS * o.frac)
	if o.rate > 0 {
		rep.TargetRate = o.rate
	}
	cfg.Rate, cfg.Duration, cfg.Seed, cfg.Connections = rep.TargetRate, o.duration, 2, o.openConns
	logln("soak: open loop at %.0f req/s (%.0f%% of max) for %s, /metrics every %s", cfg.Rate, 100*cfg.Rate/peak.RPS, o.duration, o.sample)
	start := time.Now()
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(o.sample)
		defer tick.Stop()
		var prev *Sample
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if time.Since(start) > o.duration+o.sample/2 {
				return
			}
			s, err := sample(base, time.Since(start), prev)
			if err != nil {
				logln("  sample: %v", err)
				continue
			}
			rep.Samples = append(rep.Samples, s)
			prev = &rep.Samples[len(rep.Samples)-1]
			logln("  t=%4.0fs  %6.0f req/s  p99 %6.2f ms  RSS %6.1f MiB  heap %6.1f MiB  goroutines %4.0f  5xx %.0f  pending rows %.0f  load %.1f",
				s.AtSeconds, s.RPS, s.P99Ms, s.RSSBytes/(1<<20), s.HeapInUse/(1<<20), s.Goroutines, s.Errors5xx, s.PendingRows, s.Load1)
		}
	}()
	// An open loop that quotad cannot keep up with falls behind; stop it at
	// the end rather than drain the backlog (the achieved rate shows it).
	runCtx, cancelRun := context.WithTimeout(ctx, o.duration+5*time.Second)
	res, err := loadgen.Run(runCtx, cfg)
	cancelRun()
	<-samplerDone
	if err != nil {
		return nil, err
	}
	rep.Soak = res
	if rep.IdleAfter, err = idle(base); err != nil {
		return nil, err
	}
	logln("idle: %.0f goroutines, RSS %.1f MiB", rep.IdleAfter.Goroutines, rep.IdleAfter.RSSBytes/(1<<20))

	// 3. Graceful shutdown.
	t0 := time.Now()
	_ = q.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			rep.ShutdownErr = err.Error()
		}
	case <-time.After(40 * time.Second):
		rep.ShutdownErr = "did not exit within 40 s of SIGTERM"
	}
	rep.ShutdownS = time.Since(t0).Seconds()

	judge(rep, o)
	if err := writeReport(rep, o.out); err != nil {
		return nil, err
	}
	return rep, nil
}

func judge(rep *Report, o options) {
	res := rep.Soak
	var after []Sample
	for _, s := range rep.Samples {
		if s.AtSeconds >= o.warmup.Seconds() {
			after = append(after, s)
		}
	}
	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	if len(after) < 2 {
		fail("only %d samples after the warm-up: run longer than -warmup + 2 × -sample", len(after))
	} else {
		// RSS saw-tooths with the GC and the analytics flushes (±15% here):
		// the growth is that of a least-squares line through every sample
		// after the warm-up, from the first sample's time to the last's.
		rss := make([]float64, len(after))
		ts := make([]float64, len(after))
		gor := make([]float64, len(after))
		var p99s []float64
		for i, s := range after {
			rss[i], gor[i], ts[i] = s.RSSBytes, s.Goroutines, s.AtSeconds
			if s.P99Ms > 0 {
				p99s = append(p99s, s.P99Ms)
			}
		}
		a, b := fitLine(ts, rss)
		rep.RSSBase, rep.RSSEnd, rep.RSSMax = a+b*ts[0], a+b*ts[len(ts)-1], slices.Max(rss)
		rep.RSSGrowth = round(100*(rep.RSSEnd-rep.RSSBase)/rep.RSSBase, 2)
		if rep.RSSGrowth >= o.maxRSSGrowth {
			fail("RSS grew %.1f%% after the warm-up (fitted %.1f -> %.1f MiB), limit %.0f%%", rep.RSSGrowth, rep.RSSBase/(1<<20), rep.RSSEnd/(1<<20), o.maxRSSGrowth)
		}
		rep.LoadGorMin, rep.LoadGorMax = slices.Min(gor), slices.Max(gor)
		if len(p99s) > 0 {
			rep.P99Median, rep.P99Worst = median(p99s), slices.Max(p99s)
		}
	}
	// Under load the goroutines follow the connections and requests in
	// flight; a leak is what is left when both are gone.
	if b := rep.IdleBefore.Goroutines; b > 0 {
		rep.GorChange = round(100*(rep.IdleAfter.Goroutines-b)/b, 2)
		if math.Abs(rep.IdleAfter.Goroutines-b) > b*o.maxGoroutines/100+2 {
			fail("idle goroutines %.0f before the soak, %.0f after (limit ±%.0f%%)", b, rep.IdleAfter.Goroutines, o.maxGoroutines)
		}
	}
	if n := len(rep.Samples); n > 0 {
		rep.Server5xx = rep.Samples[n-1].Errors5xx
	}
	var client5xx int64
	for k, n := range res.ErrorsByKind {
		if strings.HasPrefix(k, "http_5") {
			client5xx += n
		}
	}
	if client5xx > 0 || rep.Server5xx > 0 {
		fail("%d 5xx answers (quotad counted %.0f)", client5xx, rep.Server5xx)
	}
	if other := res.Errors - client5xx; other > 0 {
		fail("%d requests failed without an answer or with another error: %v", other, res.ErrorsByKind)
	}
	if res.Requests == 0 {
		fail("no request was sent")
	} else if res.RPS < 0.95*rep.TargetRate {
		fail("quotad did not keep up: %.0f req/s answered of the %.0f req/s sent for", res.RPS, rep.TargetRate)
	}
	if rep.ShutdownErr != "" {
		fail("graceful shutdown: %s", rep.ShutdownErr)
	}
	rep.Pass = len(rep.Failures) == 0
}

// idle waits api.IdleWorkersLinger (its callers have just stopped a load,
// whose connections' idle workers live that long), then until quotad serves
// nothing but the /metrics read and its goroutine count is the same three
// times 500 ms apart.
func idle(base string) (Idle, error) {
	time.Sleep(api.IdleWorkersLinger)
	var last []float64
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		m, err := scrape(base + "/metrics")
		if err != nil || m["quota_http_in_flight"] > 1 {
			last = last[:0]
			continue
		}
		last = append(last, m["go_goroutines"])
		if n := len(last); n >= 3 && last[n-1] == last[n-2] && last[n-2] == last[n-3] {
			return Idle{Goroutines: last[n-1], RSSBytes: m["process_resident_memory_bytes"]}, nil
		}
	}
	return Idle{}, fmt.Errorf("quotad never idle within 60 s after %s (goroutines %v)", api.IdleWorkersLinger, last)
}

func (r *Report) sampleEvery() time.Duration { return time.Duration(r.SampleS * float64(time.Second)) }

func writeReport(rep *Report, dir string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var sb strings.Builder
	res := rep.Soak
	fmt.Fprintf(&sb, "quotad soak, %s, %d cores, keys %s%s, analytics %s\n", rep.Started.Format(time.RFC3339), rep.Cores, res.Dist,
		map[bool]string{true: fmt.Sprintf(" over %d identities", res.Identities), false: ""}[res.Identities > 0], rep.Analytics)
	fmt.Fprintf(&sb, "max throughput (closed loop, %d conns, %.0fs): %.0f req/s, p99 %.2f ms\n", rep.Max.Connections, rep.Max.Seconds, rep.Max.RPS, rep.Max.P99Ms)
	fmt.Fprintf(&sb, "soak (open loop at %.0f req/s for %.0fs, %d workers): %d requests, %.0f req/s achieved\n", rep.TargetRate, res.Seconds, res.Connections, res.Requests, res.RPS)
	fmt.Fprintf(&sb, "  client latency ms (from the intended send time)  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", res.P50Ms, res.P90Ms, res.P99Ms, res.P999Ms, res.MaxMs)
	if res.Requests > 0 && float64(res.Late) > 0.1*float64(res.Requests) {
		fmt.Fprintf(&sb, "  NOTE: %d sends (%.0f%%) started late: the load generator itself was starved of CPU, which inflates the client latency\n", res.Late, 100*float64(res.Late)/float64(res.Requests))
	}
	fmt.Fprintf(&sb, "  server p99 per %s interval (quotad's histogram): median %.2f ms, worst %.2f ms\n", rep.sampleEvery(), rep.P99Median, rep.P99Worst)
	fmt.Fprintf(&sb, "  allowed %d, denied %d, unenforced (fail-open) %d, errors %d %v, quotad 5xx %.0f\n", res.Allowed, res.Denied, res.Unenforced, res.Errors, res.ErrorsByKind, rep.Server5xx)
	fmt.Fprintf(&sb, "  RSS after %.0fs warm-up (least-squares line through the samples): %.1f MiB -> %.1f MiB, %+.2f%%, max %.1f MiB\n", rep.WarmupS, rep.RSSBase/(1<<20), rep.RSSEnd/(1<<20), rep.RSSGrowth, rep.RSSMax/(1<<20))
	fmt.Fprintf(&sb, "  goroutines idle before %.0f, idle after %.0f (%+.2f%%); under load %.0f..%.0f (connections + requests in flight)\n", rep.IdleBefore.Goroutines, rep.IdleAfter.Goroutines, rep.GorChange, rep.LoadGorMin, rep.LoadGorMax)
	fmt.Fprintf(&sb, "  idle RSS before %.1f MiB, after %.1f MiB\n", rep.IdleBefore.RSSBytes/(1<<20), rep.IdleAfter.RSSBytes/(1<<20))
	var loads []float64
	for _, s := range rep.Samples {
		loads = append(loads, s.Load1)
	}
	if len(loads) > 0 {
		fmt.Fprintf(&sb, "  machine load average (1 min) during the soak: median %.1f, max %.1f on %d cores\n", median(loads), slices.Max(loads), rep.Cores)
	}
	fmt.Fprintf(&sb, "  graceful shutdown (SIGTERM) took %.2fs %s\n", rep.ShutdownS, rep.ShutdownErr)
	if rep.Pass {
		sb.WriteString("PASS\n")
	} else {
		fmt.Fprintf(&sb, "FAIL: %s\n", strings.Join(rep.Failures, "; "))
	}
	fmt.Print(sb.String())
	return os.WriteFile(filepath.Join(dir, "soak.txt"), []byte(sb.String()), 0o644)
}

func sample(base string, at time.Duration, prev *Sample) (Sample, error) {
	m, err := scrape(base + "/metrics")
	if err != nil {
		return Sample{}, err
	}
	s := Sample{
		AtSeconds:   round(at.Seconds(), 1),
		RSSBytes:    m["process_resident_memory_bytes"],
		HeapInUse:   m["go_memstats_heap_inuse_bytes"],
		Goroutines:  m["go_goroutines"],
		InFlight:    m["quota_http_in_flight"],
		PendingRows: m["quota_analytics_pending_rows"],
		Dropped:     m["quota_analytics_dropped_total"],
		Load1:       load1(),
		metrics:     m,
	}
	for k, v := range m {
		if strings.HasPrefix(k, "quota_http_requests_total{") {
			if strings.Contains(k, `code="5`) {
				s.Errors5xx += v
			}
			if strings.Contains(k, `route="/v1/check"`) {
				s.Checks += v
			}
		}
	}
	if prev != nil {
		if dt := s.AtSeconds - prev.AtSeconds; dt > 0 {
			s.RPS = round((s.Checks-prev.Checks)/dt, 1)
		}
		s.P99Ms = round(1000*bucketQuantile(0.99, m, prev.metrics, `quota_check_duration_seconds_bucket{route="/v1/check",le="`), 3)
	}
	return s, nil
}

// bucketQuantile estimates quantile q of the observations between two
// scrapes of a cumulative histogram (linear within a bucket, as
// Prometheus' histogram_quantile does).
func bucketQuantile(q float64, now, before map[string]float64, prefix string) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range now {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(k, prefix), `"}`), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le, v - before[k]})
	}
	slices.SortFunc(bs, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	if len(bs) == 0 || bs[len(bs)-1].n <= 0 {
		return 0
	}
	rank := q * bs[len(bs)-1].n
	lowLe, lowN := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return lowLe
			}
			if b.n == lowN {
				return b.le
			}
			return lowLe + (b.le-lowLe)*(rank-lowN)/(b.n-lowN)
		}
		lowLe, lowN = b.le, b.n
	}
	return lowLe
}

func scrape(url string) (map[string]float64, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %d", url, resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

func createShards(ctx context.Context, baseDSN string, n int) ([]string, func(), error) {
	cfg, err := mysql.ParseDSN(baseDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("MariaDB DSN %q: %w", baseDSN, err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	var names, dsns []string
	drop := func() {
		for _, name := range names {
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := admin.ExecContext(c, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
				logln("drop database %s: %v", name, err)
			}
			cancel()
		}
		admin.Close()
	}
	suffix := strconv.FormatInt(time.Now().Unix(), 36)
	for i := range n {
		name := fmt.Sprintf("quota_soak_%s_%d", suffix, i)
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4"); err != nil {
			drop()
			return nil, nil, fmt.Errorf("create database %s on %s: %w (run deploy/ensure-services.sh)", name, cfg.Addr, err)
		}
		names = append(names, name)
		c := cfg.Clone()
		c.DBName = name
		dsns = append(dsns, c.FormatDSN())
	}
	return dsns, drop, nil
}

func waitReady(base string, exited <-chan error, limit time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("quotad exited at start: %v (see soak-quotad.log)", err)
		default:
		}
		if resp, err := c.Get(base + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s/readyz not 200 within %s", base, limit)
}

func waitTCP(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// load1 is the machine's 1-minute load average (0 if unknown).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// fitLine is the least-squares line y = a + b·x.
func fitLine(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy = sx+xs[i], sy+ys[i]
		sxx, sxy = sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	if d := n*sxx - sx*sx; d != 0 {
		b = (n*sxy - sx*sy) / d
	}
	return (sy - b*sx) / n, b
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

func logln(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "quotasoak: "+format+"\n", args...)
}

// envFloat is the number in environment variable k (0 when unset); a value
// that is not a non-negative number stops the program (exit status 2).
func envFloat(k string) float64 {
	v := os.Getenv(k)
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0) || math.IsInf(f, 0) {
		fmt.Fprintf(os.Stderr, "quotasoak: %s %q: want a rate in req/s, e.g. 10000\n", k, v)
		os.Exit(2)
	}
	return f
}

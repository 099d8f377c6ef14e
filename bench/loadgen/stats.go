package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latency histograms count microseconds from 1 µs to 60 s with 3
// significant figures. Slower answers are recorded as 60 s.
const (
	histMinMicros = 1
	histMaxMicros = 60_000_000
	histSigFigs   = 3
)

// NewHistogram returns an empty latency histogram (values in µs).
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs)
}

// recordLatency records d into h, clamped into the histogram's range.
func recordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < 0 {
		us = 0
	} else if us > histMaxMicros {
		us = histMaxMicros
	}
	_ = h.RecordValue(us) // in range by construction
}

// Latencies are the summary percentiles of a histogram, in milliseconds.
type Latencies struct {
	P50, P90, P99, P999, Max, Mean float64
}

// Summarize computes the percentiles of a µs histogram, in ms rounded to
// the microsecond. An empty histogram gives zeros.
func Summarize(h *hdrhistogram.Histogram) Latencies {
	if h == nil || h.TotalCount() == 0 {
		return Latencies{}
	}
	return Latencies{
		P50:  usToMs(h.ValueAtQuantile(50)),
		P90:  usToMs(h.ValueAtQuantile(90)),
		P99:  usToMs(h.ValueAtQuantile(99)),
		P999: usToMs(h.ValueAtQuantile(99.9)),
		Max:  usToMs(h.Max()),
		Mean: math.Round(h.Mean()) / 1000,
	}
}

func usToMs(us int64) float64 { return float64(us) / 1000 }

// MergeHistograms merges hs into a new histogram. It returns how many
// recorded values could not be merged (always 0 for histograms made by
// NewHistogram).
func MergeHistograms(hs ...*hdrhistogram.Histogram) (*hdrhistogram.Histogram, int64) {
	out := NewHistogram()
	var dropped int64
	for _, h := range hs {
		if h != nil {
			dropped += out.Merge(h)
		}
	}
	return out, dropped
}

// Result is the outcome of a run. Allowed, Denied and Unenforced count
// checks (one per request unless batching); Requests and Errors count HTTP
// requests. Every request ends as exactly one of: answered (its checks
// counted allowed or denied) or an error (its checks in ErrorChecks), so
// Allowed+Denied+ErrorChecks == Checks and Errors == sum(ErrorsByKind).
type Result struct {
	Mode         string           `json:"mode"`
	Client       string           `json:"client"` // ClientRaw or ClientNetHTTP
	URL          string           `json:"url"`
	Requests     int64            `json:"requests"`
	Checks       int64            `json:"checks"`
	Seconds      float64          `json:"seconds"`
	RPS          float64          `json:"rps"`
	ChecksPerSec float64          `json:"checks_per_sec"`
	Allowed      int64            `json:"allowed"`
	Denied       int64            `json:"denied"`
	Errors       int64            `json:"errors"`
	ErrorChecks  int64            `json:"error_checks"`
	ErrorsByKind map[string]int64 `json:"errors_by_kind"`
	Unenforced   int64            `json:"unenforced"`
	Late         int64            `json:"late"`
	LateMs       float64          `json:"late_threshold_ms"`
	P50Ms        float64          `json:"p50_ms"`
	P90Ms        float64          `json:"p90_ms"`
	P99Ms        float64          `json:"p99_ms"`
	P999Ms       float64          `json:"p999_ms"`
	MaxMs        float64          `json:"max_ms"`
	MeanMs       float64          `json:"mean_ms"`
	Connections  int              `json:"connections"`
	ConnsOpened  int64            `json:"conns_opened"`
	Rate         float64          `json:"rate"`
	Dist         string           `json:"dist"`
	ZipfS        float64          `json:"zipf_s,omitempty"`
	Batch        int              `json:"batch"`
	Identities   uint64           `json:"identities"`
	Seed         uint64           `json:"seed"`
	// CPUSeconds is the user+system CPU time quotabench's process used up
	// to the end of the run (getrusage), CPUPerRequestUs that per request:
	// the load generator's own cost, taken from the cores it shares with
	// the server under test. Zero where not measured.
	CPUSeconds      float64 `json:"cpu_seconds"`
	CPUPerRequestUs float64 `json:"cpu_us_per_request"`
	// Tiers: single checks answered, by the slowest storage tier their
	// answer names (empty when answers name none, and in batch mode).
	Tiers map[string]TierStat `json:"tiers,omitempty"`
	// Timeline has a point about every second: when a latency rose (after
	// a flush, a migration) and for how long.
	Timeline []TimelinePoint `json:"timeline,omitempty"`

	// Histogram holds every request's latency in µs, failed ones included
	// (measured from the intended send time in open-loop mode).
	Histogram *hdrhistogram.Histogram `json:"-"`
}

// TimelinePoint is the latencies the reporter received in about one second
// of a run, ending Second seconds after the start.
type TimelinePoint struct {
	Second   float64 `json:"second"`
	Requests int64   `json:"requests"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
}

func (r *Result) setLatencies(l Latencies) {
	r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs, r.MeanMs = l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// WriteText prints the human summary.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	dist := r.Dist
	if r.ZipfS > 0 {
		dist = fmt.Sprintf("zipf(s=%g)", r.ZipfS)
	}
	if r.Identities > 0 {
		dist += fmt.Sprintf(" over %d identities", r.Identities)
	}
	if r.Mode == "open" {
		fmt.Fprintf(&b, "quotabench: open loop at %g req/s, %d connections, %s, keys %s\n", r.Rate, r.Connections, r.URL, dist)
	} else {
		fmt.Fprintf(&b, "quotabench: closed loop, %d connections, %s, keys %s\n", r.Connections, r.URL, dist)
	}
	fmt.Fprintf(&b, "  duration     %.2f s\n", r.Seconds)
	fmt.Fprintf(&b, "  requests     %d  (%.1f req/s)\n", r.Requests, r.RPS)
	if r.Batch > 0 {
		fmt.Fprintf(&b, "  checks       %d  (%.1f checks/s, %d per request)\n", r.Checks, r.ChecksPerSec, r.Batch)
	}
	unit := ""
	if r.Batch > 0 {
		unit = " checks"
	}
	fmt.Fprintf(&b, "  allowed      %d%s%s\n", r.Allowed, unit, pct(r.Allowed, r.Checks))
	fmt.Fprintf(&b, "  denied       %d%s%s\n", r.Denied, unit, pct(r.Denied, r.Checks))
	fmt.Fprintf(&b, "  errors       %d requests%s", r.Errors, pct(r.Errors, r.Requests))
	if len(r.ErrorsByKind) > 0 {
		kinds := make([]string, 0, len(r.ErrorsByKind))
		for k := range r.ErrorsByKind {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		parts := make([]string, len(kinds))
		for i, k := range kinds {
			parts[i] = fmt.Sprintf("%s %d", k, r.ErrorsByKind[k])
		}
		fmt.Fprintf(&b, "  [%s]", strings.Join(parts, ", "))
	}
	b.WriteByte('\n')
	if r.Unenforced > 0 {
		fmt.Fprintf(&b, "  unenforced   %d%s, answered with Quota-Enforced: false\n", r.Unenforced, unit)
	}
	if r.Mode == "open" {
		fmt.Fprintf(&b, "  late sends   %d%s, started more than %g ms after their intended time\n", r.Late, pct(r.Late, r.Requests), r.LateMs)
	}
	fmt.Fprintf(&b, "  latency ms   p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  (mean %.3f)\n",
		r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs, r.MeanMs)
	writeTiers(&b, r.Tiers)
	fmt.Fprintf(&b, "  connections  %d opened for %d workers, client %s\n", r.ConnsOpened, r.Connections, r.Client)
	if r.CPUSeconds > 0 {
		fmt.Fprintf(&b, "  own cpu      %.3f s user+sys, %.1f µs per request\n", r.CPUSeconds, r.CPUPerRequestUs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func pct(n, of int64) string {
	if of == 0 {
		return ""
	}
	return fmt.Sprintf("  (%.2f%%)", 100*float64(n)/float64(of))
}

// WriteJSON writes the summary as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	out := *r
	if out.ErrorsByKind == nil {
		out.ErrorsByKind = map[string]int64{}
	}
	b, err := json.MarshalIndent(&out, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteJSONFile writes the JSON summary to path, creating its directory;
// "-" means stdout.
func (r *Result) WriteJSONFile(path string, stdout io.Writer) error {
	if path == "-" {
		return r.WriteJSON(stdout)
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

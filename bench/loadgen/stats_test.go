package loadgen

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

func TestMergeAndSummarize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		workers int
		values  int64 // 1..values µs, each once, dealt round-robin to workers
	}{
		{"one worker", 1, 10_000},
		{"four workers", 4, 10_000},
		{"more workers than values", 8, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			parts := make([]*hdrhistogram.Histogram, tc.workers)
			for i := range parts {
				parts[i] = NewHistogram()
			}
			single := NewHistogram()
			for v := int64(1); v <= tc.values; v++ {
				recordLatency(parts[v%int64(tc.workers)], time.Duration(v)*time.Microsecond)
				recordLatency(single, time.Duration(v)*time.Microsecond)
			}
			merged, dropped := MergeHistograms(parts...)
			if dropped != 0 || merged.TotalCount() != tc.values {
				t.Fatalf("merged %d values (%d dropped), want %d", merged.TotalCount(), dropped, tc.values)
			}
			got, want := Summarize(merged), Summarize(single)
			if got != want {
				t.Errorf("merged summary %+v differs from the single histogram's %+v", got, want)
			}
			// 3 significant figures: within 0.1% of the exact percentiles.
			exact := func(q float64) float64 {
				return math.Ceil(q/100*float64(tc.values)) / 1000
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{
				{"p50", got.P50, exact(50)}, {"p90", got.P90, exact(90)}, {"p99", got.P99, exact(99)},
				{"p99.9", got.P999, exact(99.9)}, {"max", got.Max, float64(tc.values) / 1000},
			} {
				if math.Abs(c.got-c.want) > c.want*0.001+0.001 {
					t.Errorf("%s = %.3f ms, want %.3f ms", c.name, c.got, c.want)
				}
			}
		})
	}
}

func TestRecordLatencyClamps(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	recordLatency(h, -time.Second)
	recordLatency(h, 2*time.Minute)
	if h.TotalCount() != 2 {
		t.Fatalf("recorded %d values, want 2", h.TotalCount())
	}
	if s := Summarize(h); s.Max < 59_900 || s.Max > 60_100 {
		t.Errorf("max %.3f ms, want the 60 s ceiling", s.Max)
	}
	if s := Summarize(NewHistogram()); s != (Latencies{}) {
		t.Errorf("empty histogram summary %+v, want zeros", s)
	}
}

func TestResultOutputs(t *testing.T) {
	t.Parallel()
	r := &Result{
		Mode: "open", URL: "http://x/v1/check", Requests: 100, Checks: 100, Seconds: 2, RPS: 50,
		Allowed: 60, Denied: 30, Errors: 10, ErrorChecks: 10,
		ErrorsByKind: map[string]int64{"http_500": 7, "timeout": 3},
		Unenforced:   4, Late: 2, LateMs: 1, P50Ms: 1.5, P99Ms: 9, MaxMs: 12,
		Connections: 8, Rate: 50, Dist: DistZipf, ZipfS: 1.1,
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"requests", "checks", "seconds", "rps", "allowed", "denied", "errors",
		"unenforced", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "connections", "rate", "dist"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, js.String())
		}
	}
	if m["errors"] != 10.0 || m["dist"] != "zipf" || m["p99_ms"] != 9.0 {
		t.Errorf("JSON values wrong: %s", js.String())
	}

	var txt bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"requests     100", "allowed      60", "denied       30",
		"errors       10 requests", "http_500 7, timeout 3", "unenforced   4", "late sends   2", "p99 9.000"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, txt.String())
		}
	}
}

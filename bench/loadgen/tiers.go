package loadgen

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Storage tiers as single checks' answers report them: each rule's entry
// carries "tier" (hot, warm or cold). A request is classed by the slowest
// tier it touched (cold, else warm, else hot), and each class gets its own
// latency histogram, so that a run shows the share of checks each tier
// served and at what latency.

// tierRank orders the classes from fastest to slowest; tierNames is its
// inverse.
var (
	tierRank  = map[string]int{"hot": 1, "warm": 2, "cold": 3}
	tierNames = [...]string{"", "hot", "warm", "cold"}
)

// tierClass returns the slowest tier named in a check's answer, "" when
// it names none. It allocates nothing: it runs once per request, on cores
// the server under test shares.
func tierClass(body []byte) string {
	const key = `"tier":"`
	rank := 0
	for {
		i := bytes.Index(body, []byte(key))
		if i < 0 {
			return tierNames[rank]
		}
		body = body[i+len(key):]
		j := bytes.IndexByte(body, '"')
		if j < 0 {
			return tierNames[rank]
		}
		rank = max(rank, tierRank[string(body[:j])])
		body = body[j:]
	}
}

// tierHists is a worker's latency histograms per tier class.
type tierHists map[string]*hdrhistogram.Histogram

// record adds one answered request of class taking d.
func (h tierHists) record(class string, d time.Duration) {
	if class == "" {
		return
	}
	if h[class] == nil {
		h[class] = NewHistogram()
	}
	recordLatency(h[class], d)
}

// TierStat is one tier class of a run: answered requests and latency.
type TierStat struct {
	Requests int64   `json:"requests"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// tierStats merges the workers' histograms per class.
func tierStats(workers []*worker) map[string]TierStat {
	merged := map[string]*hdrhistogram.Histogram{}
	for _, w := range workers {
		for class, h := range w.tiers {
			if merged[class] == nil {
				merged[class] = NewHistogram()
			}
			merged[class].Merge(h)
		}
	}
	out := map[string]TierStat{}
	for class, h := range merged {
		l := Summarize(h)
		out[class] = TierStat{Requests: h.TotalCount(), P50Ms: l.P50, P99Ms: l.P99}
	}
	return out
}

// writeTiers prints one line per tier class, fastest first.
func writeTiers(b *strings.Builder, tiers map[string]TierStat) {
	classes := make([]string, 0, len(tiers))
	var total int64
	for c, s := range tiers {
		classes = append(classes, c)
		total += s.Requests
	}
	slices.SortFunc(classes, func(a, b string) int { return tierRank[a] - tierRank[b] })
	for _, c := range classes {
		s := tiers[c]
		fmt.Fprintf(b, "  tier %-6s  %d%s  p50 %.3f  p99 %.3f ms\n", c, s.Requests, pct(s.Requests, total), s.P50Ms, s.P99Ms)
	}
}

//go:build faults && partitions

package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/faults/history"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// idLoad is a load over n identities of one fixed-window rule (dimension
// app_id: each identity is an app, so its hash tag, and on a cluster its
// master, follows from its name), request seq going to identity seq % n: every identity is called at
// rate/n a second, and the history checker judges each.
type idLoad struct {
	run    string // distinguishes this test's identities from any other's
	n      int
	limit  int64
	window time.Duration
}

func newIDLoad(n int, limit int64, window time.Duration) idLoad {
	return idLoad{run: testenv.RandomHex(4), n: n, limit: limit, window: window}
}

func (l idLoad) rules() string {
	return fmt.Sprintf("rules:\n  - {name: fx, dimensions: [app_id], limit: %d, window: %s, algorithm: fixed_window}\n", l.limit, l.window)
}

func (l idLoad) identity(seq int64) string { return fmt.Sprintf("h%s-%d", l.run, seq%int64(l.n)) }

func (l idLoad) body(seq int64) []byte { return []byte(`{"app_id":"` + l.identity(seq) + `"}`) }

func (l idLoad) ids() []string {
	out := make([]string, l.n)
	for i := range out {
		out[i] = l.identity(int64(i))
	}
	return out
}

// ops turns a load's samples into the checker's history; healthy says
// whether every store was reachable while the sample was in flight.
func ops(ss Samples, identity func(int64) string, healthy func(Sample) bool) []history.Op {
	out := make([]history.Op, 0, len(ss))
	for _, s := range ss {
		op := history.Op{Identity: identity(s.Seq), Instance: s.Target, Cost: 1,
			Sent: s.Intended, Answered: s.Done(), Healthy: healthy(s)}
		switch {
		case s.Err != "" || s.Status == 0:
			op.Result = history.Unknown
		case s.Status == http.StatusOK:
			op.Result, op.Enforced = history.Allowed, s.Enforced != "false"
		case s.Status == http.StatusTooManyRequests:
			op.Result, op.Enforced = history.Denied, true
		default:
			op.Result = history.Unknown
		}
		out = append(out, op)
	}
	return out
}

// finalCounts reads each identity's count in the current window through
// quotad with a dry run (remaining = limit - count: exact for a fixed
// window, whose count never passes its limit).
func finalCounts(t *testing.T, url string, l idLoad) map[history.WindowKey]int64 {
	t.Helper()
	out := map[history.WindowKey]int64{}
	for _, id := range l.ids() {
		w := time.Now().UnixMilli() / l.window.Milliseconds()
		a, err := tryCall("POST", url+"/v1/check", `{"app_id":"`+id+`","dry_run":true}`)
		if err != nil {
			t.Fatalf("dry run of %s: %v", id, err)
		}
		if a.header.Get("Quota-Enforced") == "false" || (a.status != 200 && a.status != 429) {
			t.Fatalf("dry run of %s not decided: %d %s", id, a.status, a.raw)
		}
		var body struct {
			Rules []struct {
				Remaining int64 `json:"remaining"`
			} `json:"rules"`
		}
		if err := json.Unmarshal(a.raw, &body); err != nil || len(body.Rules) != 1 {
			t.Fatalf("dry run of %s: %v %s", id, err, a.raw)
		}
		if w2 := time.Now().UnixMilli() / l.window.Milliseconds(); w2 == w {
			out[history.WindowKey{Identity: id, Window: w}] = l.limit - body.Rules[0].Remaining
		}
	}
	return out
}

// recovery is how long after `back` the last check that got no enforced
// decision was answered (0: every check due after back was decided).
func recovery(ss Samples, back time.Time) (time.Duration, int) {
	var last time.Time
	n := 0
	for _, s := range ss.Due(back, back.Add(time.Hour)) {
		if !decided(s) {
			n++
			if s.Done().After(last) {
				last = s.Done()
			}
		}
	}
	if last.IsZero() {
		return 0, 0
	}
	return last.Sub(back), n
}

// faultRow is one line of the per-fault table a partition test prints.
type faultRow struct {
	fault                 string
	checks, unenforced    int
	unknown               int
	over, underServe      int
	overCount, lost       int64
	doubled               int
	enforcedAgain, maxLat time.Duration
}

func newFaultRow(fault string, ss Samples, rep history.Report, back time.Time) faultRow {
	rec, _ := recovery(ss, back)
	return faultRow{fault: fault, checks: len(ss), unenforced: rep.Unenforced, unknown: rep.Unknown,
		over: rep.Count(history.OverAdmission), overCount: rep.Over, underServe: rep.Count(history.UnderServe),
		lost: rep.Lost, doubled: rep.Count(history.Doubled), enforcedAgain: rec, maxLat: ss.Latencies().Max}
}

func (r faultRow) String() string {
	return fmt.Sprintf("%-52s checks %6d | unenforced %5d | unknown %4d | over-admissions %3d (%4d calls) | under-serves %d | lost %4d | doubled %d | enforced again %7s | max latency %s",
		r.fault, r.checks, r.unenforced, r.unknown, r.over, r.overCount, r.underServe, r.lost, r.doubled,
		r.enforcedAgain.Round(time.Millisecond), ms(r.maxLat))
}

func faultTable(rows []faultRow) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

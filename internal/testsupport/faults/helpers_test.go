//go:build faults

package faults

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/bench/loadgen"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinaries()
	os.Exit(code)
}

// The default rules of the platform plus a probe rule with a limit of 1, to
// see a real denial.
const platformRules = `rules:
  - {name: app_ip_hourly, dimensions: [app_id, ip], limit: 10000, window: 1h, algorithm: fixed_window}
  - {name: app_user_iface_hourly, dimensions: [app_id, user_id, interface_id], limit: 1000, window: 1h, algorithm: fixed_window}
  - {name: probe, dimensions: [probe], limit: 1, window: 1h, algorithm: fixed_window}
`

const adminToken = "faults-admin-token-0123456789"

func writeRules(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// shardsEnv gives quotad two fresh shard databases on the shared MariaDB,
// so nothing it might write lands in another test's databases.
func shardsEnv(t *testing.T) string {
	_, env := shards(t)
	return env
}

// shards is shardsEnv with handles on the two databases.
func shards(t *testing.T) ([]*sql.DB, string) {
	t.Helper()
	a, dsnA := testenv.MySQL(t)
	b, dsnB := testenv.MySQL(t)
	return []*sql.DB{a, b}, "QUOTA_MYSQL_SHARDS=" + dsnA + "," + dsnB
}

// platformBody is request seq of a quotabench-like load: 1,000 apps,
// 100,000 users and IPs, 50 interfaces.
func platformBody(seq int64) []byte {
	u := uint64(seq)
	return loadgen.AppendCheck(make([]byte, 0, 128), loadgen.Key{
		App: u % 1000, User: (u * 7919) % 100000, IP: (u * 104729) % 100000, Iface: u % 50,
	})
}

type answer struct {
	status int
	header http.Header
	raw    []byte
}

func (a answer) code() string { return ErrorCode(a.raw) }

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.raw, &m); err != nil {
		t.Fatalf("answer is not a JSON object: %q", a.raw)
	}
	return m
}

var client = &http.Client{Timeout: 10 * time.Second}

// call sends one request; header is name, value, name, value….
func call(t *testing.T, method, url, body string, header ...string) answer {
	t.Helper()
	a, err := tryCall(method, url, body, header...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

func tryCall(method, url, body string, header ...string) (answer, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, raw: raw}, err
}

func check(t *testing.T, q *testenv.Quotad, body string) answer {
	t.Helper()
	return call(t, "POST", q.URL+"/v1/check", body)
}

// footprint is what a process holds when idle.
type footprint struct {
	goroutines, rss, heap, nextGC float64
}

func (f footprint) String() string {
	return fmt.Sprintf("goroutines %.0f, RSS %.1f MiB, heap in use %.1f MiB, next GC at %.1f MiB",
		f.goroutines, f.rss/(1<<20), f.heap/(1<<20), f.nextGC/(1<<20))
}

// idleFootprint waits until quotad serves nothing (but this /metrics) and
// its goroutine count has been the same for three reads 200 ms apart, then
// returns it with RSS and heap in use.
func idleFootprint(t *testing.T, q *testenv.Quotad) footprint {
	t.Helper()
	var last []float64
	var m map[string]float64
	err := PollUntil(30*time.Second, 200*time.Millisecond, func() error {
		var err error
		if m, err = q.Metrics(); err != nil {
			return err
		}
		if m["quota_http_in_flight"] > 1 {
			last = last[:0]
			return fmt.Errorf("%v requests in flight", m["quota_http_in_flight"])
		}
		last = append(last, m["go_goroutines"])
		if n := len(last); n < 3 || last[n-1] != last[n-2] || last[n-2] != last[n-3] {
			return fmt.Errorf("goroutines still moving: %v", last)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("quotad never idle: %v", err)
	}
	return footprint{goroutines: m["go_goroutines"], rss: m["process_resident_memory_bytes"],
		heap: m["go_memstats_heap_inuse_bytes"], nextGC: m["go_memstats_next_gc_bytes"]}
}

// goroutinesFallWait is how long goroutinesFallTo waits.
const goroutinesFallWait = api.IdleWorkersLinger + 5*time.Second

// goroutinesFallTo waits goroutinesFallWait for quotad's goroutines to fall
// to at most n, and returns the last count and whether they did. The HTTP edge's idle
// workers outlive a burst's connections by up to api.IdleWorkersLinger,
// so a count read once idle may be high for a while; a leak never falls.
func goroutinesFallTo(t *testing.T, q *testenv.Quotad, n float64) (float64, bool) {
	t.Helper()
	var last float64
	err := PollUntil(goroutinesFallWait, 500*time.Millisecond, func() error {
		m, err := q.Metrics()
		if err != nil {
			return err
		}
		if last = m["go_goroutines"]; last > n {
			return fmt.Errorf("%.0f goroutines", last)
		}
		return nil
	})
	return last, err == nil
}

// gcLine is a GODEBUG=gctrace=1 line: "gc 7 @1.234s 2%: …, 4->5->2 MB, …";
// the last figure is the heap marked live by that GC.
var gcLine = regexp.MustCompile(`gc \d+ @([0-9.]+)s [^\n]*?(\d+)->(\d+)->(\d+) MB`)

// liveHeapMB returns the live heap (MB) of the GCs quotad logged between
// from and to, given when the process started (gctrace times count from it).
func liveHeapMB(logs string, started, from, to time.Time) []float64 {
	var out []float64
	for _, m := range gcLine.FindAllStringSubmatch(logs, -1) {
		at, err1 := strconv.ParseFloat(m[1], 64)
		live, err2 := strconv.ParseFloat(m[4], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if t := started.Add(time.Duration(at * float64(time.Second))); !t.Before(from) && t.Before(to) {
			out = append(out, live)
		}
	}
	return out
}

// assertAlive fails the test if quotad died or panicked.
func assertAlive(t *testing.T, q *testenv.Quotad) {
	t.Helper()
	if d := os.Getenv("FAULTS_DUMP_LOGS"); d != "" {
		_ = os.MkdirAll(d, 0o755)
		_ = os.WriteFile(filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_")+"-"+strings.TrimPrefix(q.Addr, "127.0.0.1:")+".log"), []byte(q.Logs()), 0o644)
	}
	if !q.Running() {
		t.Fatalf("quotad exited (%v): %s", q.ExitErr(), tail(q.Logs(), 40))
	}
	for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
		if strings.Contains(q.Logs(), bad) {
			t.Fatalf("quotad logged %q: %s", bad, tail(q.Logs(), 80))
		}
	}
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// figures collects the numbers a test reports, printed as one line per
// test prefixed FIGURES, and appended to $FAULTS_FIGURES if set.
type figures struct {
	t *testing.T
	b bytes.Buffer
}

func newFigures(t *testing.T) *figures {
	f := &figures{t: t}
	t.Cleanup(f.flush)
	return f
}

func (f *figures) add(format string, args ...any) {
	if f.b.Len() > 0 {
		f.b.WriteString("; ")
	}
	fmt.Fprintf(&f.b, format, args...)
}

func (f *figures) flush() {
	line := fmt.Sprintf("FIGURES %s: %s", f.t.Name(), f.b.String())
	f.t.Log(line)
	if p := os.Getenv("FAULTS_FIGURES"); p != "" {
		if fh, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			status := "ok"
			if f.t.Failed() {
				status = "FAILED"
			}
			fmt.Fprintf(fh, "%s [%s] %s\n", time.Now().UTC().Format(time.RFC3339), status, line)
			fh.Close()
		}
	}
}

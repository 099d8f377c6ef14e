package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// cellsQuotad starts a quotad on shards of its own whose cycles scan at
// most perSec cells a second, and calls it so that cell_activity holds
// about 2 × checks cells (each check: one cell of each default rule).
func cellsQuotad(t *testing.T, checks int, perSec int) *testenv.Quotad {
	t.Helper()
	_, dsn0 := testenv.MySQL(t)
	_, dsn1 := testenv.MySQL(t)
	q := testenv.StartQuotad(t,
		"QUOTA_MYSQL_SHARDS="+dsn0+","+dsn1,
		"QUOTA_REDIS_KEY_PREFIX=t:"+testenv.RandomHex(6)+":",
		"QUOTA_ADMIN_TOKEN="+admin,
		"QUOTA_MIGRATE_CELLS_PER_SEC="+strconv.Itoa(perSec),
		"QUOTA_ANALYTICS=off",
		"QUOTA_MIGRATE_MIN_WINDOW=0s", // the default rules' hourly cells have activity
		// Every check counted (and its cells' activity recorded) or
		// refused, never allowed unenforced, even on a loaded machine.
		"QUOTA_FAIL_MODE=closed",
		"QUOTA_REDIS_TIMEOUT=2s",
	)
	for done := 0; done < checks; {
		n := min(checks-done, 500)
		var b strings.Builder
		b.WriteString(`{"checks":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"app_id":"a%d","ip":"10.1.%d.%d","user_id":"u%d","interface_id":"i"}`, (done+i)%20, (done+i)/250, (done+i)%250, done+i)
		}
		b.WriteString(`]}`)
		for try := 1; ; try++ {
			resp, err := http.Post(q.URL+"/v1/check/batch", "application/json", strings.NewReader(b.String()))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			// 503: a store call timed out (nothing counted): again.
			if resp.StatusCode != http.StatusServiceUnavailable || try == 5 {
				t.Fatalf("batch: %d %s", resp.StatusCode, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
		done += n
	}
	return q
}

var (
	// plainLine is a progress line on a pipe: time, job, percentage or
	// end state, figures.
	plainLine  = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (migrate-\S+) (\d+\.\d%|done|failed) migrate: (\d+)/32 parts, ([\d,]+)(?:/[\d,]+\+?)? cells, [\d,]+ moved, [\d,]+/s, \S+ elapsed, ETA \S+$`)
	barPercent = regexp.MustCompile(`(\d+)% \|`)
	ansiOrCR   = regexp.MustCompile("\r|\x1b\\[")
	reportLine = regexp.MustCompile(`scanned (\d+) cells in `)
)

// quotactl migrate shows the cycle's progress while it waits: on a pipe,
// one plain line every --every, percentages growing to "done" and no
// terminal control; on a pseudo-terminal, a bar redrawn in place up to
// 100%. Either way the report follows on stdout, and the cells it says
// were scanned are the ones the progress ended at.
func TestQuotactlMigrate_ShowsProgressAsABarOnATerminalAndAsLinesOnAPipe(t *testing.T) {
	t.Parallel()
	const checks = 1200 // ~2,400 cells
	q := cellsQuotad(t, checks, 500)
	bin := testenv.Binary(t, "quotactl")
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, cmd *exec.Cmd) (stdout, stderr string)
		test func(t *testing.T, stderr string, scanned int)
	}{
		{"pipe", runOnPipes, checkPlainLines},
		{"terminal", runOnPTY, checkBar},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, "--url", q.URL, "--token", admin, "migrate", "--every", "500ms")
			cmd.Env = append(os.Environ(), "TERM=xterm", "COLUMNS=160")
			start := time.Now()
			stdout, stderr := tc.run(t, cmd)
			took := time.Since(start)
			m := reportLine.FindStringSubmatch(stdout)
			if m == nil {
				t.Fatalf("no report on stdout:\n%s\nstderr:\n%q", stdout, stderr)
			}
			scanned, _ := strconv.Atoi(m[1])
			if scanned < 2*checks || took < 2*time.Second {
				t.Fatalf("cycle scanned %d cells in %s: want at least %d over seconds", scanned, took, 2*checks)
			}
			tc.test(t, stderr, scanned)
		})
	}
}

func runOnPipes(t *testing.T, cmd *exec.Cmd) (string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("quotactl migrate: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

func runOnPTY(t *testing.T, cmd *exec.Cmd) (string, string) {
	t.Helper()
	// stderr on the terminal (the bar), stdout on a pipe (the report).
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 160}); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var term bytes.Buffer
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := io.Copy(&term, ptmx)
		var pe *os.PathError
		if err != nil && !(errors.As(err, &pe) && errors.Is(pe.Err, syscall.EIO)) {
			t.Errorf("reading the terminal: %v", err)
		}
	})
	err = cmd.Wait()
	wg.Wait()
	if err != nil {
		t.Fatalf("quotactl migrate on a terminal: %v\n%q", err, term.String())
	}
	return stdout.String(), term.String()
}

func checkPlainLines(t *testing.T, stderr string, scanned int) {
	t.Helper()
	if ansiOrCR.MatchString(stderr) {
		t.Errorf("terminal control on a pipe: %q", stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last, lastScanned, running := -1.0, -1, 0
	for i, l := range lines {
		m := plainLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line %d is not a progress line: %q\nall:\n%s", i, l, stderr)
		}
		n, _ := strconv.Atoi(strings.ReplaceAll(m[4], ",", ""))
		if n < lastScanned {
			t.Errorf("line %d: %d cells scanned, fewer than before (%d)", i, n, lastScanned)
		}
		lastScanned = n
		if i == len(lines)-1 {
			if m[2] != "done" || m[3] != "32" || n != scanned {
				t.Errorf("last line %q: want done, 32/32 parts and %d cells", l, scanned)
			}
			continue
		}
		pct, _ := strconv.ParseFloat(strings.TrimSuffix(m[2], "%"), 64)
		if pct < last {
			t.Errorf("line %d: %.1f%%, less than before (%.1f%%)", i, pct, last)
		}
		if pct > 0 && pct < 100 {
			running++
		}
		last = pct
	}
	if running < 2 {
		t.Errorf("%d lines between 0%% and 100%%, want at least 2 (one every 500ms over seconds):\n%s", running, stderr)
	}
	t.Logf("pipe:\n%s", stderr)
}

func checkBar(t *testing.T, term string, scanned int) {
	t.Helper()
	if !strings.Contains(term, "\r") {
		t.Errorf("the bar is never redrawn in place (no carriage return): %q", term)
	}
	var pcts []int
	for _, m := range barPercent.FindAllStringSubmatch(term, -1) {
		p, _ := strconv.Atoi(m[1])
		pcts = append(pcts, p)
	}
	mid := 0
	for i, p := range pcts {
		if i > 0 && p < pcts[i-1] {
			t.Errorf("the bar went back from %d%% to %d%%", pcts[i-1], p)
		}
		if p > 0 && p < 100 {
			mid++
		}
	}
	if len(pcts) == 0 || pcts[len(pcts)-1] != 100 || mid < 2 {
		t.Errorf("bar percentages %v: want several between 0 and 100, ending at 100", pcts)
	}
	if want := fmt.Sprintf("32/32 parts, %s/%s cells", group(int64(scanned)), group(int64(scanned))); !strings.Contains(term, want) {
		t.Errorf("the finished bar lacks %q: %q", want, tail(term, 400))
	}
	t.Logf("terminal (last frame): %q", tail(term, 300))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// lockedBuffer is a bytes.Buffer safe for a process's writes and the
// test's reads at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Ctrl-C stops quotactl's waiting, not the job: quotactl exits 130 naming
// the job, which runs on in quotad to its end.
func TestQuotactlMigrate_CtrlCStopsTheWaitingNotTheJob(t *testing.T) {
	t.Parallel()
	q := cellsQuotad(t, 1000, 300) // ~2,000 cells: ~7 s
	cmd := exec.Command(testenv.Binary(t, "quotactl"), "--url", q.URL, "--token", admin, "migrate", "--every", "200ms")
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !regexp.MustCompile(` [1-9]\d*\.\d% migrate:`).MatchString(stderr.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no progress within 30 s: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("quotactl after Ctrl-C: %v, want exit status 130\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`stopped waiting; job (migrate-\S+) goes on`).FindStringSubmatch(stderr.String())
	if m == nil || stdout.String() != "" {
		t.Fatalf("stderr %q, stdout %q: want the job named and no report", stderr.String(), stdout.String())
	}
	for {
		req, _ := http.NewRequest("GET", q.URL+"/v1/admin/jobs/"+m[1], nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var job struct {
			State    string `json:"state"`
			Error    string `json:"error"`
			Progress struct {
				PartsDone    int   `json:"parts_done"`
				CellsScanned int64 `json:"cells_scanned"`
			} `json:"progress"`
		}
		err = json.NewDecoder(resp.Body).Decode(&job)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		// Ended: done, or failed if some move batch failed (a loaded
		// machine; the next cycle repairs): either way it ran to its end.
		if job.State == "done" || job.State == "failed" {
			if job.Progress.PartsDone != 32 || job.Progress.CellsScanned < 2000 {
				t.Fatalf("job after Ctrl-C ended %+v: want every part and cell", job)
			}
			if job.State == "failed" {
				t.Logf("the job ended with failures: %s", job.Error)
			}
			return
		}
		if job.State != "running" || time.Now().After(deadline) {
			t.Fatalf("job after Ctrl-C: %+v", job)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Behind a load balancer, a poll of the job that reaches another instance
// (which does not keep it) is sent to the instance that runs the job, by
// the address its job names: quotactl migrate through a round-robin
// proxy over two instances waits for the job to its end.
func TestQuotactlMigrate_ThroughALoadBalancerPollsTheInstanceThatRunsTheJob(t *testing.T) {
	t.Parallel()
	_, dsn0 := testenv.MySQL(t)
	_, dsn1 := testenv.MySQL(t)
	env := []string{"QUOTA_MYSQL_SHARDS=" + dsn0 + "," + dsn1, "QUOTA_REDIS_KEY_PREFIX=t:" + testenv.RandomHex(6) + ":",
		"QUOTA_ADMIN_TOKEN=" + admin, "QUOTA_ANALYTICS=off"}
	qs := []*testenv.Quotad{testenv.StartQuotad(t, env...), testenv.StartQuotad(t, env...)}
	var mu sync.Mutex
	next, hits := 0, map[string]int{}
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		q := qs[next%len(qs)]
		next++
		hits[q.URL]++
		mu.Unlock()
		target, _ := url.Parse(q.URL)
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
	}))
	defer lb.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"--url", lb.URL, "--token", admin, "migrate", "--every", "300ms"}, &out, &errb); code != 0 {
		t.Fatalf("migrate through the balancer: %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), "scanned 0 cells") || !strings.Contains(errb.String(), " done migrate: 32/32 parts") {
		t.Fatalf("stdout %q, stderr %q: want the report and the job done", out.String(), errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if hits[qs[1].URL] == 0 {
		t.Fatalf("the balancer sent nothing to the second instance (%v): the test proves nothing", hits)
	}
}

//go:build faults

package faults

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// The server timeouts live in cmd/quotad, so these tests speak raw HTTP/1.1
// over TCP to the real binary.

func startPlain(t *testing.T, env ...string) *testenv.Quotad {
	t.Helper()
	r := testenv.StartRedis(t)
	return testenv.StartQuotad(t, append([]string{"QUOTA_REDIS_ADDRS=" + r.Addr(),
		"QUOTA_RULES=" + writeRules(t, platformRules), shardsEnv(t)}, env...)...)
}

func dial(t *testing.T, q *testenv.Quotad) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", q.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin waits up to limit for the server to end the connection (EOF
// or reset after whatever it answered) and returns when it did and what it
// sent.
func closedWithin(c net.Conn, limit time.Duration) (time.Duration, string, bool) {
	began := time.Now()
	_ = c.SetReadDeadline(began.Add(limit))
	var got strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return time.Since(began), got.String(), false
			}
			return time.Since(began), got.String(), true
		}
	}
}

// A slowloris client (headers trickled a byte a second) is cut off by the
// edge's header timeout (5 s, api's headerTimeout), and a hundred of them
// do not stop checks.
func TestHardening_SlowlorisHeadersAreCutOff(t *testing.T) {
	q := startPlain(t)
	fig := newFigures(t)
	const n = 100
	var wg sync.WaitGroup
	var cut atomic.Int64
	var slowest atomic.Int64
	began := time.Now()
	for i := range n {
		c := dial(t, q)
		wg.Go(func() {
			_, _ = io.WriteString(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\n")
			stop := make(chan struct{})
			go testenv.Trickle(c, "X", time.Second, stop) // one byte a second, forever
			d, _, closed := closedWithin(c, 9*time.Second)
			close(stop)
			if closed {
				cut.Add(1)
				for {
					old := slowest.Load()
					if int64(d) <= old || slowest.CompareAndSwap(old, int64(d)) {
						break
					}
				}
			} else {
				t.Errorf("slowloris connection %d still open after %s", i, d)
			}
		})
	}
	// Meanwhile checks answer as usual.
	time.Sleep(500 * time.Millisecond) // let the slow connections settle in
	var worst time.Duration
	for range 20 {
		t0 := time.Now()
		if a := check(t, q, `{"app_id":"a","ip":"1.2.3.4"}`); a.status != 200 {
			t.Fatalf("check during slowloris: %d %s", a.status, a.raw)
		}
		worst = max(worst, time.Since(t0))
	}
	if worst > 250*time.Millisecond {
		t.Errorf("a check took %s with %d slowloris connections open", worst, n)
	}
	wg.Wait()
	if d := time.Duration(slowest.Load()); d < 4*time.Second || d > 8*time.Second {
		t.Errorf("slowloris connections cut after up to %s; want the header timeout (5 s)", d)
	}
	assertAlive(t, q)
	fig.add("%d slowloris connections all cut by the server (%d), the last %s after it started; 20 checks meanwhile, slowest %s (total %s)",
		n, cut.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), worst.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// A body trickled a byte every half second holds no in-flight slot while it
// arrives (the slot is taken once a check's body is read) and is cut off
// 10 s after its head (api's bodyTimeout), with a 408.
func TestHardening_SlowBodyIsCutOff(t *testing.T) {
	q := startPlain(t)
	fig := newFigures(t)
	// quota_http_in_flight with nothing else in flight (1 if /metrics
	// counts itself, 0 if it is exempt from the in-flight cap).
	base := q.Metric("quota_http_in_flight")
	c := dial(t, q)
	_, _ = io.WriteString(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
	sent := time.Now()
	_ = c.SetReadDeadline(sent.Add(5 * time.Second))
	// net/http answers 100 Continue when the body is first read: from then
	// on quotad is reading this body.
	const cont = "HTTP/1.1 100 Continue\r\n\r\n"
	buf := make([]byte, len(cont))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != cont {
		t.Fatalf("want %q, got %q %v", cont, buf, err)
	}
	_, _ = io.WriteString(c, "{")
	stop := make(chan struct{})
	defer close(stop)
	go testenv.Trickle(c, " ", 500*time.Millisecond, stop)
	for range 10 {
		if v := q.Metric("quota_http_in_flight"); v != base {
			t.Fatalf("a body still arriving holds an in-flight slot: in flight %v, %v when idle", v, base)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, answer, closed := closedWithin(c, 14*time.Second)
	d := time.Since(sent)
	if !closed {
		t.Fatalf("a slow body was still being read after %s", d)
	}
	if d > 12*time.Second {
		t.Errorf("slow body cut after %s; want 10 s after the head", d)
	}
	if answer != "" && (!strings.Contains(answer, " 408 ") || !strings.Contains(answer, `"request_timeout"`)) {
		t.Errorf("answer to a body cut off: %q, want nothing or 408 request_timeout", answer)
	}
	if err := PollUntil(2*time.Second, 50*time.Millisecond, func() error {
		if v := q.Metric("quota_http_in_flight"); v != base {
			return fmt.Errorf("in flight %v", v)
		}
		return nil
	}); err != nil {
		t.Errorf("the in-flight slot was not freed: %v", err)
	}
	first, _, _ := strings.Cut(answer, "\r\n")
	fig.add("body trickled at 2 B/s: connection ended %s after the headers, answer %q", d.Round(time.Millisecond), first)
}

// A body far over 64 KiB is refused with 413 as soon as 64 KiB have been
// read, without reading the rest: chunked (no Content-Length) and with a
// Content-Length that says so at once.
func TestHardening_HugeBodiesAre413Quickly(t *testing.T) {
	q := startPlain(t)
	fig := newFigures(t)
	for _, path := range []string{"/v1/check", "/v1/check/batch"} {
		t.Run("chunked"+path, func(t *testing.T) {
			c := dial(t, q)
			_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
			// 10 MB at about 1.3 MB/s: sending it all would take ~8 s.
			chunk := fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("a", 64<<10))
			var sent atomic.Int64
			stop := make(chan struct{})
			go func() {
				for i := 0; sent.Load() < 10<<20; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := io.WriteString(c, chunk); err != nil {
						return
					}
					sent.Add(64 << 10)
					if i >= 2 {
						time.Sleep(50 * time.Millisecond)
					}
				}
			}()
			t0 := time.Now()
			_ = c.SetReadDeadline(t0.Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			took := time.Since(t0)
			close(stop)
			if err != nil {
				t.Fatalf("no answer to a 10 MB chunked body within 5 s: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || ErrorCode(body) != "body_too_large" {
				t.Fatalf("10 MB chunked body: %d %s", resp.StatusCode, body)
			}
			if took > 1500*time.Millisecond || sent.Load() >= 10<<20 {
				t.Errorf("413 after %s, %d bytes sent: the body was read whole", took, sent.Load())
			}
			fig.add("%s 10 MB chunked: 413 after %s, %d KiB sent by then", path, took.Round(time.Millisecond), sent.Load()>>10)
		})
		t.Run("content-length"+path, func(t *testing.T) {
			c := dial(t, q)
			_, _ = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n")
			t0 := time.Now()
			_ = c.SetReadDeadline(t0.Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to Content-Length: 10485760 without a body: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || time.Since(t0) > time.Second {
				t.Fatalf("declared 10 MB: %d %s after %s", resp.StatusCode, body, time.Since(t0))
			}
		})
	}
	// Headers over MaxHeaderBytes (16 KiB) are refused too.
	c := dial(t, q)
	_, _ = io.WriteString(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("b", 64<<10)+"\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB header: %v %v", resp, err)
	}
	// A batch over 1,000 checks is a 400 that counts nothing.
	items := strings.TrimSuffix(strings.Repeat(`{"probe":"batch-limit"},`, 1001), ",")
	if a := call(t, "POST", q.URL+"/v1/check/batch", `{"checks":[`+items+`]}`); a.status != 400 || a.code() != "invalid_batch" {
		t.Errorf("1,001-check batch: %d %s", a.status, a.raw)
	}
	if a := check(t, q, `{"probe":"batch-limit"}`); a.status != 200 {
		t.Errorf("the refused batch counted: %d %s", a.status, a.raw)
	}
	assertAlive(t, q)
}

// Tokens and keys never appear in quotad's logs or metrics, whatever
// requests carry them: right or wrong, on any path, with Redis down (so
// errors are logged) or up.
func TestAccess_TokensNeverInLogsOrMetrics(t *testing.T) {
	r := testenv.StartRedis(t)
	const checkToken = "check-token-SECRET-0123456789"
	q := testenv.StartQuotad(t, "QUOTA_REDIS_ADDRS="+r.Addr(), "QUOTA_RULES="+writeRules(t, platformRules), shardsEnv(t),
		"QUOTA_ADMIN_TOKEN="+adminToken, "QUOTA_CHECK_TOKEN="+checkToken)
	secrets := []string{adminToken, checkToken}
	wrong := func(i int) string {
		s := fmt.Sprintf("wrong-token-SECRET-%d-%d", i, time.Now().UnixNano())
		secrets = append(secrets, s)
		return s
	}
	// An app key, if quotad mints them.
	var appKey string
	if a := call(t, "POST", q.URL+"/v1/admin/apps", `{"app_id":"tok-app"}`, "Authorization", "Bearer "+adminToken); a.status == http.StatusCreated {
		appKey, _ = a.json(t)["key"].(string)
		if appKey == "" {
			t.Fatalf("POST /v1/admin/apps: no key in %s", a.raw)
		}
		secrets = append(secrets, appKey)
	}
	send := func() {
		auths := []string{"Bearer " + checkToken, "Bearer " + adminToken, "Bearer " + wrong(1), "Basic " + wrong(2), wrong(3)}
		if appKey != "" {
			auths = append(auths, "Bearer "+appKey)
		}
		for _, auth := range auths {
			call(t, "POST", q.URL+"/v1/check", `{"app_id":"tok-app","user_id":"u","interface_id":"i"}`, "Authorization", auth)
			call(t, "POST", q.URL+"/v1/check/batch", `{"checks":[{"app_id":"tok-app"}]}`, "Authorization", auth)
			call(t, "POST", q.URL+"/v1/check", `{"app_id":`, "Authorization", auth) // malformed
			call(t, "PUT", q.URL+"/v1/rules", `{"rules":[{"name":"bad"}]}`, "Authorization", auth)
			call(t, "GET", q.URL+"/v1/apps/tok-app/stats?date=2026-01-01", "", "Authorization", auth)
			call(t, "GET", q.URL+"/v1/apps/other-app/stats?date=2026-01-01", "", "Authorization", auth)
			call(t, "GET", q.URL+"/v1/admin/tiers", "", "Authorization", auth)
			call(t, "POST", q.URL+"/v1/admin/migrate", "", "Authorization", auth)
			call(t, "GET", q.URL+"/nope/"+wrong(4), "", "Authorization", auth)
			call(t, "GET", q.URL+"/v1/rules?token="+wrong(5), "", "Authorization", auth, "X-Api-Key", wrong(6))
		}
	}
	send()
	r.Kill() // errors get logged now
	send()
	r.Start()
	send()
	metrics, err := q.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	assertAlive(t, q)
	logs := q.Logs()
	if !strings.Contains(logs, "check undecided") {
		t.Fatalf("no error was logged, the test proves little: %s", tail(logs, 20))
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("a token (%.12s…) is in quotad's log", s)
		}
		if strings.Contains(metrics, s) {
			t.Errorf("a token (%.12s…) is in /metrics", s)
		}
	}
	newFigures(t).add("%d distinct tokens/keys on %d requests, 0 in %d bytes of log and %d bytes of /metrics",
		len(secrets), 3*10*6, len(logs), len(metrics))
}

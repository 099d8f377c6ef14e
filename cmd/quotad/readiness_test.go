package main_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// /readyz follows the fail mode: with its Redis killed, an open instance
// stays ready (its checks are answered, allowed and unenforced) while a
// closed one is not; both are ready again once Redis is back.
func TestReadyz_RedisOutageMakesOnlyClosedModeUnready(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rulesPath := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	env := []string{"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_ANALYTICS=off", "QUOTA_TIERING=off"}
	open := startServer(t, rulesPath, append(env, "QUOTA_FAIL_MODE=open")...)
	closed := startServer(t, rulesPath, append(env, "QUOTA_FAIL_MODE=closed")...)
	for _, s := range []*server{open, closed} {
		if status, checks := readyz(t, s.url); status != http.StatusOK || checks["redis"] != "ok" {
			t.Fatalf("before the outage: %d %v", status, checks)
		}
	}
	r.Kill()
	waitReadyz(t, open.url, "open mode, Redis down: ready, Redis reported", func(status int, c map[string]string) bool {
		return status == http.StatusOK && c["redis"] != "ok"
	})
	waitReadyz(t, closed.url, "closed mode, Redis down: not ready", func(status int, c map[string]string) bool {
		return status == http.StatusServiceUnavailable && c["redis"] != "ok"
	})
	if code := postCheck(t, open.url, `{"user_id":"u"}`); code != http.StatusOK {
		t.Fatalf("open mode check with Redis down: %d", code)
	}
	r.Start()
	for _, s := range []*server{open, closed} {
		waitReadyz(t, s.url, "ready again once Redis is back", func(status int, c map[string]string) bool {
			return status == http.StatusOK && c["redis"] == "ok"
		})
	}
}

// On SIGTERM /readyz turns 503 at once, checks are still answered for
// QUOTA_DRAIN, and a request in flight when the server stops (a body still
// arriving) is answered before quotad exits 0.
func TestSIGTERM_ReadyzTurns503ThenInFlightRequestsFinish(t *testing.T) {
	t.Parallel()
	const drainFor = 1500 * time.Millisecond
	s := startServer(t, writeFile(t, t.TempDir(), "rules.yaml", validRules),
		"QUOTA_DRAIN="+drainFor.String(), "QUOTA_ANALYTICS=off", "QUOTA_TIERING=off")
	if status, _ := readyz(t, s.url); status != http.StatusOK {
		t.Fatalf("before SIGTERM: /readyz %d", status)
	}
	// A check whose body has not fully arrived: in flight throughout.
	pr, pw := io.Pipe()
	inflight := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.url+"/v1/check", pr)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			inflight <- 0
			return
		}
		resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(`{"user_id":`)); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	termAt := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, s.url, "503 after SIGTERM", func(status int, _ map[string]string) bool { return status == http.StatusServiceUnavailable })
	notReadyAfter := time.Since(termAt)
	if notReadyAfter > drainFor/2 {
		t.Fatalf("/readyz turned 503 only %s after SIGTERM", notReadyAfter)
	}
	if code := postCheck(t, s.url, `{"user_id":"v"}`); code != http.StatusOK {
		t.Fatalf("a check during the drain wait: %d, want 200", code)
	}
	// Past the wait the listener is closed; the process waits for the
	// request in flight.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("quotad still accepts connections 10 s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stoppedAfter := time.Since(termAt)
	if stoppedAfter < drainFor {
		t.Fatalf("the listener closed %s after SIGTERM, before QUOTA_DRAIN (%s)", stoppedAfter, drainFor)
	}
	select {
	case err := <-exited:
		t.Fatalf("quotad exited (%v) with a request in flight: %s", err, s.logs)
	default:
	}
	if _, err := pw.Write([]byte(`"u"}`)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if code := <-inflight; code != http.StatusOK {
		t.Fatalf("the request in flight at shutdown: %d, want 200", code)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("quotad exit: %v: %s", err, s.logs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("quotad did not exit after its last request")
	}
	t.Logf("readyz 503 %s after SIGTERM; listener closed after %s (QUOTA_DRAIN %s)", notReadyAfter.Round(time.Millisecond), stoppedAfter.Round(time.Millisecond), drainFor)
}

func waitReadyz(t *testing.T, url, what string, want func(int, map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, checks := readyz(t, url)
		if want(status, checks) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never showed %s: %d %v", what, status, checks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func postCheck(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(fmt.Errorf("check: %w", err))
	}
	resp.Body.Close()
	return resp.StatusCode
}

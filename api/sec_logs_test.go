package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// secServer is an api.Server whose log the test reads, on Redis at addr
// (a dead address makes every check undecided, which is logged).
func secServer(t *testing.T, rdb redis.UniversalClient, prefix string, mutate func(*config.Settings)) (*httptest.Server, *lockedLog) {
	t.Helper()
	set, err := rules.ParseYAML([]byte(oneRule))
	if err != nil {
		t.Fatal(err)
	}
	s := config.Defaults()
	mutate(&s)
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second})
	lim, err := limiter.New(hot, clock.Real{}, set)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedLog{}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(api.New(api.Deps{
		Settings: s, Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg,
		Log:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready: []api.ReadinessCheck{{Name: "redis", Check: hot.Ping}},
	}))
	t.Cleanup(srv.Close)
	return srv, logs
}

func send(t *testing.T, method, url, body string, header ...string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Tokens, right or wrong, never reach the log or /metrics, on any path,
// whether the store answers or not.
func TestSec_TokensNeverInLogsOrMetrics(t *testing.T) {
	t.Parallel()
	const admin, checkTok = "admin-SECRET-token-0123456789", "check-SECRET-token-0123456789"
	live, prefix := testenv.Redis(t)
	dead := clientOf("127.0.0.1:" + itoa(testenv.FreePort(t)))
	defer dead.Close()
	secrets := []string{admin, checkTok, "wrong-SECRET-1", "wrong-SECRET-2", "wrong-SECRET-3", "wrong-SECRET-4"}
	for _, rdb := range []redis.UniversalClient{live, dead} {
		srv, logs := secServer(t, rdb, prefix, func(s *config.Settings) { s.AdminToken, s.CheckToken = admin, checkTok })
		for _, auth := range []string{"Bearer " + admin, "Bearer " + checkTok, "Bearer wrong-SECRET-1", "Basic wrong-SECRET-2", "wrong-SECRET-3"} {
			send(t, "POST", srv.URL+"/v1/check", `{"user_id":"u"}`, "Authorization", auth)
			send(t, "POST", srv.URL+"/v1/check/batch", `{"checks":[{"user_id":"u"}]}`, "Authorization", auth)
			send(t, "POST", srv.URL+"/v1/check", `{"user_id":`, "Authorization", auth)
			send(t, "PUT", srv.URL+"/v1/rules", `{"rules":[{"name":"x"}]}`, "Authorization", auth)
			send(t, "GET", srv.URL+"/v1/rules?token=wrong-SECRET-4", "", "Authorization", auth)
			send(t, "GET", srv.URL+"/readyz", "", "Authorization", auth)
			send(t, "GET", srv.URL+"/wrong-SECRET-4", "", "Authorization", auth)
		}
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rdb == dead && !strings.Contains(logs.String(), "check undecided") {
			t.Fatalf("nothing logged with the store down; the test proves little: %s", logs)
		}
		for _, s := range secrets {
			if strings.Contains(logs.String(), s) || strings.Contains(string(m), s) {
				t.Errorf("%s found in the log or /metrics", s)
			}
		}
	}
}

// With the store down every check is undecided; the log gets one line a
// second saying so (with how many it did not log), not one per check.
func TestSec_UndecidedChecksDoNotFloodTheLog(t *testing.T) {
	t.Parallel()
	dead := clientOf("127.0.0.1:" + itoa(testenv.FreePort(t)))
	defer dead.Close()
	srv, logs := secServer(t, dead, "t:", func(s *config.Settings) {})
	began := time.Now()
	for range 300 {
		if code := send(t, "POST", srv.URL+"/v1/check", `{"user_id":"u"}`); code != 200 {
			t.Fatalf("fail-open check: %d", code)
		}
	}
	lines := strings.Count(logs.String(), `"msg":"check undecided"`)
	if max := int(time.Since(began)/time.Second) + 1; lines < 1 || lines > max {
		t.Fatalf("%d 'check undecided' lines for 300 checks in %s (want 1..%d): %s", lines, time.Since(began), max, logs)
	}
	// A second later the next line is logged; the lines' counts of checks
	// not logged add up with the lines to every undecided check.
	time.Sleep(1100 * time.Millisecond) // the throttle's period, not a synchronisation
	send(t, "POST", srv.URL+"/v1/check", `{"user_id":"u"}`)
	logged, notLogged := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var e struct {
			Msg       string `json:"msg"`
			NotLogged *int   `json:"not_logged_since_last"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Msg != "check undecided" {
			continue
		}
		if e.NotLogged == nil {
			t.Fatalf("a 'check undecided' line without not_logged_since_last: %s", line)
		}
		logged++
		notLogged += *e.NotLogged
	}
	if logged != lines+1 || logged+notLogged != 301 {
		t.Fatalf("%d lines logged (+%d not logged) for 301 undecided checks: %s", logged, notLogged, logs)
	}
}

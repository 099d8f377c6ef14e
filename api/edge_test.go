package api_test

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/api"
)

// A request the edge cannot read is answered with the contract's error
// body, as the router answers the rest: a head over 16 KiB, a body over
// 64 KiB, a request that is not HTTP.
func TestEdge_AnswersRequestsItCannotReadWithTheErrorBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	addr := strings.TrimPrefix(h.srv.URL, "http://")
	big := strings.Repeat("x", 17<<10)
	cases := []struct {
		name, raw string
		status    int
		code      string
	}{
		{"head over 16 KiB", "POST /v1/check HTTP/1.1\r\nHost: q\r\nX-Big: " + big + "\r\nContent-Length: 2\r\n\r\n{}", 431, "headers_too_large"},
		{"body over 64 KiB", "POST /v1/check HTTP/1.1\r\nHost: q\r\nContent-Type: application/json\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat(" ", 70000), 413, "body_too_large"},
		{"body over 256 KiB", "POST /v1/check HTTP/1.1\r\nHost: q\r\nContent-Type: application/json\r\nContent-Length: 300000\r\n\r\n" + strings.Repeat(" ", 300000), 413, "body_too_large"},
		{"not HTTP", "HELLO\r\n\r\n", 400, "bad_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			go func() { _, _ = conn.Write([]byte(tc.raw)) }()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code, Message string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tc.status || body.Error.Code != tc.code || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %q (%s), want %d %q", resp.StatusCode, body.Error.Code, resp.Header.Get("Content-Type"), tc.status, tc.code)
			}
		})
	}
}

// With tracing on, quotad wraps the router in spans and asks the edge to
// send the check routes there too (ChecksThroughFallback); otherwise the
// edge answers them itself and hands only the other routes over.
func TestEdge_ChecksGoToTheFallbackOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, defaultRules)
	for _, through := range []bool{false, true} {
		fallback := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Fallback", "1")
			h.server.ServeHTTP(w, r)
		})
		hs := h.server.NewHTTPServer(api.EdgeOptions{Fallback: fallback, ChecksThroughFallback: through})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = hs.Serve(ln) }()
		t.Cleanup(func() { _ = hs.Shutdown() })
		url := "http://" + ln.Addr().String()
		for _, tc := range []struct {
			method, path, body string
			viaFallback        bool
		}{
			{"POST", "/v1/check", `{"app_id":"edge","user_id":"u"}`, through},
			{"POST", "/v1/check/batch", `{"checks":[{"app_id":"edge","user_id":"u"}]}`, through},
			{"GET", "/v1/auth", "", through},
			{"GET", "/healthz", "", true},
			{"GET", "/v1/check", "", true}, // not a check: the router's 405
		} {
			req, _ := http.NewRequest(tc.method, url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-App-Id", "edge")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-Fallback") == "1"; got != tc.viaFallback {
				t.Fatalf("through=%v: %s %s went to the fallback: %v, want %v (status %d)", through, tc.method, tc.path, got, tc.viaFallback, resp.StatusCode)
			}
			if tc.path == "/v1/check" && tc.method == "GET" && resp.StatusCode != http.StatusMethodNotAllowed {
				t.Fatalf("GET /v1/check: %d, want 405", resp.StatusCode)
			}
		}
	}
}

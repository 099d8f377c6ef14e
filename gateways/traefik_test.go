package gateways_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// forwardAuth is a reverse proxy with the semantics Traefik documents for
// its forwardAuth middleware (Traefik is not a Debian package, so the test
// does not run Traefik itself): for every request it first sends a GET to
// address carrying all the request's headers plus X-Forwarded-Method,
// -Proto, -Host, -Uri and -For; on a 2xx answer the original request goes
// on to the backend, with the answer's authResponseHeaders copied into it;
// on any other answer that answer — status, headers and body — is returned
// to the client and the backend never sees the request.
type forwardAuth struct {
	address             string
	authResponseHeaders []string
	backend             *httputil.ReverseProxy
}

func (f *forwardAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, f.address, nil)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	req.Header.Set("X-Forwarded-Method", r.Method)
	req.Header.Set("X-Forwarded-Proto", "http")
	req.Header.Set("X-Forwarded-Host", r.Host)
	req.Header.Set("X-Forwarded-Uri", r.URL.RequestURI())
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		req.Header.Set("X-Forwarded-For", host)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		return
	}
	for _, h := range f.authResponseHeaders {
		r.Header.Set(h, resp.Header.Get(h))
	}
	f.backend.ServeHTTP(w, r)
}

func TestTraefikForwardAuth_DenialAndBadInputReachTheClientWithTheirHeaders(t *testing.T) {
	t.Parallel()
	q := startQuotad(t, appIPRule)
	up := startUpstream(t)
	target, _ := url.Parse("http://" + up.addr)
	proxy := httptest.NewServer(&forwardAuth{
		address:             q.URL + "/v1/auth",
		authResponseHeaders: []string{"RateLimit-Remaining"},
		backend:             httputil.NewSingleHostReverseProxy(target),
	})
	t.Cleanup(proxy.Close)
	id := []string{"X-App-Id", "traefik", "X-Real-IP", "198.51.100.4"}
	for i := 1; i <= 5; i++ {
		resp, body := get(t, proxy.URL+"/api", id...)
		if resp.StatusCode != 200 || body != "hello from upstream\n" || resp.Header.Get("X-Seen-Remaining") != string(rune('0'+5-i)) {
			t.Fatalf("call %d: %d %v %q", i, resp.StatusCode, resp.Header, body)
		}
	}
	// Denied: quota's own 429, its headers and its body reach the client.
	resp, body := get(t, proxy.URL+"/api", id...)
	var decision struct {
		Allowed bool `json:"allowed"`
		Rules   []struct {
			Rule      string `json:"rule"`
			Remaining int64  `json:"remaining"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &decision); err != nil {
		t.Fatalf("denied body %q: %v", body, err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Limit") != "5" ||
		resp.Header.Get("RateLimit-Remaining") != "0" || decision.Allowed || len(decision.Rules) != 1 || decision.Rules[0].Rule != "app_ip_hourly" {
		t.Fatalf("denied: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// No identity header at all: quota's 400 with its error body.
	resp, body = get(t, proxy.URL+"/api")
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" || !json.Valid([]byte(body)) {
		t.Fatalf("no identity: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if got := up.hits.Load(); got != 5 {
		t.Fatalf("backend saw %d requests, want 5", got)
	}
}

package gateways_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// nginxPrelude opens an nginx configuration that runs in the foreground
// from the test's directory {dir}, up to inside its http block.
const nginxPrelude = `
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;`

// nginxConf is the README's nginx snippet in a complete file: every
// request to / is first sent, headers only, to quota's /v1/auth; 2xx lets
// it through to the upstream with the RateLimit-* headers added to the
// answer; quota's 403 (QUOTA_AUTH_DENY_STATUS=403: auth_request turns any
// status but 2xx, 401 and 403 into a 500) becomes a 429 with Retry-After.
// {quota} is quotad's address, {upstream} the upstream's.
const nginxConf = nginxPrelude + `
    upstream quota { server {quota}; keepalive 16; }
    server {
        listen 127.0.0.1:{port};
        location / {
            auth_request /_quota;
            auth_request_set $rl_limit $upstream_http_ratelimit_limit;
            auth_request_set $rl_remaining $upstream_http_ratelimit_remaining;
            auth_request_set $rl_reset $upstream_http_ratelimit_reset;
            auth_request_set $rl_retry $upstream_http_retry_after;
            add_header RateLimit-Limit $rl_limit always;
            add_header RateLimit-Remaining $rl_remaining always;
            add_header RateLimit-Reset $rl_reset always;
            error_page 403 = @quota_denied;
            proxy_pass http://{upstream};
        }
        location = /_quota {
            internal;
            proxy_pass http://quota/v1/auth;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Real-IP $remote_addr;
        }
        location @quota_denied {
            add_header RateLimit-Limit $rl_limit always;
            add_header RateLimit-Remaining $rl_remaining always;
            add_header RateLimit-Reset $rl_reset always;
            add_header Retry-After $rl_retry always;
            return 429;
        }
    }
}
`

const appIPRule = `
rules:
  - name: app_ip_hourly
    dimensions: [app_id, ip]
    limit: 5
    window: 1h
    algorithm: fixed_window
`

func TestNginx_AuthRequestAllowsExactlyTheLimitThenAnswers429WithHeaders(t *testing.T) {
	t.Parallel()
	q := startQuotad(t, appIPRule, "QUOTA_AUTH_DENY_STATUS=403")
	up := startUpstream(t)
	n := startNginx(t, strings.NewReplacer("{quota}", q.Addr, "{upstream}", up.addr).Replace(nginxConf))
	// One at a time: the headers count down, the upstream sees the call.
	for i := 1; i <= 5; i++ {
		resp, body := get(t, "http://"+n.Addr+"/hello", "X-App-Id", "seq")
		if resp.StatusCode != 200 || body != "hello from upstream\n" || resp.Header.Get("X-Seen-App") != "seq" ||
			resp.Header.Get("RateLimit-Limit") != "5" || resp.Header.Get("RateLimit-Remaining") != fmt.Sprint(5-i) ||
			resp.Header.Get("RateLimit-Reset") == "" {
			t.Fatalf("call %d: %d %v %q\nnginx: %s", i, resp.StatusCode, resp.Header, body, n.errorLog())
		}
	}
	resp, _ := get(t, "http://"+n.Addr+"/hello", "X-App-Id", "seq")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("call 6: %d %v\nnginx: %s", resp.StatusCode, resp.Header, n.errorLog())
	}
	if got := up.hits.Load(); got != 5 {
		t.Fatalf("upstream saw %d calls, want 5 (the denied one must not reach it)", got)
	}

	// Concurrently: 40 calls of one app and IP through nginx, exactly 5 pass.
	const calls = 40
	var wg sync.WaitGroup
	statuses := make(chan int, calls)
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", "http://"+n.Addr+"/hello", nil)
			req.Header.Set("X-App-Id", "burst")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	tally := map[int]int{}
	for s := range statuses {
		tally[s]++
	}
	if tally[200] != 5 || tally[429] != calls-5 {
		t.Fatalf("concurrent calls through nginx: %v, want 5 x 200 and %d x 429", tally, calls-5)
	}
	if got := up.hits.Load(); got != 10 {
		t.Fatalf("upstream saw %d calls, want 10", got)
	}
	// The same metrics and analytics as /v1/check.
	if got := q.Metric(`quota_checks_total{decision="allowed",rule="app_ip_hourly"}`); got != 10 {
		t.Errorf("allowed decisions %v, want 10", got)
	}
	if got := q.Metric(`quota_http_requests_total{code="403",route="/v1/auth"}`); got != 1+calls-5 {
		t.Errorf("denied /v1/auth answers %v, want %d", got, 1+calls-5)
	}
	st := appStats(t, q, "burst", calls)
	if st["allowed"] != float64(5) || st["denied"] != float64(calls-5) {
		t.Errorf("analytics of the burst: %v", st)
	}
}

// The README's nginx snippet, as printed, inside the least nginx needs
// around it (a server, temp paths): quotad on 127.0.0.1:8080 and the
// backend are replaced by the test's own; 5 calls pass, the 6th is a 429
// that never reaches the backend.
func TestNginx_TheREADMESnippetWorksAsPrinted(t *testing.T) {
	t.Parallel()
	snippet := readmeBlock(t, "### nginx", "nginx")
	q := startQuotad(t, appIPRule, "QUOTA_AUTH_DENY_STATUS=403")
	up := startUpstream(t)
	conf := strings.NewReplacer(
		"{snippet}", strings.NewReplacer("127.0.0.1:8080", q.Addr, "http://backend", "http://"+up.addr).Replace(snippet),
	).Replace(nginxPrelude + `
    server {
        listen 127.0.0.1:{port};
{snippet}
    }
}
`)
	n := startNginx(t, conf)
	for i := 1; i <= 6; i++ {
		resp, _ := get(t, "http://"+n.Addr+"/hello", "X-App-Id", "readme")
		if want := map[bool]int{true: 200, false: 429}[i <= 5]; resp.StatusCode != want {
			t.Fatalf("call %d: %d, want %d\nnginx: %s", i, resp.StatusCode, want, n.errorLog())
		}
	}
	if got := up.hits.Load(); got != 5 {
		t.Fatalf("backend saw %d calls, want 5", got)
	}
}

// readmeBlock returns the first fenced block of language lang after the
// heading in the repository's README.md.
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no heading %q", heading)
	}
	_, block, ok := strings.Cut(after, "```"+lang+"\n")
	if !ok {
		t.Fatalf("README.md has no %s block after %q", lang, heading)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatalf("README.md: the %s block after %q is not closed", lang, heading)
	}
	return block
}

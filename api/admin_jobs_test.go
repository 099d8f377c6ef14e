package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A job started with Prefer: respond-async answers 202 at once with the
// job and its URL; the job can be polled until it is done, its result then
// being what the blocking POST answers; the list and the fleet's cycle
// show it.
func TestAdminJobs_AsyncStartAnswersTheJobWhichCanBePolledToItsEnd(t *testing.T) {
	t.Parallel()
	srv, _ := tiersServer(t, "tok")
	for _, tc := range []struct {
		path, kind string
		header     bool
	}{
		{"/v1/admin/migrate", "migrate", true},
		{"/v1/admin/tiers/rebuild-filters?wait=false", "rebuild-filters", false},
		{"/v1/admin/tiers/compact-filters", "compact-filters", true},
	} {
		req, _ := http.NewRequest("POST", srv.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		if tc.header {
			req.Header.Set("Prefer", "respond-async")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(loc, "/v1/admin/jobs/"+tc.kind+"-") {
			t.Fatalf("POST %s: %d, Location %q; want 202 and the job's URL", tc.path, resp.StatusCode, loc)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, job := adminCall(t, srv, "GET", loc, "tok")
			if code != http.StatusOK || job["kind"] != tc.kind {
				t.Fatalf("GET %s: %d %v", loc, code, job)
			}
			if job["state"] == "done" {
				p := job["progress"].(map[string]any)
				if p["parts_done"] != p["parts_total"] || p["fraction"] != 1.0 || job["result"] == nil {
					t.Fatalf("%s done: %v; want every part done and a result", tc.kind, job)
				}
				break
			}
			if job["state"] != "running" || time.Now().After(deadline) {
				t.Fatalf("%s: %v", tc.kind, job)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	code, list := adminCall(t, srv, "GET", "/v1/admin/jobs", "tok")
	if jobs, _ := list["jobs"].([]any); code != 200 || len(jobs) != 3 || list["cycle"] == nil {
		t.Fatalf("GET /v1/admin/jobs: %d %v; want the 3 jobs and the last cycle", code, list)
	}
	code, cyc := adminCall(t, srv, "GET", "/v1/admin/cycle", "tok")
	if code != 200 || cyc["state"] != "done" || cyc["parts_done"] != cyc["parts_total"] {
		t.Fatalf("GET /v1/admin/cycle: %d %v", code, cyc)
	}
	// The blocking POST answers as before, with the job's id added.
	code, rep := adminCall(t, srv, "POST", "/v1/admin/migrate", "tok")
	if code != 200 || rep["job"] == nil || rep["scanned"] == nil || rep["moved"] == nil || rep["duration"] == nil {
		t.Fatalf("blocking POST /v1/admin/migrate: %d %v", code, rep)
	}
}

// Bad input to the job routes is a clear 4xx.
func TestAdminJobs_BadInputIsA4xx(t *testing.T) {
	t.Parallel()
	srv, _ := tiersServer(t, "tok")
	for _, tc := range []struct {
		method, path, body string
		code               int
		errCode            string
	}{
		{"GET", "/v1/admin/jobs/nope", "", 404, "job_not_found"},
		{"POST", "/v1/admin/jobs", `{"kind":"defrag"}`, 400, "bad_kind"},
		{"POST", "/v1/admin/jobs", `{}`, 400, "bad_kind"},
		{"POST", "/v1/admin/jobs", `[1`, 400, "bad_request"},
		{"POST", "/v1/admin/migrate?wait=maybe", "", 400, "bad_wait"},
		{"GET", "/v1/admin/cycle", "", 404, "no_cycle"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer tok")
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(b.String(), `"code":"`+tc.errCode+`"`) {
			t.Errorf("%s %s %s: %d %s; want %d %s", tc.method, tc.path, tc.body, resp.StatusCode, b.String(), tc.code, tc.errCode)
		}
	}
	if code, _ := adminCall(t, srv, "GET", "/v1/admin/jobs", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/admin/jobs without a token: %d, want 401", code)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quota-platform/quota/internal/jobwatch"
	"github.com/quota-platform/quota/migrate/jobs"
)

func init() {
	commands["jobs"] = command{"long admin jobs of an instance: jobs [ID] [--wait]", runJobs}
}

// jobFlags are the flags of the commands that wait for a job.
type jobFlags struct {
	every time.Duration
	wait  bool
}

func newJobFlagSet(name string, cl *client, jf *jobFlags, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags(fs)
	fs.DurationVar(&jf.every, "every", 5*time.Second, "when stderr is not a terminal: one progress line every this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quotactl "+usage)
		fs.PrintDefaults()
	}
	return fs
}

// runJob starts the job of path and waits for it, its progress on stderr
// (a bar on a terminal, a line every jf.every otherwise), and decodes its
// result into result. A quotad that keeps no jobs answers the result when
// the job ends, as before. It returns the exit status (0: decoded).
func runJob(ctx context.Context, cl *client, name, path string, jf jobFlags, stderr io.Writer, result any) int {
	var raw json.RawMessage
	code, err := cl.doWith(ctx, "POST", path, http.Header{"Prefer": {"respond-async"}}, nil, &raw)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "quotactl %s: stopped waiting; the job goes on in quotad (its log says how it ends)\n", name)
			return 130
		}
		fmt.Fprintf(stderr, "quotactl %s: %v\n", name, err)
		return 1
	}
	if code != http.StatusAccepted {
		if err := json.Unmarshal(raw, result); err != nil {
			fmt.Fprintf(stderr, "quotactl %s: answer is not the JSON expected: %v\n", name, err)
			return 1
		}
		return 0
	}
	var job jobs.JobView
	if err := json.Unmarshal(raw, &job); err != nil {
		fmt.Fprintf(stderr, "quotactl %s: answer is not a job: %v\n", name, err)
		return 1
	}
	job, status := watchJob(ctx, cl, name, job, jf, stderr)
	if status != 0 {
		return status
	}
	if job.Result != nil {
		js, _ := json.Marshal(job.Result)
		if err := json.Unmarshal(js, result); err != nil {
			fmt.Fprintf(stderr, "quotactl %s: the job's result is not the JSON expected: %v\n", name, err)
			return 1
		}
	}
	if job.State == "failed" {
		fmt.Fprintf(stderr, "quotactl %s: job %s failed: %s\n", name, job.ID, job.Error)
		if job.Result == nil {
			return 1
		}
	}
	return 0
}

// watchJob polls job until it ends, its progress on stderr; Ctrl-C stops
// the waiting (status 130), not the job.
func watchJob(ctx context.Context, cl *client, name string, job jobs.JobView, jf jobFlags, stderr io.Writer) (jobs.JobView, int) {
	base := cl
	fetch := func(ctx context.Context) (jobs.JobView, error) {
		var v jobs.JobView
		path := "/v1/admin/jobs/" + url.PathEscape(job.ID)
		_, err := base.do(ctx, "GET", path, nil, &v)
		// Behind a load balancer the poll may reach another instance,
		// which does not keep the job: ask the one that runs it.
		var ae *apiError
		if errors.As(err, &ae) && ae.Code == "job_not_found" && job.URL != "" && strings.TrimRight(job.URL, "/") != strings.TrimRight(base.url, "/") {
			base = &client{url: job.URL, token: cl.token}
			_, err = base.do(ctx, "GET", path, nil, &v)
		}
		return v, err
	}
	v, err := jobwatch.Watch(ctx, stderr, job, fetch, jobwatch.Options{Terminal: jobwatch.IsTerminal(stderr), Every: jf.every})
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "quotactl %s: stopped waiting; job %s goes on in quotad (quotactl --url %s jobs %s --wait to watch it again)\n", name, v.ID, cl.url, v.ID)
		return v, 130
	case err != nil:
		fmt.Fprintf(stderr, "quotactl %s: job %s: %v\n", name, v.ID, err)
		return v, 1
	}
	return v, 0
}

// runJobs lists an instance's jobs, or shows one (--wait: until it ends).
func runJobs(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	var jf jobFlags
	fs := newJobFlagSet("jobs", cl, &jf, stderr, "jobs [ID] [--wait] [--every 5s] [--url URL] [--token TOKEN]")
	fs.BoolVar(&jf.wait, "wait", false, "with an ID: show its progress until it ends")
	pos, err := parseInterspersed(fs, args)
	if err != nil || len(pos) > 1 {
		if err == nil {
			fs.Usage()
		}
		return 2
	}
	if len(pos) == 0 {
		var list struct {
			Jobs  []jobs.JobView      `json:"jobs"`
			Cycle *jobs.FleetProgress `json:"cycle"`
		}
		if _, err := cl.do(ctx, "GET", "/v1/admin/jobs", nil, &list); err != nil {
			fmt.Fprintln(stderr, "quotactl jobs:", err)
			return 1
		}
		if len(list.Jobs) == 0 {
			fmt.Fprintln(stdout, "no jobs on this instance since it started")
		}
		for _, j := range list.Jobs {
			fmt.Fprintln(stdout, jobwatch.Line(j, j.StartedAt))
		}
		if c := list.Cycle; c != nil {
			fmt.Fprintf(stdout, "fleet cycle %s: %s, %d/%d parts, %s cells scanned, %s moved, %d instances\n", c.Cycle, c.State,
				c.PartsDone, c.PartsTotal, group(c.CellsScanned), group(c.CellsMoved), len(c.Instances))
		}
		return 0
	}
	var v jobs.JobView
	if _, err := cl.do(ctx, "GET", "/v1/admin/jobs/"+url.PathEscape(pos[0]), nil, &v); err != nil {
		fmt.Fprintln(stderr, "quotactl jobs:", err)
		return 1
	}
	if jf.wait {
		var status int
		if v, status = watchJob(ctx, cl, "jobs", v, jf, stderr); status != 0 {
			return status
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	if v.State == "failed" {
		return 1
	}
	return 0
}

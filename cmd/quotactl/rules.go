package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quota-platform/quota/envoyconf"
)

// runRules: `rules get` prints the rules in force (GET /v1/rules) as
// indented JSON; `rules versions` shows each instance's version.
// (`rules put` belongs to the rules owner.)
func runRules(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags(fs)
	instances := fs.String("instances", os.Getenv("QUOTA_INSTANCES"), "rules versions: comma-separated base URLs (or host:port) of every quotad instance (QUOTA_INSTANCES; default --url)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if len(pos) == 1 && pos[0] == "versions" {
		list := *instances
		if list == "" {
			list = cl.url
		}
		return rulesVersions(ctx, cl, strings.Split(list, ","), stdout, stderr)
	}
	if len(pos) == 2 && pos[0] == "from-envoy" {
		return rulesFromEnvoy(pos[1], stdout, stderr)
	}
	if len(pos) != 1 || pos[0] != "get" {
		fmt.Fprintln(stderr, "usage: quotactl rules get [--url URL] | quotactl rules versions [--instances URL,URL,...] | quotactl rules from-envoy FILE|DIR")
		return 2
	}
	var raw json.RawMessage
	if _, err := cl.do(ctx, "GET", "/v1/rules", nil, &raw); err != nil {
		fmt.Fprintln(stderr, "quotactl rules get:", err)
		return 1
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		fmt.Fprintln(stderr, "quotactl rules get:", err)
		return 1
	}
	out.WriteByte('\n')
	_, _ = stdout.Write(out.Bytes())
	return 0
}

// rulesVersions asks every instance for its rules in force (GET /v1/rules,
// all at once, 5 s each) and prints one line per instance; the exit status
// is 0 only when every instance answered with the same version.
func rulesVersions(ctx context.Context, cl *client, urls []string, stdout, stderr io.Writer) int {
	type answer struct {
		url, version string
		rules        int
		err          error
	}
	var answers []answer
	for _, u := range urls {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		answers = append(answers, answer{url: u})
	}
	if len(answers) == 0 {
		fmt.Fprintln(stderr, "quotactl rules versions: no instance given (--instances or QUOTA_INSTANCES)")
		return 2
	}
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func(a *answer) {
			defer wg.Done()
			c := *cl
			c.url = a.url
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var body struct {
				Version string            `json:"version"`
				Rules   []json.RawMessage `json:"rules"`
			}
			_, a.err = c.do(ctx, "GET", "/v1/rules", nil, &body)
			a.version, a.rules = body.Version, len(body.Rules)
		}(&answers[i])
	}
	wg.Wait()
	versions := map[string]int{}
	failed := 0
	for _, a := range answers {
		if a.err != nil {
			failed++
			fmt.Fprintf(stdout, "%-40s ERROR %v\n", a.url, a.err)
			continue
		}
		versions[a.version]++
		fmt.Fprintf(stdout, "%-40s %s  (%d rules)\n", a.url, a.version, a.rules)
	}
	switch {
	case failed > 0:
		fmt.Fprintf(stdout, "%d of %d instances did not answer\n", failed, len(answers))
		return 1
	case len(versions) > 1:
		fmt.Fprintf(stdout, "instances differ: %d versions in force\n", len(versions))
		return 1
	}
	fmt.Fprintf(stdout, "all %d instances on version %s\n", len(answers), answers[0].version)
	return 0
}

// rulesFromEnvoy prints the quota rules equivalent to an envoy ratelimit
// configuration (a file or a directory), and on stderr what has no exact
// equivalent. Exit status 1 when the configuration is invalid.
func rulesFromEnvoy(path string, stdout, stderr io.Writer) int {
	_, files, err := envoyconf.ReadFiles(path)
	if err != nil {
		fmt.Fprintln(stderr, "quotactl rules from-envoy:", err)
		return 1
	}
	set, notes := envoyconf.QuotaRules(files)
	for _, n := range notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	b, err := set.MarshalYAML()
	if err != nil {
		fmt.Fprintln(stderr, "quotactl rules from-envoy:", err)
		return 1
	}
	_, _ = stdout.Write(b)
	return 0
}

// runCheck sends one POST /v1/check built from key=value arguments (cost=N
// is sent as a number) and prints the decision; exit status 0 when allowed,
// 3 when denied.
func runCheck(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dry := fs.Bool("dry-run", false, "answer without counting")
	cl.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, "usage: quotactl check app_id=a1 user_id=u1 interface_id=users.get [cost=N] [--dry-run]")
		return 2
	}
	body := map[string]any{}
	for _, kv := range pos {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "quotactl check: %q is not key=value\n", kv)
			return 2
		}
		if k == "cost" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				fmt.Fprintf(stderr, "quotactl check: cost %q is not an integer\n", v)
				return 2
			}
			body[k] = n
			continue
		}
		body[k] = v
	}
	if *dry {
		body["dry_run"] = true
	}
	b, _ := json.Marshal(body)
	var ans struct {
		Allowed bool `json:"allowed"`
		Rules   []struct {
			Rule      string `json:"rule"`
			Window    string `json:"window"`
			Limit     int64  `json:"limit"`
			Remaining int64  `json:"remaining"`
			ResetMS   int64  `json:"reset_after_ms"`
			Tier      string `json:"tier"`
			Allowed   bool   `json:"allowed"`
		} `json:"rules"`
	}
	if _, err := cl.do(ctx, "POST", "/v1/check", bytes.NewReader(b), &ans, 429); err != nil {
		fmt.Fprintln(stderr, "quotactl check:", err)
		return 1
	}
	verdict := "allowed"
	if !ans.Allowed {
		verdict = "DENIED"
	}
	fmt.Fprintln(stdout, verdict)
	for _, r := range ans.Rules {
		mark := "ok"
		if !r.Allowed {
			mark = "over"
		}
		fmt.Fprintf(stdout, "  %-28s %-4s %s left of %s per %s, resets in %.1fs (%s)\n",
			r.Rule, mark, group(r.Remaining), group(r.Limit), r.Window, float64(r.ResetMS)/1000, r.Tier)
	}
	if !ans.Allowed {
		return 3
	}
	return 0
}

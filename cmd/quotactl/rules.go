package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/quota-platform/quota/envoyconf"
)

// runRules: `rules get` prints the rules in force (GET /v1/rules) as
// indented JSON. (`rules put` belongs to the rules owner.)
func runRules(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if len(pos) == 2 && pos[0] == "from-envoy" {
		return rulesFromEnvoy(pos[1], stdout, stderr)
	}
	if len(pos) != 1 || pos[0] != "get" {
		fmt.Fprintln(stderr, "usage: quotactl rules get [--url URL] | quotactl rules from-envoy FILE|DIR")
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

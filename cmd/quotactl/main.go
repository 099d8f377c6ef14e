// Command quotactl talks to a running quotad over its HTTP API.
//
//	quotactl [global flags] COMMAND [args]
//
// Commands (each has -h):
//
//	stats APP [--date YYYY-MM-DD]     an app's figures for a UTC day, as a table
//	rules get                         the rules in force, as JSON
//	rules versions --instances A,B    each instance's rules version (exit 1 if they differ)
//	check KEY=VALUE…                  one limit check (dimensions as key=value)
//	plans show|set|override|unoverride|usage APP …   apps' plans, overrides and usage
//
// Global flags (also accepted after the command): --url (QUOTA_URL, default
// http://127.0.0.1:8080) and --token (QUOTA_TOKEN, else QUOTA_ADMIN_TOKEN).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"
)

// command runs one subcommand; it returns the process exit status.
type command struct {
	summary string
	run     func(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int
}

// commands is the table of subcommands; others (migrate, tiers, rules put)
// are added here by the packages that own them.
var commands = map[string]command{
	"stats": {"an app's figures for a UTC day: stats APP [--date YYYY-MM-DD]", runStats},
	"rules": {"the rules in force: rules get | rules versions [--instances URL,...]; from envoy ratelimit YAML: rules from-envoy FILE", runRules},
	"check": {"one limit check: check app_id=a1 user_id=u1 [cost=N] [--dry-run]", runCheck},
	"plans": {"apps' plans and overrides: plans show|set|override|unoverride|usage APP ...", runPlans},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: quotactl [--url URL] [--token TOKEN] COMMAND [args]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-7s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nenvironment: QUOTA_URL (default http://127.0.0.1:8080), QUOTA_TOKEN or QUOTA_ADMIN_TOKEN")
}

func run(args []string, stdout, stderr io.Writer) int {
	cl := &client{url: envOr("QUOTA_URL", "http://127.0.0.1:8080"), token: envOr("QUOTA_TOKEN", os.Getenv("QUOTA_ADMIN_TOKEN"))}
	fs := flag.NewFlagSet("quotactl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cl.flags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		fmt.Fprintln(stderr, "quotactl:", err)
		usage(stderr)
		return 2
	}
	if fs.NArg() == 0 {
		usage(stderr)
		return 2
	}
	name := fs.Arg(0)
	if name == "help" {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "quotactl: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	ctx, cancel := commandContext(name)
	defer cancel()
	return cmd.run(ctx, cl, fs.Args()[1:], stdout, stderr)
}

// jobCommands answer when a job on the server ends (a migration cycle, a
// cold filter rebuild or compaction), which may take hours: quotactl waits
// for them without a time limit. Ctrl-C stops waiting; the job goes on
// (quotad logs its outcome).
var jobCommands = map[string]bool{"migrate": true, "rebuild-filters": true, "compact-filters": true}

// commandContext is the context a command runs in: 30 s, or until Ctrl-C
// for a job.
func commandContext(name string) (context.Context, context.CancelFunc) {
	if jobCommands[name] {
		return signal.NotifyContext(context.Background(), os.Interrupt)
	}
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// client is quotad's base URL and bearer token.
type client struct {
	url, token string
}

// flags adds --url and --token to fs.
func (c *client) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", c.url, "base URL of quotad")
	fs.StringVar(&c.token, "token", c.token, "app key or admin token, sent as Authorization: Bearer")
}

// parseInterspersed parses flags that may come before or after positional
// arguments (quotactl stats APP --date D) and returns the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// apiError is the contract's error body.
type apiError struct {
	Status int
	Code   string `json:"code"`
	Msg    string `json:"message"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg)
}

// do sends a request and decodes a 2xx JSON answer into out (or returns the
// error body as an *apiError). okStatus lists other statuses whose body is
// an answer (429 for a check).
func (c *client) do(ctx context.Context, method, path string, body io.Reader, out any, okStatus ...int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.url, "/")+path, body)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	ok := resp.StatusCode/100 == 2
	for _, s := range okStatus {
		ok = ok || resp.StatusCode == s
	}
	if !ok {
		var eb struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
			eb.Error.Status = resp.StatusCode
			return resp.StatusCode, &eb.Error
		}
		return resp.StatusCode, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: answer is not the JSON expected: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

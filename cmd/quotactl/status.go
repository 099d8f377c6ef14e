package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/quota-platform/quota/fleet"
)

func init() {
	commands["status"] = command{"one screen for the fleet (instances, rules, Redis, MySQL, tiers, cycle, analytics): status [--json]", runStatus}
}

// runStatus asks --url for the fleet's status and every instance its
// heartbeats name for its own (fleet.Collect), and prints one screen (or
// JSON). It fails only when --url does not answer.
func runStatus(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags(fs)
	asJSON := fs.Bool("json", false, "print the status as JSON (for scripts)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quotactl status [--json] [--url URL] [--token TOKEN]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 0 {
		fs.Usage()
		return 2
	}
	fetch := func(ctx context.Context, url, scope string) (fleet.Status, error) {
		var st fleet.Status
		other := &client{url: url, token: cl.token}
		_, err := other.do(ctx, "GET", "/v1/admin/status?scope="+scope, nil, &st)
		return st, err
	}
	v, err := fleet.Collect(ctx, strings.TrimRight(cl.url, "/"), fetch)
	if err != nil {
		fmt.Fprintln(stderr, "quotactl status:", err)
		return 1
	}
	if *asJSON {
		b, err := v.MarshalIndent()
		if err != nil {
			fmt.Fprintln(stderr, "quotactl status:", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	v.Render(stdout)
	return 0
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const plansUsage = `usage:
  quotactl plans show APP                    the app's plan and overrides
  quotactl plans set APP PLAN                put the app on PLAN ("default": the rules' own limits)
  quotactl plans override APP RULE LIMIT     replace RULE's limit for APP (the rule's window)
  quotactl plans override APP RULE LIMIT/WINDOW[,LIMIT/WINDOW...]   e.g. 100/1s,50000000/month
  quotactl plans unoverride APP RULE         give APP its plan's limits of RULE again
  quotactl plans usage APP [DIM=VALUE...]    used, remaining and reset of each limit
  quotactl plans nearest APP [TOP]           the identities nearest their day/week/month quotas (TOP 1-50, default 10)`

// runPlans manages apps' plans and overrides (the admin API) and shows usage.
func runPlans(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plans", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			fmt.Fprintln(stdout, plansUsage)
			return 0
		}
		return 2
	}
	if len(pos) < 2 {
		fmt.Fprintln(stderr, plansUsage)
		return 2
	}
	app := "/v1/admin/apps/" + url.PathEscape(pos[1])
	var out json.RawMessage
	switch {
	case pos[0] == "show" && len(pos) == 2:
		_, err = cl.do(ctx, "GET", app+"/plan", nil, &out)
	case pos[0] == "set" && len(pos) == 3:
		_, err = cl.do(ctx, "PUT", app+"/plan", jsonBody(map[string]string{"plan": pos[2]}), &out)
	case pos[0] == "override" && len(pos) == 4:
		var body any
		if body, err = overrideBody(pos[3]); err == nil {
			_, err = cl.do(ctx, "PUT", app+"/overrides/"+url.PathEscape(pos[2]), jsonBody(body), &out)
		}
	case pos[0] == "unoverride" && len(pos) == 3:
		_, err = cl.do(ctx, "DELETE", app+"/overrides/"+url.PathEscape(pos[2]), nil, nil)
		out = json.RawMessage(`{"deleted":true}`)
	case pos[0] == "usage":
		return plansUsageTable(ctx, cl, pos[1], pos[2:], stdout, stderr)
	case pos[0] == "nearest" && len(pos) <= 3:
		return plansNearestTable(ctx, cl, pos[1], pos[2:], stdout, stderr)
	default:
		fmt.Fprintln(stderr, plansUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "quotactl plans %s: %v\n", pos[0], err)
		return 1
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, out, "", "  ") == nil {
		pretty.WriteByte('\n')
		_, _ = stdout.Write(pretty.Bytes())
	}
	return 0
}

// overrideBody reads "N" or "N/WINDOW,N/WINDOW".
func overrideBody(s string) (any, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return map[string]int64{"limit": n}, nil
	}
	type limit struct {
		Limit  int64  `json:"limit"`
		Window string `json:"window"`
	}
	var ls []limit
	for _, part := range strings.Split(s, ",") {
		n, w, ok := strings.Cut(part, "/")
		v, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || w == "" {
			return nil, fmt.Errorf("limit %q: want N or N/WINDOW[,N/WINDOW...] (e.g. 100/1s,1000000/month)", part)
		}
		ls = append(ls, limit{v, w})
	}
	return map[string]any{"limits": ls}, nil
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v) // maps of strings and numbers
	return bytes.NewReader(b)
}

// plansUsageTable prints GET /v1/apps/{app}/usage as a table.
func plansUsageTable(ctx context.Context, cl *client, app string, dims []string, stdout, stderr io.Writer) int {
	q := url.Values{}
	for _, d := range dims {
		k, v, ok := strings.Cut(d, "=")
		if !ok {
			fmt.Fprintf(stderr, "quotactl plans usage: %q is not DIM=VALUE\n", d)
			return 2
		}
		q.Set(k, v)
	}
	var body struct {
		Plan   string `json:"plan"`
		Limits []struct {
			Rule         string `json:"rule"`
			Window       string `json:"window"`
			Limit        int64  `json:"limit"`
			Used         int64  `json:"used"`
			Remaining    int64  `json:"remaining"`
			ResetAfterMs int64  `json:"reset_after_ms"`
		} `json:"limits"`
	}
	path := "/v1/apps/" + url.PathEscape(app) + "/usage"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if _, err := cl.do(ctx, "GET", path, nil, &body); err != nil {
		fmt.Fprintln(stderr, "quotactl plans usage:", err)
		return 1
	}
	fmt.Fprintf(stdout, "app %s on plan %s\n", app, body.Plan)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rule\twindow\tlimit\tused\tremaining\tused %\treset in\t")
	for _, l := range body.Limits {
		pct := 0.0
		if l.Limit > 0 {
			pct = 100 * float64(l.Used) / float64(l.Limit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%s\t\n", l.Rule, l.Window, l.Limit, l.Used, l.Remaining, pct, msDuration(l.ResetAfterMs))
	}
	_ = tw.Flush()
	return 0
}

// msDuration writes ms as a duration rounded to the second ("13h20m5s").
func msDuration(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// plansNearestTable prints GET /v1/apps/{app}/usage/nearest as a table:
// one row per identity, its quota's rows together.
func plansNearestTable(ctx context.Context, cl *client, app string, top []string, stdout, stderr io.Writer) int {
	var body struct {
		Rules []struct {
			Rule         string `json:"rule"`
			Window       string `json:"window"`
			Limit        int64  `json:"limit"`
			ResetAfterMs int64  `json:"reset_after_ms"`
			Top          []struct {
				Dimensions map[string]string `json:"dimensions"`
				Used       int64             `json:"used"`
			} `json:"top"`
		} `json:"rules"`
	}
	path := "/v1/apps/" + url.PathEscape(app) + "/usage/nearest"
	if len(top) == 1 {
		path += "?top=" + url.QueryEscape(top[0])
	}
	if _, err := cl.do(ctx, "GET", path, nil, &body); err != nil {
		fmt.Fprintln(stderr, "quotactl plans nearest:", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "rule\twindow\tidentity\tused\tlimit\tused %\treset in")
	for _, q := range body.Rules {
		for _, id := range q.Top {
			dims := url.Values{}
			for k, v := range id.Dimensions {
				dims.Set(k, v)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.1f\t%s\n", q.Rule, q.Window, strings.ReplaceAll(dims.Encode(), "&", " "),
				id.Used, q.Limit, 100*float64(id.Used)/float64(max(q.Limit, 1)), msDuration(q.ResetAfterMs))
		}
	}
	_ = tw.Flush()
	return 0
}

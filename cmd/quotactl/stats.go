package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

type statsAnswer struct {
	AppID       string `json:"app_id"`
	Date        string `json:"date"`
	Calls       int64  `json:"calls"`
	Allowed     int64  `json:"allowed"`
	Denied      int64  `json:"denied"`
	UniqueUsers int64  `json:"unique_users"`
	Interfaces  []struct {
		InterfaceID string `json:"interface_id"`
		Calls       int64  `json:"calls"`
		Allowed     int64  `json:"allowed"`
		Denied      int64  `json:"denied"`
	} `json:"interfaces"`
}

// runStats prints GET /v1/apps/{app}/stats as a table.
func runStats(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	date := fs.String("date", "", "UTC day YYYY-MM-DD (default today)")
	cl.flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quotactl stats APP [--date YYYY-MM-DD] [--url URL] [--token TOKEN]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	path := "/v1/apps/" + url.PathEscape(pos[0]) + "/stats"
	if *date != "" {
		path += "?date=" + url.QueryEscape(*date)
	}
	var st statsAnswer
	if _, err := cl.do(ctx, "GET", path, nil, &st); err != nil {
		fmt.Fprintln(stderr, "quotactl stats:", err)
		return 1
	}
	printStats(stdout, &st)
	return 0
}

func printStats(w io.Writer, st *statsAnswer) {
	fmt.Fprintf(w, "app %s, %s (UTC)\n\n", st.AppID, st.Date)
	width := len(group(st.Calls))
	fmt.Fprintf(w, "  %-13s %*s\n", "calls", width, group(st.Calls))
	fmt.Fprintf(w, "  %-13s %*s\n", "allowed", width, group(st.Allowed))
	fmt.Fprintf(w, "  %-13s %*s  (%s)\n", "denied", width, group(st.Denied), pct(st.Denied, st.Calls))
	fmt.Fprintf(w, "  %-13s %*s\n", "unique users", max(width, len(group(st.UniqueUsers))), group(st.UniqueUsers))
	if len(st.Interfaces) == 0 {
		fmt.Fprintln(w, "\nno calls that day")
		return
	}
	rows := [][]string{{"INTERFACE", "CALLS", "ALLOWED", "DENIED", "DENIED %"}}
	for _, i := range st.Interfaces {
		name := i.InterfaceID
		if name == "" {
			name = "(none)"
		}
		rows = append(rows, []string{name, group(i.Calls), group(i.Allowed), group(i.Denied), pct(i.Denied, i.Calls)})
	}
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for c, cell := range r {
			widths[c] = max(widths[c], len([]rune(cell)))
		}
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for c, cell := range r {
			pad := strings.Repeat(" ", widths[c]-len([]rune(cell)))
			if c == 0 {
				b.WriteString(cell + pad)
			} else {
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func pct(part, whole int64) string {
	if whole == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

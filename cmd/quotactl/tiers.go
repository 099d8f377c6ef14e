package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
)

func init() {
	commands["tiers"] = command{"cells and bytes per storage tier: tiers", runTiers}
	commands["migrate"] = command{"run a migration cycle now, its progress on stderr, and print what moved: migrate [--every 5s]", runMigrate}
	commands["rebuild-filters"] = command{"put every cold cell back in its app's cold filter (after Redis lost data): rebuild-filters", runRebuildFilters}
	commands["compact-filters"] = command{"rebuild each app's cold filter as one layer of its cells cold now: compact-filters", runCompactFilters}
}

func runCompactFilters(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	jf, ok := jobArgs("compact-filters", cl, args, stderr)
	if !ok {
		return 2
	}
	var rep struct {
		Tags        int   `json:"tags"`
		Compacted   int   `json:"compacted"`
		Changed     int   `json:"changed"`
		CellsBefore int   `json:"cells_before"`
		CellsAfter  int   `json:"cells_after"`
		BytesBefore int64 `json:"bytes_before"`
		BytesAfter  int64 `json:"bytes_after"`
	}
	if code := runJob(ctx, cl, "compact-filters", "/v1/admin/tiers/compact-filters", jf, stderr, &rep); code != 0 {
		return code
	}
	fmt.Fprintf(stdout, "%d of %d filters compacted: %s cells in %s bytes -> %s in %s\n", rep.Compacted, rep.Tags,
		group(int64(rep.CellsBefore)), group(rep.BytesBefore), group(int64(rep.CellsAfter)), group(rep.BytesAfter))
	if rep.Changed > 0 {
		fmt.Fprintf(stdout, "%d changed meanwhile: run again\n", rep.Changed)
	}
	return 0
}

func runRebuildFilters(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	jf, ok := jobArgs("rebuild-filters", cl, args, stderr)
	if !ok {
		return 2
	}
	var rep struct {
		Cells int `json:"cells"`
	}
	if code := runJob(ctx, cl, "rebuild-filters", "/v1/admin/tiers/rebuild-filters", jf, stderr, &rep); code != 0 {
		return code
	}
	fmt.Fprintf(stdout, "%d cold cells in their filters\n", rep.Cells)
	return 0
}

type tierUsage struct {
	Identities int64  `json:"identities"`
	Bytes      int64  `json:"bytes"`
	RedisBytes *int64 `json:"redis_bytes"` // nil from a quotad that sends bytes only
	MySQLBytes int64  `json:"mysql_bytes"`
}

// redis is u's Redis bytes (all its bytes, from a quotad that does not
// tell them apart).
func (u tierUsage) redis() int64 {
	if u.RedisBytes == nil {
		return u.Bytes
	}
	return *u.RedisBytes
}

type tiersAnswer struct {
	Hot    tierUsage `json:"hot"`
	Warm   tierUsage `json:"warm"`
	Cold   tierUsage `json:"cold"`
	Moving int64     `json:"moving"`
	Method string    `json:"method"`
}

func noArgs(name, usageLine string, cl *client, args []string, stderr io.Writer) bool {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cl.flags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quotactl "+usageLine+" [--url URL] [--token TOKEN]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return false
	}
	if len(pos) != 0 {
		fs.Usage()
		return false
	}
	return true
}

func runTiers(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	if !noArgs("tiers", "tiers", cl, args, stderr) {
		return 2
	}
	var a tiersAnswer
	if _, err := cl.do(ctx, "GET", "/v1/admin/tiers", nil, &a); err != nil {
		fmt.Fprintln(stderr, "quotactl tiers:", err)
		return 1
	}
	total := a.Hot.Identities + a.Warm.Identities + a.Cold.Identities
	fmt.Fprintf(stdout, "%-6s %14s %7s %16s %12s %16s %12s\n", "tier", "cells", "share", "redis bytes", "redis B/cell", "mysql bytes", "mysql B/cell")
	perCell := func(b, n int64) string {
		if n == 0 || b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(b)/float64(n))
	}
	for _, r := range []struct {
		name string
		u    tierUsage
	}{{"hot", a.Hot}, {"warm", a.Warm}, {"cold", a.Cold}} {
		fmt.Fprintf(stdout, "%-6s %14s %7s %16s %12s %16s %12s\n", r.name, group(r.u.Identities), pct(r.u.Identities, total),
			group(r.u.redis()), perCell(r.u.redis(), r.u.Identities), group(r.u.MySQLBytes), perCell(r.u.MySQLBytes, r.u.Identities))
	}
	if total > 0 {
		fmt.Fprintf(stdout, "redis bytes per cell over all tiers: %.1f\n", float64(a.Hot.redis()+a.Warm.redis()+a.Cold.redis())/float64(total))
	}
	if a.Cold.MySQLBytes > 0 {
		fmt.Fprintln(stdout, "mysql bytes: InnoDB's estimate, refreshed in the background once a tenth of a table has changed")
	}
	if a.Moving > 0 {
		fmt.Fprintf(stdout, "moving now: %d\n", a.Moving)
	}
	return 0
}

func runMigrate(ctx context.Context, cl *client, args []string, stdout, stderr io.Writer) int {
	jf, ok := jobArgs("migrate", cl, args, stderr)
	if !ok {
		return 2
	}
	var rep struct {
		Folded   int            `json:"folded"`
		Scanned  int            `json:"scanned"`
		Moved    map[string]int `json:"moved"`
		Quiet    int            `json:"quiet"`
		Idle     int            `json:"idle"`
		Skipped  int            `json:"skipped"`
		Repaired int            `json:"repaired"`
		Failures int            `json:"failures"`
		Errors   []string       `json:"errors"`
		Duration string         `json:"duration"`
	}
	if code := runJob(ctx, cl, "migrate", "/v1/admin/migrate", jf, stderr, &rep); code != 0 {
		return code
	}
	fmt.Fprintf(stdout, "folded the activity of %d cells, scanned %d cells in %s; repaired %d, skipped %d, failures %d\n", rep.Folded, rep.Scanned, rep.Duration, rep.Repaired, rep.Skipped, rep.Failures)
	dirs := make([]string, 0, len(rep.Moved))
	for d := range rep.Moved {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if d == "hot>cold" && rep.Quiet > 0 {
			fmt.Fprintf(stdout, "  %-10s %d (quiet: %d, of them idle: %d)\n", d, rep.Moved[d], rep.Quiet, rep.Idle)
			continue
		}
		fmt.Fprintf(stdout, "  %-10s %d\n", d, rep.Moved[d])
	}
	for _, e := range rep.Errors {
		fmt.Fprintln(stdout, "  error:", e)
	}
	if rep.Failures > 0 {
		return 1
	}
	return 0
}

// jobArgs parses the flags of a command that waits for a job (it takes no
// positional argument).
func jobArgs(name string, cl *client, args []string, stderr io.Writer) (jobFlags, bool) {
	var jf jobFlags
	fs := newJobFlagSet(name, cl, &jf, stderr, name+" [--every 5s] [--url URL] [--token TOKEN]")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return jf, false
	}
	if len(pos) != 0 || jf.every <= 0 {
		fs.Usage()
		return jf, false
	}
	return jf, true
}

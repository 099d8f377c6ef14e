// Command quotabench is a load generator for quotad: it sends
// POST /v1/check (or /v1/check/batch with -batch) from -c connections,
// closed loop or at a fixed -rate, and prints a latency and outcome summary.
// It speaks HTTP/1.1 through loadgen's own minimal keep-alive client, which
// takes little of the CPU the server under test shares; -client nethttp
// uses net/http's client instead. Run it with -h for the flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/quota-platform/quota/bench/loadgen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := loadgen.ParseFlags(args, stderr)
	if errors.Is(err, loadgen.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "quotabench:", err)
		return 2
	}

	// The first Ctrl-C stops sending and prints what was measured; a
	// second one kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := loadgen.Run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(stderr, "quotabench:", err)
		return 1
	}

	text := stdout
	if cfg.JSONPath == "-" {
		text = stderr // keep stdout pure JSON
	}
	if err := res.WriteText(text); err != nil {
		fmt.Fprintln(stderr, "quotabench:", err)
		return 1
	}
	if cfg.JSONPath != "" {
		if err := res.WriteJSONFile(cfg.JSONPath, stdout); err != nil {
			fmt.Fprintln(stderr, "quotabench: writing JSON:", err)
			return 1
		}
	}
	return 0
}

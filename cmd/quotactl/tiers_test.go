package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/metrics"
)

type fakeTiers struct{}

func (fakeTiers) TierStats(context.Context) (any, error) {
	return map[string]any{
		"hot":  map[string]int{"identities": 10, "bytes": 1200},
		"warm": map[string]int{"identities": 30, "bytes": 720},
		"cold": map[string]int{"identities": 60, "bytes": 4800, "redis_bytes": 120, "mysql_bytes": 4680},
	}, nil
}

func (fakeTiers) RebuildColdFilters(context.Context) (any, error) {
	return map[string]int{"cells": 42}, nil
}

func (fakeTiers) CompactColdFilters(context.Context) (any, error) {
	return map[string]int{"tags": 12, "compacted": 3, "changed": 1, "cells_before": 900, "cells_after": 600, "bytes_before": 2400, "bytes_after": 700}, nil
}

func (fakeTiers) Migrate(context.Context) (any, error) {
	return map[string]any{"scanned": 100, "moved": map[string]int{"hot>warm": 3, "hot>cold": 9, "warm>cold": 7}, "quiet": 8, "idle": 5, "duration": "12ms"}, nil
}

// quotactl tiers and migrate against quotad's admin endpoints.
func TestTiersAndMigrate(t *testing.T) {
	s := config.Defaults()
	s.AdminToken = admin
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(api.New(api.Deps{Settings: s, Metrics: metrics.New(reg), Gatherer: reg, Tiers: fakeTiers{}}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"--url", srv.URL, "--token", admin, "tiers"}, &out, &errb); code != 0 {
		t.Fatalf("tiers: %d %s", code, errb.String())
	}
	// Cold's Redis bytes (its filters) and MySQL bytes apart; every
	// tier's Redis bytes in the total a cell.
	for _, want := range []string{"hot", "10", "10.0%", "120.0", "cold", "60.0%", " 2.0 ", "4,680", "78.0", "redis bytes per cell over all tiers: 20.4", "InnoDB's estimate"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tiers output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"--url", srv.URL, "--token", admin, "migrate"}, &out, &errb); code != 0 {
		t.Fatalf("migrate: %d %s", code, errb.String())
	}
	for _, want := range []string{"hot>warm   3\n", "hot>cold   9 (quiet: 8, of them idle: 5)\n", "warm>cold  7\n", "scanned 100"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("migrate output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"--url", srv.URL, "--token", admin, "rebuild-filters"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "42 cold cells") {
		t.Errorf("rebuild-filters: %d %s %s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"--url", srv.URL, "--token", admin, "compact-filters"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "3 of 12 filters compacted: 900 cells in 2,400 bytes -> 600 in 700") ||
		!strings.Contains(out.String(), "1 changed meanwhile: run again") {
		t.Errorf("compact-filters: %d %q %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"--url", srv.URL, "--token", "wrong-token-0123456789", "tiers"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "admin token") {
		t.Errorf("wrong token: %d %q", code, errb.String())
	}
}

// The commands that wait for a job on the server (hours, for a cycle or a
// compaction over many cells) run without quotactl's 30 s limit; the
// others keep it.
func TestCommandContext_JobsWaitWithoutATimeLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		limit bool
	}{
		{"migrate", false},
		{"rebuild-filters", false},
		{"compact-filters", false},
		{"tiers", true},
		{"stats", true},
		{"check", true},
	} {
		ctx, cancel := commandContext(tc.name)
		deadline, ok := ctx.Deadline()
		cancel()
		if ok != tc.limit || ok && time.Until(deadline) > 30*time.Second {
			t.Errorf("%s: deadline %v (%v), want a limit of 30 s: %v", tc.name, deadline, ok, tc.limit)
		}
	}
}

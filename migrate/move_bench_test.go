package migrate

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/tiers"
)

// BenchmarkMoveCells_HotToCold moves batches of 1,000 hot cells (of 1,000
// apps, one call each) to cold: the scheduled cycle's commonest move.
// cells/s is reported.
func BenchmarkMoveCells_HotToCold(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	const batch = 1000
	moved := 0
	var took time.Duration
	var last time.Time
	perStep := map[Step]time.Duration{}
	e.mover.Faults = afterStep(func(s Step) error {
		perStep[s] += time.Since(last)
		last = time.Now()
		return nil
	})
	for b.Loop() {
		b.StopTimer()
		cells := make([]cellSpec, batch)
		for i := range cells {
			cells[i] = newCell(10)
		}
		ops := make([]*tiers.Op, batch)
		for i, c := range cells {
			ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.at(e.clock.Now())}}
		}
		if err := e.router.Check(ctx, e.clock.Now(), ops); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		last = start
		res, err := e.mover.MoveCells(ctx, refsOf(cells...), tiers.Hot, tiers.Cold)
		took += time.Since(start)
		if err != nil || len(res.Moved) != batch {
			b.Fatalf("moved %d of %d: %v", len(res.Moved), batch, err)
		}
		moved += len(res.Moved)
	}
	b.ReportMetric(float64(moved)/took.Seconds(), "cells/s")
	for s := StepJournal; s <= StepDelete; s++ {
		b.ReportMetric(float64(perStep[s].Microseconds())/float64(b.N), s.String()+"-us/batch")
	}
}

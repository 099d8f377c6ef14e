package migrate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/benchcpu"
	"github.com/quota-platform/quota/internal/testsupport/moveenv"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/tiers"
)

// BenchmarkMoveCells_HotToCold moves batches of 1,000 hot cells (one call
// each) to cold by the full protocol (the cells are put in their tags'
// cold filters first, as cells moved out of cold before are; others take
// the quiet move, which BenchmarkCycle_HotToCold measures), with the cells of
// 1,000 apps (a tag each: the worst case for per-tag scripts) and of 10
// apps (how a real batch looks: a cycle scans cells in key order). It
// reports cells/s, the time of each step per batch and its Redis CPU per
// cell ("journal" includes the lease), and the CPU time per cell of this
// process and of the Redis server (its INFO cpu: only this benchmark's when
// the server is its alone, QUOTA_TEST_REDIS_ADDR).
func BenchmarkMoveCells_HotToCold(b *testing.B) {
	for _, apps := range []int{1000, 10} {
		b.Run("apps="+strconv.Itoa(apps), func(b *testing.B) { benchHotToCold(b, apps) })
	}
}

func benchHotToCold(b *testing.B, apps int) {
	e := newEnv(b)
	ctx := context.Background()
	const batch = 1000
	moved := 0
	var took time.Duration
	var last time.Time
	perStep := map[Step]time.Duration{}
	perStepRedis := map[Step]time.Duration{}
	var lastRedis time.Duration
	e.mover.Faults = afterStep(func(s Step) error {
		perStep[s] += time.Since(last)
		r := testenv.RedisCPU(b, e.mover.RDB)
		perStepRedis[s] += r - lastRedis
		lastRedis = r
		last = time.Now()
		return nil
	})
	appNames := make([]string, apps)
	for i := range appNames {
		appNames[i] = "app-" + testenv.RandomHex(4)
	}
	cpu := benchcpu.New(b)
	for b.Loop() {
		b.StopTimer()
		cells := make([]moveenv.Cell, batch)
		for i := range cells {
			cells[i] = moveenv.NewCell(10)
			cells[i].App = appNames[i%apps]
		}
		ops := make([]*tiers.Op, batch)
		for i, c := range cells {
			ops[i] = &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{c.At(e.Clock.Now())}}
		}
		if err := e.Router.Check(ctx, e.Clock.Now(), ops); err != nil {
			b.Fatal(err)
		}
		e.takeFullProtocol(b, cells...)
		cpu.Start(e.mover.RDB)
		b.StartTimer()
		start := time.Now()
		last = start
		lastRedis = cpu.RedisAtStart()
		res, err := e.mover.MoveCells(ctx, moveenv.Refs(cells...), tiers.Hot, tiers.Cold)
		took += time.Since(start)
		b.StopTimer()
		cpu.Stop(e.mover.RDB)
		b.StartTimer()
		if err != nil || len(res.Moved) != batch {
			b.Fatalf("moved %d of %d: %v", len(res.Moved), batch, err)
		}
		moved += len(res.Moved)
	}
	b.ReportMetric(float64(moved)/took.Seconds(), "cells/s")
	for s := StepJournal; s <= StepDelete; s++ {
		b.ReportMetric(float64(perStep[s].Microseconds())/float64(b.N), s.String()+"-us/batch")
		b.ReportMetric(float64(perStepRedis[s].Microseconds())/float64(moved), s.String()+"-redis-us/cell")
	}
	cpu.Report(moved)
}

package schedule_test

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/schedule"
)

// cron's schedules have a resolution of a second and it takes no clock, so
// this test waits on real time (~3.5 s).
func TestNew_SkipsARunWhileThePreviousIsStillRunning(t *testing.T) {
	t.Parallel()
	var logs testenv.LockedBuffer // cron logs from its goroutines
	c := schedule.New(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	var starts atomic.Int32
	release := make(chan struct{})
	started := make(chan int32, 10)
	if _, err := c.AddFunc("@every 1s", func() {
		n := starts.Add(1)
		started <- n
		if n == 1 {
			<-release // the first run outlasts two periods
		}
	}); err != nil {
		t.Fatal(err)
	}
	c.Start()
	defer func() { <-c.Stop().Done() }()
	var releaseOnce sync.Once
	releaseFirst := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseFirst() // before Stop waits for the runs, should a check fail

	select {
	case <-started:
	case <-time.After(3 * time.Second):
		t.Fatal("the job never started")
	}
	time.Sleep(2200 * time.Millisecond) // two more ticks while the first run holds on
	if n := starts.Load(); n != 1 {
		t.Fatalf("%d runs started while the first was still going; want 1", n)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"scheduled job skipped") {
		t.Fatalf("no skip warning logged; log:\n%s", logs.String())
	}
	releaseFirst()
	select {
	case n := <-started:
		if n != 2 {
			t.Fatalf("run %d started after the first ended; want 2", n)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no run started after the first one ended")
	}
}

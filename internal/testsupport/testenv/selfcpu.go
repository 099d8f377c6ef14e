package testenv

import (
	"syscall"
	"testing"
	"time"
)

// SelfCPU is the CPU time (user and system) this process has used.
func SelfCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build !unix

package loadgen

import "time"

// SelfCPU is not measured here.
func SelfCPU() time.Duration { return 0 }

// ProcessCPU is not measured here.
func ProcessCPU(int) time.Duration { return 0 }

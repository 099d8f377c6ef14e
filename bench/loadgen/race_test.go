//go:build race

package loadgen

// raceEnabled: the race detector's own allocations would be counted.
const raceEnabled = true

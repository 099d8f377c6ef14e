// Package faultpoint names the one place where a test stops production
// code between two of its own steps: a worker that dies, or stalls,
// between two steps of a move, which no fault of Redis or MySQL can place
// (the steps mix both, in calls of whole batches). A mover takes Points;
// in production they are nil, and each point costs one nil check. Faults
// that the outside world makes (a failed commit, a concurrent writer) are
// made there instead: at the tests' connections (testenv.Hooked, go-redis
// hooks).
package faultpoint

// Points is called at each fault point.
type Points interface {
	// AfterMoveStep runs after each step of a move (migrate.Step); an error
	// stops the move there, as a crash would: its leases and journal stay.
	AfterMoveStep(step int) error
}

// Funcs is Points made of optional functions; a nil one does nothing.
type Funcs struct {
	MoveStep func(step int) error
}

// AfterMoveStep implements Points.
func (f *Funcs) AfterMoveStep(step int) error {
	if f.MoveStep == nil {
		return nil
	}
	return f.MoveStep(step)
}

// Package faultpoint names the few places where a test makes production
// code fail as the outside world would: a MySQL commit that fails, a
// concurrent writer that wins a compare-and-set, a worker that dies between
// two steps of a move. A store or mover takes Points in its options; in
// production they are nil, and each point costs one nil check.
package faultpoint

// Points is called at each fault point.
type Points interface {
	// BeforeColdCommit runs before the commit of a cold check's shard
	// transaction (the i-th commit of its group, on shard); an error fails
	// that commit as MySQL would.
	BeforeColdCommit(shard, i int) error
	// BeforeWarmCAS runs between a warm check's read and its
	// compare-and-set (attempt counts from 1), where a concurrent writer
	// would come in.
	BeforeWarmCAS(attempt int)
	// AfterMoveStep runs after each step of a move (migrate.Step); an error
	// stops the move there, as a crash would: its leases and journal stay.
	AfterMoveStep(step int) error
}

// Funcs is Points made of optional functions; a nil one does nothing.
type Funcs struct {
	ColdCommit func(shard, i int) error
	WarmCAS    func(attempt int)
	MoveStep   func(step int) error
}

// BeforeColdCommit implements Points.
func (f *Funcs) BeforeColdCommit(shard, i int) error {
	if f.ColdCommit == nil {
		return nil
	}
	return f.ColdCommit(shard, i)
}

// BeforeWarmCAS implements Points.
func (f *Funcs) BeforeWarmCAS(attempt int) {
	if f.WarmCAS != nil {
		f.WarmCAS(attempt)
	}
}

// AfterMoveStep implements Points.
func (f *Funcs) AfterMoveStep(step int) error {
	if f.MoveStep == nil {
		return nil
	}
	return f.MoveStep(step)
}

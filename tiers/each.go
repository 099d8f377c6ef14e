package tiers

import (
	"context"
	"time"
)

// EachChecker is a Store that hands over each op's answer as soon as that
// op is decided, instead of once the whole batch is: a check decided by
// the hot script alone need not wait for another check's MySQL
// transaction (the Router; a Breaker over one).
type EachChecker interface {
	Store
	// CheckEach decides ops as Check does, in order, each as if sent
	// alone, and calls done(i, err) exactly once for each op i, as soon as
	// ops[i] is decided (err nil: its Out and Committed are final and the
	// store no longer touches it) or has failed (having given back what it
	// counted). Calls come from the calling goroutine, not necessarily in
	// index order, and CheckEach returns after the last; done must not
	// block long, as the ops not yet decided wait for it. An op's error is
	// its own: another op failing does not fail it. CheckEach returns the
	// first error any op got (what Check would return).
	CheckEach(ctx context.Context, now time.Time, ops []*Op, done func(i int, err error)) error
}

// CheckEach decides ops with s, reporting each op to done as soon as it
// is decided when s is an EachChecker; any other store decides them with
// Check, and then every op is reported with Check's result.
func CheckEach(ctx context.Context, s Store, now time.Time, ops []*Op, done func(i int, err error)) error {
	if e, ok := s.(EachChecker); ok {
		return e.CheckEach(ctx, now, ops, done)
	}
	err := s.Check(ctx, now, ops)
	for i := range ops {
		done(i, err)
	}
	return err
}

// PeekingChecker is an EachChecker that reads peeks (FixedPeeker) in the
// round trip that decides ops, before any op counts, where it can: a batch
// holding cached denials and other checks then costs one round trip, not
// a read's and then the checks'. The peeks are read (Found set) before
// done is first called. It returns the read's error (the peeks then stay
// not Found, but for those read before a value that did not decode;
// ErrCannotPeek: none ever will be) and CheckEach's.
type PeekingChecker interface {
	EachChecker
	CheckEachPeeking(ctx context.Context, now time.Time, peeks []FixedPeek, ops []*Op, done func(i int, err error)) (readErr, err error)
}

type slowPartKey struct{}

// WithSlowPart returns ctx carrying fn. An EachChecker that has reported
// every op it could decide at once (the all-hot ones) and is left with
// parts that wait on more round trips (warm, cold: MySQL transactions of
// milliseconds) calls fn once, on the goroutine CheckEach was called on,
// before it starts them. A batch sender uses it to leave such a batch to
// finish on its own the moment nothing quick is left in it, rather than
// after a fixed wait (package coalesce).
func WithSlowPart(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, slowPartKey{}, fn)
}

// SlowPart calls ctx's WithSlowPart function, if any.
func SlowPart(ctx context.Context) {
	if fn, ok := ctx.Value(slowPartKey{}).(func()); ok {
		fn()
	}
}

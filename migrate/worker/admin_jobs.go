package worker

import (
	"context"
	"errors"
	"fmt"
)

// ErrUnknownJobKind: a job kind other than migrate, rebuild-filters and
// compact-filters.
var ErrUnknownJobKind = errors.New("unknown job kind")

// StartJob starts a job of kind in the background (it runs until it ends,
// whatever becomes of ctx's cancellation) and returns its view at once;
// while a job of that kind runs on this instance, it returns that one.
func (a Admin) StartJob(ctx context.Context, kind string) (JobView, error) {
	w := a.W
	bg := context.WithoutCancel(ctx)
	if kind == KindMigrate {
		return w.StartCycle(bg).View(w.Jobs.now()), nil
	}
	if j := w.Jobs.Running(kind); j != nil {
		return j.View(w.Jobs.now()), nil
	}
	var job *Job
	switch kind {
	case KindRebuild:
		job = w.Jobs.start(KindRebuild, "api")
		go func() {
			n, err := w.rebuildColdFilters(bg, job)
			w.log().Info("cold filter rebuild", "job", job.ID(), "cells", n, "err", err)
		}()
	case KindCompact:
		job = w.Jobs.start(KindCompact, "api")
		go func() {
			rep, err := w.compactColdFilters(bg, job)
			w.log().Info("cold filter compaction", "job", job.ID(), "report", rep, "err", err)
		}()
	default:
		return JobView{}, fmt.Errorf("%w %q (want %s, %s or %s)", ErrUnknownJobKind, kind, KindMigrate, KindRebuild, KindCompact)
	}
	job.setTotal(len(w.DBs))
	return job.View(w.Jobs.now()), nil
}

// Job is job id's view (false: no such job on this instance).
func (a Admin) Job(id string) (JobView, bool) {
	j := a.W.Jobs.Get(id)
	if j == nil {
		return JobView{}, false
	}
	return j.View(a.W.Jobs.now()), true
}

// Jobs are this instance's jobs, newest first.
func (a Admin) Jobs() []JobView { return a.W.Jobs.Views() }

// FleetCycle is Worker.FleetCycle.
func (a Admin) FleetCycle(ctx context.Context) (*FleetProgress, error) {
	return a.W.FleetCycle(ctx)
}

package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/quota-platform/quota/migrate/jobs"
)

// ErrUnknownJobKind: a job kind other than migrate, rebuild-filters and
// compact-filters.
var ErrUnknownJobKind = errors.New("unknown job kind")

// StartJob starts a job of kind in the background (it runs until it ends,
// whatever becomes of ctx's cancellation) and returns its view at once;
// while a job of that kind runs on this instance, it returns that one.
func (a Admin) StartJob(ctx context.Context, kind string) (jobs.JobView, error) {
	w := a.W
	bg := context.WithoutCancel(ctx)
	if kind == jobs.KindMigrate {
		return w.StartCycle(bg).View(w.Jobs.Time()), nil
	}
	if j := w.Jobs.Running(kind); j != nil {
		return j.View(w.Jobs.Time()), nil
	}
	var job *jobs.Job
	switch kind {
	case jobs.KindRebuild:
		job = w.Jobs.Start(jobs.KindRebuild, "api")
		go func() {
			n, err := w.rebuildColdFilters(bg, job)
			w.log().Info("cold filter rebuild", "job", job.ID(), "cells", n, "err", err)
		}()
	case jobs.KindCompact:
		job = w.Jobs.Start(jobs.KindCompact, "api")
		go func() {
			rep, err := w.compactColdFilters(bg, job)
			w.log().Info("cold filter compaction", "job", job.ID(), "report", rep, "err", err)
		}()
	default:
		return jobs.JobView{}, fmt.Errorf("%w %q (want %s, %s or %s)", ErrUnknownJobKind, kind, jobs.KindMigrate, jobs.KindRebuild, jobs.KindCompact)
	}
	job.SetTotal(len(w.DBs))
	return job.View(w.Jobs.Time()), nil
}

// Job is job id's view (false: no such job on this instance).
func (a Admin) Job(id string) (jobs.JobView, bool) {
	j := a.W.Jobs.Get(id)
	if j == nil {
		return jobs.JobView{}, false
	}
	return j.View(a.W.Jobs.Time()), true
}

// Jobs are this instance's jobs, newest first.
func (a Admin) Jobs() []jobs.JobView { return a.W.Jobs.Views() }

// FleetCycle is Worker.FleetCycle.
func (a Admin) FleetCycle(ctx context.Context) (*jobs.FleetProgress, error) {
	return a.W.FleetCycle(ctx)
}

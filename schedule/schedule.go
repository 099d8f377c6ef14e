// Package schedule builds the cron schedulers of quotad's periodic jobs
// (the analytics rollup, the migration cycle).
package schedule

import (
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
)

// New returns a cron scheduler in loc (QUOTA_TIMEZONE; nil: UTC) that skips
// a run of a job while the job's previous run is still going, logging the
// skip as a warning to log.
//
// Why skip: a job that outlasts its period (a rollup folding a finished
// day's per-user figures, a migration cycle over millions of cells) would
// otherwise have cron start it again beside itself, and the runs would
// pile up behind the job's own lock, each holding a database connection,
// or do the same work twice.
func New(log *slog.Logger, loc *time.Location) *cron.Cron {
	l := cronLogger{log: log}
	if loc == nil {
		loc = time.UTC
	}
	return cron.New(
		cron.WithLocation(loc),
		cron.WithLogger(l),
		cron.WithChain(cron.SkipIfStillRunning(l)),
	)
}

// cronLogger passes cron's messages to slog: the skips SkipIfStillRunning
// reports as warnings, cron's own errors as errors, and its routine
// messages (start, wake, run, schedule, ...) at debug level.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) {
	if msg == "skip" {
		l.log.Warn("scheduled job skipped: its previous run is still going", kv...)
		return
	}
	l.log.Debug("cron "+msg, kv...)
}

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron "+msg, append(kv, "err", err)...)
}

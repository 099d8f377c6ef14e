// Package jobwatch shows a long admin job's progress while quotactl waits
// for it (a migration cycle, a cold filter rebuild or compaction): a
// progress bar on a terminal, one plain line every few seconds otherwise
// (a pipe, a log file, CI), both from the job resource quotad answers
// (jobs.JobView), polled until the job ends.
package jobwatch

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/quota-platform/quota/migrate/jobs"
)

// IsTerminal reports whether w is a terminal (a progress bar can be drawn
// on it).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Options are how Watch polls and prints.
type Options struct {
	Terminal bool          // draw a bar (else plain lines)
	Poll     time.Duration // how often the job is fetched; 0: 250 ms on a terminal, else Every
	Every    time.Duration // a plain line every Every; 0: 5 s
	Now      func() time.Time
}

func (o Options) every() time.Duration {
	if o.Every > 0 {
		return o.Every
	}
	return 5 * time.Second
}

func (o Options) poll() time.Duration {
	switch {
	case o.Poll > 0:
		return o.Poll
	case o.Terminal:
		return 250 * time.Millisecond
	}
	return o.every()
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Watch fetches the job every poll and shows its progress on out until the
// job ends (it returns the job's last view) or ctx does (it returns ctx's
// error and the last view it had: the job goes on in quotad).
func Watch(ctx context.Context, out io.Writer, first jobs.JobView, fetch func(context.Context) (jobs.JobView, error), o Options) (jobs.JobView, error) {
	v := first
	var bar *progressbar.ProgressBar
	if o.Terminal {
		bar = progressbar.NewOptions64(1000,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetWidth(28),
			progressbar.OptionSetPredictTime(false), // the server's ETA is in the description
			progressbar.OptionSetElapsedTime(false),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionThrottle(0),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetDescription(Summary(v)),
		)
	}
	show := func() {
		if bar != nil {
			bar.Describe(Summary(v))
			_ = bar.Set64(int64(v.Progress.Fraction * 1000))
			return
		}
		fmt.Fprintln(out, Line(v, o.now()))
	}
	show()
	t := time.NewTicker(o.poll())
	defer t.Stop()
	lastLine := o.now()
	for v.State == "running" {
		select {
		case <-ctx.Done():
			if bar != nil {
				fmt.Fprintln(out)
			}
			return v, ctx.Err()
		case <-t.C:
		}
		nv, err := fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				continue // reported by the select
			}
			if bar != nil {
				fmt.Fprintln(out)
			}
			return v, err
		}
		v = nv
		// Half a poll's slack: polls every Every would otherwise print
		// every other one, a tick landing a hair early.
		if bar != nil || v.State != "running" || o.now().Sub(lastLine) >= o.every()-o.poll()/2 {
			show()
			lastLine = o.now()
		}
	}
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(out)
	}
	return v, nil
}

// Summary is the figures of a job, one line: what the bar shows beside it.
//
// A cycle's figures are the fleet's when it is known (every instance's
// parts), this instance's share after them.
func Summary(v jobs.JobView) string {
	p := v.Progress
	if f := v.Fleet; f != nil {
		p = f.Progress
		p.ETASeconds, p.Fraction = v.Progress.ETASeconds, v.Progress.Fraction
		if v.State != "running" {
			p.PartsRunning = 0
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d/%d parts", v.Kind, p.PartsDone, p.PartsTotal)
	cells := Group(p.CellsScanned)
	if p.CellsTotal > 0 {
		cells += "/" + Group(p.CellsTotal)
		if !p.CellsCounted {
			cells += "+"
		}
	}
	fmt.Fprintf(&b, ", %s cells, %s %s", cells, Group(p.CellsMoved), movedWord(v.Kind))
	fmt.Fprintf(&b, ", %s/s, %s elapsed, ETA %s", Group(int64(p.CellsPerSecond+0.5)), Seconds(p.ElapsedSeconds), eta(p))
	if f := v.Fleet; f != nil && len(f.Instances) > 1 {
		fmt.Fprintf(&b, " (fleet of %d instances; this one: %d parts, %s cells)", len(f.Instances), v.Progress.PartsDone, Group(v.Progress.CellsScanned))
	}
	return b.String()
}

// Line is the plain line of a job at now: a timestamp, the job, its
// percentage and its figures.
func Line(v jobs.JobView, now time.Time) string {
	state := strconv.FormatFloat(v.Progress.Fraction*100, 'f', 1, 64) + "%"
	if v.State != "running" {
		state = v.State
	}
	return fmt.Sprintf("%s %s %s %s", now.UTC().Format(time.RFC3339), v.ID, state, Summary(v))
}

func movedWord(kind string) string {
	switch kind {
	case jobs.KindRebuild:
		return "put back"
	case jobs.KindCompact:
		return "kept"
	}
	return "moved"
}

func eta(p jobs.Progress) string {
	if p.ETASeconds == nil {
		return "?"
	}
	return Seconds(*p.ETASeconds)
}

// Seconds is a duration in seconds, rounded for a person: 950ms, 42s,
// 3m07s, 2h05m.
func Seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Group writes n with thousands separated by commas.
func Group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

package usage

import (
	"context"
	"slices"
	"testing"
	"time"
)

// fakePacer paces on a fake time line: sleeping moves it on.
func fakePacer(duty float64, budget time.Duration) (*Pacer, *time.Time, *[]time.Duration) {
	now := time.Unix(0, 0)
	var slept []time.Duration
	p := &Pacer{duty: duty, deadline: now.Add(budget), last: now,
		now: func() time.Time { return now },
		sleep: func(_ context.Context, _ <-chan struct{}, d time.Duration) {
			slept = append(slept, d)
			now = now.Add(d)
		},
	}
	return p, &now, &slept
}

func TestPacer_RestsInProportionToEachStepUntilTheDeadline(t *testing.T) {
	t.Parallel()
	p, now, slept := fakePacer(0.25, 10*time.Second)
	step := func(d time.Duration) {
		*now = now.Add(d)
		p.Rest(context.Background())
	}
	step(time.Second)     // works a quarter of the time: rests 3 s (at 4 s)
	step(2 * time.Second) // 6 s of rest would pass the deadline: 4 s (at 10 s)
	step(time.Second)     // past the deadline: flat out
	step(time.Second)
	if want := []time.Duration{3 * time.Second, 4 * time.Second}; !slices.Equal(*slept, want) {
		t.Errorf("rests %v, want %v", *slept, want)
	}
}

func TestPacer_SharedByTwoWritersEachWorksHalfTheDuty(t *testing.T) {
	t.Parallel()
	p, now, slept := fakePacer(0.25, time.Minute)
	q := p.Share(2)
	*now = now.Add(100 * time.Millisecond)
	q.Rest(context.Background())
	if want := []time.Duration{700 * time.Millisecond}; !slices.Equal(*slept, want) {
		t.Errorf("rests %v, want %v (duty 0.125)", *slept, want)
	}
}

func TestPacer_FlatOutWhenNotPaced(t *testing.T) {
	t.Parallel()
	if p := NewPacer(1, time.Now().Add(time.Hour), nil); p != nil {
		t.Errorf("duty 1 made a pacer %+v", p)
	}
	var p *Pacer
	p.Rest(context.Background()) // nil: returns at once
	if p.Share(4) != nil {
		t.Error("a nil pacer's share paces")
	}
}

// Close hurries a paced flush: a rest of an hour ends at once.
func TestPacer_ClosedHurryEndsTheRestAtOnce(t *testing.T) {
	t.Parallel()
	hurry := make(chan struct{})
	p := NewPacer(0.01, time.Now().Add(time.Hour), hurry)
	p.last = time.Now().Add(-time.Minute) // a step of a minute: 99 minutes' rest
	close(hurry)
	done := make(chan struct{})
	go func() { p.Rest(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the rest went on after hurry was closed")
	}
}

package tracing_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quota-platform/quota/internal/testsupport/denialrig"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tracing"
)

// Traced, a batch holding a cached denial to read and another check is
// still one Redis round trip, in one store span.
func TestCheck_TracedBatchReadsAndChecksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rig := denialrig.New(t, func(s tiers.Store) tiers.Store { return tracing.Store(s, tp) })
	rig.Calls.Reset()
	spans := len(rec.Ended())
	ds, err := rig.Limiter.CheckBatch(context.Background(), []*limiter.Request{rig.Flooder, denialrig.User("y", "u1")})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Allowed || ds[0].Entries[1].Remaining != 99 || !ds[1].Allowed {
		t.Fatalf("answers %+v, want the flooder denied with 99 left on its IP, the other allowed", ds)
	}
	if trips := rig.Calls.Trips.Load(); trips != 1 {
		t.Errorf("%d Redis round trips, want 1", trips)
	}
	if got := names(rec.Ended()[spans:]); len(got) != 1 || got[0] != "store.check" {
		t.Errorf("store spans %v, want one store.check", got)
	}
}

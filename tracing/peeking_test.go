package tracing_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tracing"
)

// Traced, a batch holding a cached denial to read and another check is
// still one Redis round trip, in one store span.
func TestCheck_TracedBatchReadsAndChecksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	set, err := rules.NewSet([]rules.Rule{
		{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
		{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 100, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
	})
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	calls := &testenv.RedisCalls{}
	rdb.AddHook(calls)
	rec := tracetest.NewSpanRecorder()
	store := tracing.Store(hot.NewStore(rdb, hot.Options{Prefix: prefix}), sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	lim, err := limiter.New(store, clock.NewFake(time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)), set)
	if err != nil {
		t.Fatal(err)
	}
	lim.UseDenials(limiter.NewDenials(1000))
	ctx := context.Background()
	user := func(ip, u string) *limiter.Request {
		return &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "ip", Value: ip}, {Name: "user_id", Value: u}}}
	}
	flooder := user("x", "f")
	for range 2 { // the second is denied and cached, its IP cell open
		if _, err := lim.Check(ctx, flooder); err != nil {
			t.Fatal(err)
		}
	}
	calls.Reset()
	spans := len(rec.Ended())
	ds, err := lim.CheckBatch(ctx, []*limiter.Request{flooder, user("y", "u1")})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Allowed || ds[0].Entries[1].Remaining != 99 || !ds[1].Allowed {
		t.Fatalf("answers %+v, want the flooder denied with 99 left on its IP, the other allowed", ds)
	}
	if trips := calls.Trips.Load(); trips != 1 {
		t.Errorf("%d Redis round trips, want 1", trips)
	}
	if got := names(rec.Ended()[spans:]); len(got) != 1 || got[0] != "store.check" {
		t.Errorf("store spans %v, want one store.check", got)
	}
}

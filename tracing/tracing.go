// Package tracing traces checks with OpenTelemetry: a server span per
// check request (POST /v1/check and /v1/check/batch) and a child span per
// call to the store. It is off unless an OTLP endpoint is configured; off,
// quotad wraps nothing, so the check path is the untraced one.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/quota-platform/quota/tiers"
)

// Name is the instrumentation scope of quotad's spans.
const Name = "github.com/quota-platform/quota"

// NewProvider returns a tracer provider that batches spans to the OTLP/HTTP
// collector at endpoint (a URL: http://host:4318, or a full .../v1/traces
// path). The standard OTEL_* variables (headers, sampler, timeout) apply.
// Shut it down to send the last spans.
func NewProvider(ctx context.Context, endpoint, version string) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", endpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("quotad"), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(5*time.Second)),
		sdktrace.WithResource(res),
	), nil
}

// Handler gives each check request to h a server span (joining the
// caller's trace when it sends a W3C traceparent); other routes go untraced.
func Handler(h http.Handler, tp trace.TracerProvider) http.Handler {
	return otelhttp.NewHandler(h, "quotad",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path == "/v1/check" || r.URL.Path == "/v1/check/batch"
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path }),
	)
}

// Store gives each call to next a span, a child of the check's.
func Store(next tiers.Store, tp trace.TracerProvider) tiers.Store {
	return &store{next: next, tracer: tp.Tracer(Name)}
}

type store struct {
	next   tiers.Store
	tracer trace.Tracer
}

func (s *store) Tier() tiers.Tier { return s.next.Tier() }

// PeekFixed reads peeks through next when it can (tiers.FixedPeeker).
func (s *store) PeekFixed(ctx context.Context, now time.Time, peeks []tiers.FixedPeek) error {
	p, ok := s.next.(tiers.FixedPeeker)
	if !ok {
		return tiers.ErrCannotPeek
	}
	ctx, span := s.tracer.Start(ctx, "store.peek", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int("quota.cells", len(peeks))))
	defer span.End()
	err := p.PeekFixed(ctx, now, peeks)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

func (s *store) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	ctx, span := s.tracer.Start(ctx, "store.check", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("quota.tier", string(s.next.Tier())), attribute.Int("quota.ops", len(ops))))
	defer span.End()
	err := s.next.Check(ctx, now, ops)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

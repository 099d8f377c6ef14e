// Package tracing traces checks with OpenTelemetry: a server span per
// check request (POST /v1/check and /v1/check/batch) and a child span per
// call to the store. It is off unless an OTLP endpoint is configured; off,
// quotad wraps nothing, so the check path is the untraced one.
package tracing

import (
	"cmp"
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
	failed(span, err)
	return err
}

func (s *store) Check(ctx context.Context, now time.Time, ops []*tiers.Op) error {
	return s.CheckEach(ctx, now, ops, func(int, error) {})
}

// CheckEach hands each op over as next decides it (tiers.CheckEach): a
// traced batch's hot checks do not wait for its warm and cold parts.
func (s *store) CheckEach(ctx context.Context, now time.Time, ops []*tiers.Op, done func(i int, err error)) error {
	ctx, span := s.checkSpan(ctx, len(ops), 0)
	defer span.End()
	err := tiers.CheckEach(ctx, s.next, now, ops, done)
	failed(span, err)
	return err
}

// CheckEachPeeking reads peeks and decides ops in next's one round trip
// when next can (tiers.PeekingChecker), in one span; otherwise it reads
// them first (PeekFixed), then checks.
func (s *store) CheckEachPeeking(ctx context.Context, now time.Time, peeks []tiers.FixedPeek, ops []*tiers.Op, done func(i int, err error)) (readErr, err error) {
	pc, ok := s.next.(tiers.PeekingChecker)
	if !ok {
		return s.PeekFixed(ctx, now, peeks), s.CheckEach(ctx, now, ops, done)
	}
	ctx, span := s.checkSpan(ctx, len(ops), len(peeks))
	defer span.End()
	readErr, err = pc.CheckEachPeeking(ctx, now, peeks, ops, done)
	failed(span, cmp.Or(err, readErr))
	return readErr, err
}

// checkSpan starts the span of a call deciding ops (and reading peeks).
func (s *store) checkSpan(ctx context.Context, ops, peeks int) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attribute.String("quota.tier", string(s.next.Tier())), attribute.Int("quota.ops", ops)}
	if peeks > 0 {
		attrs = append(attrs, attribute.Int("quota.cells", peeks))
	}
	return s.tracer.Start(ctx, "store.check", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// failed marks span with err, if any.
func failed(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

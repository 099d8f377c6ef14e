package tracing_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tracing"
)

// server is quotad's check handler over a hot store on rdb, traced by tp
// as cmd/quotad wires it (tp nil: tracing off, nothing wrapped).
func server(t testing.TB, rdb redis.UniversalClient, prefix string, tp trace.TracerProvider) http.Handler {
	t.Helper()
	set, err := rules.ReadFile("../deploy/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var store tiers.Store = hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second})
	if tp != nil {
		store = tracing.Store(store, tp)
	}
	lim, err := limiter.New(store, clock.Real{}, set)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var h http.Handler = api.New(api.Deps{Settings: config.Defaults(), Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg})
	if tp != nil {
		h = tracing.Handler(h, tp)
	}
	return h
}

func post(h http.Handler, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

const checkBody = `{"app_id":"a1","ip":"10.0.0.1","user_id":"u1","interface_id":"users.get"}`

func TestCheck_TracedGivesServerSpanWithStoreChild(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := server(t, rdb, prefix, tp)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	if w := post(h, checkBody, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"); w.Code != http.StatusOK {
		t.Fatalf("check: %d %s", w.Code, w.Body)
	}
	// Routes other than the checks are not traced.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/healthz", nil))

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the check's and its store call's: %v", len(spans), names(spans))
	}
	storeSpan, httpSpan := spans[0], spans[1] // the child ends first
	if httpSpan.Name() != "POST /v1/check" || httpSpan.SpanKind() != trace.SpanKindServer {
		t.Fatalf("server span %q kind %v", httpSpan.Name(), httpSpan.SpanKind())
	}
	if got := httpSpan.SpanContext().TraceID().String(); got != traceID {
		t.Fatalf("server span in trace %s, want the caller's %s", got, traceID)
	}
	if storeSpan.Name() != "store.check" || storeSpan.Parent().SpanID() != httpSpan.SpanContext().SpanID() {
		t.Fatalf("store span %q with parent %s, want store.check under %s", storeSpan.Name(), storeSpan.Parent().SpanID(), httpSpan.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, a := range storeSpan.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["quota.tier"] != "hot" || attrs["quota.ops"] != "1" {
		t.Fatalf("store span attributes %v", attrs)
	}
}

func TestCheck_StoreFailureMarksTheStoreSpan(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: the store call fails and the check is
	// answered by the fail mode (open).
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	rec := tracetest.NewSpanRecorder()
	h := server(t, rdb, "t:", sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	if w := post(h, checkBody); w.Code != http.StatusOK || w.Header().Get(api.HeaderEnforced) != "false" {
		t.Fatalf("check with Redis down: %d %q, want 200 unenforced", w.Code, w.Header().Get(api.HeaderEnforced))
	}
	for _, s := range rec.Ended() {
		if s.Name() == "store.check" {
			if s.Status().Code != codes.Error || len(s.Events()) == 0 {
				t.Fatalf("store span status %v events %d, want an error with its event", s.Status(), len(s.Events()))
			}
			return
		}
	}
	t.Fatalf("no store.check span among %v", names(rec.Ended()))
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// BenchmarkCheckTracing is one POST /v1/check through the handler with
// tracing off (what quotad runs without an OTLP endpoint: nothing wrapped)
// and on (every span sampled and ended, exported nowhere, so the exporter's
// network is left out):
// compare allocs/op with -benchmem (make bench-tracing).
func BenchmarkCheckTracing(b *testing.B) {
	rdb, prefix := testenv.Redis(b)
	bodies := make([]string, 1024)
	for i := range bodies {
		bodies[i] = `{"app_id":"a` + strconv.Itoa(i%100) + `","ip":"10.0.0.` + strconv.Itoa(i%250) +
			`","user_id":"u` + strconv.Itoa(i) + `","interface_id":"users.get"}`
	}
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil},
		{"on", sdktrace.NewTracerProvider()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := server(b, rdb, prefix+bc.name+":", bc.tp)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if w := post(h, bodies[i%len(bodies)]); w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
				i++
			}
		})
	}
}

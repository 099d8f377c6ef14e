package api_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/quota-platform/quota/api"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers/hot"
)

// BenchmarkCheckHandler measures one POST /v1/check through the handler
// (decode, limiter, one Redis round trip, encode) with the default rules,
// without the network: run with -benchmem to see the check path's allocations.
func BenchmarkCheckHandler(b *testing.B) {
	srv, bodies := benchServer(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
			i++
		}
	})
}

// BenchmarkEdgeCheck is BenchmarkCheckHandler through quotad's HTTP edge
// (Server.NewHTTPServer's handler on a fasthttp request context, reused
// as fasthttp reuses it), without the network.
func BenchmarkEdgeCheck(b *testing.B) {
	srv, bodies := benchServer(b)
	handler := srv.NewHTTPServer(api.EdgeOptions{}).Handler
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		i := 0
		for pb.Next() {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI("/v1/check")
			ctx.Request.Header.SetContentType("application/json")
			ctx.Request.SetBodyString(bodies[i%len(bodies)])
			handler(&ctx)
			if ctx.Response.StatusCode() != http.StatusOK {
				b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
			i++
		}
	})
}

func benchServer(b *testing.B) (*api.Server, []string) {
	rdb, prefix := testenv.Redis(b)
	set, err := rules.ParseYAML([]byte(defaultRules))
	if err != nil {
		b.Fatal(err)
	}
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix, Jitter: time.Second})
	lim, _ := limiter.New(hot, clock.Real{}, set)
	reg := prometheus.NewRegistry()
	s := config.Defaults()
	srv := api.New(api.Deps{Settings: s, Limiter: lim, Metrics: metrics.New(reg), Gatherer: reg})
	bodies := make([]string, 1024)
	for i := range bodies {
		bodies[i] = `{"app_id":"a` + strconv.Itoa(i%100) + `","ip":"10.0.0.` + strconv.Itoa(i%250) +
			`","user_id":"u` + strconv.Itoa(i) + `","interface_id":"users.get"}`
	}
	return srv, bodies
}

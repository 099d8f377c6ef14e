package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/quota-platform/quota/metrics"
)

// EdgeOptions says how quotad's HTTP server (NewHTTPServer) hands requests
// to the router.
type EdgeOptions struct {
	// Fallback serves every request the edge does not answer itself; nil
	// is the Server's own router.
	Fallback http.Handler
	// ChecksThroughFallback sends the check routes to Fallback too: with
	// tracing on, Fallback wraps the router in spans.
	ChecksThroughFallback bool
}

// NewHTTPServer is quotad's HTTP server. fasthttp carries every request:
// the check routes (POST /v1/check, POST /v1/check/batch, /v1/auth) are
// answered on its request context, the other routes by the Echo router
// through fasthttpadaptor. fasthttp because a check's HTTP work is most of
// its CPU: `make bench-http-edge` (net/http against fasthttp, both
// answering a check's answer with no work) pays for it.
func (s *Server) NewHTTPServer(o EdgeOptions) *fasthttp.Server {
	fallback := o.Fallback
	if fallback == nil {
		fallback = s
	}
	return &fasthttp.Server{
		Handler:        s.edgeHandler(fasthttpadaptor.NewFastHTTPHandler(ownContext(fallback)), !o.ChecksThroughFallback),
		ErrorHandler:   s.edgeError,
		ReadTimeout:    headerTimeout,
		HeaderReceived: bodyTimeout,
		WriteTimeout:   10 * time.Second,
		IdleTimeout:    120 * time.Second,
		// fasthttp's default, set here because IdleWorkersLinger is
		// reckoned from it.
		MaxIdleWorkerDuration: maxIdleWorker,
		// A request's head must fit the read buffer: 16 KiB, as
		// net/http's MaxHeaderBytes was.
		ReadBufferSize: 16 << 10,
		// Bodies are read up to 256 KiB and the check routes answer 413
		// over MaxBody themselves, so that a client still writing a body a
		// little over the limit reads its 413 rather than a closed
		// connection (net/http drains 256 KiB the same way); beyond that
		// fasthttp answers 413 (edgeError) and closes.
		MaxRequestBodySize:           maxReadBody,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		Logger:                       edgeLogger{s.deps.Log},
	}
}

// A request's head must arrive within headerTimeout of its first byte (of
// the connection, for its first request), and its body within
// bodyTimeout of the head, as net/http's ReadHeaderTimeout and
// ReadTimeout had it: a client trickling either is cut off (408).
const headerTimeout = 5 * time.Second

// bodyTimeout is the server's HeaderReceived: once a head is read, the
// body has 10 s.
func bodyTimeout(*fasthttp.RequestHeader) fasthttp.RequestConfig {
	return fasthttp.RequestConfig{ReadTimeout: 10 * time.Second}
}

// maxIdleWorker is how long an edge worker goroutine waits for another
// connection before it exits.
const maxIdleWorker = 10 * time.Second

// IdleWorkersLinger bounds how long the edge's idle worker goroutines
// outlive the connections they served: fasthttp's pool drops a worker idle
// for maxIdleWorker at a sweep every maxIdleWorker. A goroutine count read
// sooner after a burst may still hold them; one read after it does not
// (what the leak checks of make test-faults and make soak rely on).
const IdleWorkersLinger = 2*maxIdleWorker + time.Second

// ownContext serves h with a request context of its own: fasthttpadaptor
// hands h fasthttp's request context, which is reused for the next
// request once h returns, and work h leaves running (readyz's probes
// past their deadline) must not read it then. It never ended with the
// client anyway, only with the server.
func ownContext(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.Background()))
	})
}

// edgeHandler answers the check routes itself (when checks is true) and
// hands everything else to fallback.
func (s *Server) edgeHandler(fallback fasthttp.RequestHandler, checks bool) fasthttp.RequestHandler {
	if !checks {
		return fallback
	}
	check := s.edgeRoute("/v1/check", s.serveCheck)
	batch := s.edgeRoute("/v1/check/batch", s.serveBatch)
	auth := s.edgeRoute("/v1/auth", s.serveAuth)
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.URI().PathOriginal()) {
		case "/v1/check":
			if ctx.IsPost() {
				check(ctx)
				return
			}
		case "/v1/check/batch":
			if ctx.IsPost() {
				batch(ctx)
				return
			}
		case "/v1/auth":
			auth(ctx)
			return
		}
		fallback(ctx)
	}
}

// edgeRoute is a check route's handler h on the edge, with what the
// router's middleware gives it there (limitInFlight, observe, timed): the
// in-flight limit, its latency, and its count by status.
func (s *Server) edgeRoute(route string, h func(exchange) error) fasthttp.RequestHandler {
	var latency prometheus.Observer
	if s.deps.Metrics != nil {
		latency = s.deps.Metrics.CheckLatency.WithLabelValues(route)
	}
	counts := &statusCounters{route: route, m: s.deps.Metrics}
	return func(ctx *fasthttp.RequestCtx) {
		select {
		case s.inFlight <- struct{}{}:
		default:
			if s.deps.Metrics != nil {
				s.deps.Metrics.Rejected.Inc()
			}
			s.edgeWriteError(ctx, newError(http.StatusServiceUnavailable, "overloaded", "too many requests in flight; retry shortly"))
			return
		}
		if s.deps.Metrics != nil {
			s.deps.Metrics.InFlight.Inc()
		}
		start := time.Now()
		if err := h(edgeExchange{ctx}); err != nil {
			s.edgeWriteError(ctx, s.apiErrorOf(err, route))
		}
		<-s.inFlight
		if s.deps.Metrics != nil {
			latency.Observe(time.Since(start).Seconds())
			s.deps.Metrics.InFlight.Dec()
			counts.inc(ctx.Response.StatusCode())
		}
	}
}

// edgeWriteError answers ae.
func (s *Server) edgeWriteError(ctx *fasthttp.RequestCtx, ae *apiError) {
	ctx.Response.ResetBody()
	ctx.SetStatusCode(ae.status)
	ctx.Response.Header.SetContentTypeBytes(jsonContentTypeBytes)
	ctx.Response.SetBodyRaw(ae.body())
}

// edgeError answers a request fasthttp could not read.
func (s *Server) edgeError(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.edgeWriteError(ctx, errBodyTooLarge)
	case errors.As(err, &small):
		s.edgeWriteError(ctx, newError(http.StatusRequestHeaderFieldsTooLarge, "headers_too_large", "request headers are over 16 KiB"))
	case errors.As(err, &ne) && ne.Timeout():
		s.edgeWriteError(ctx, newError(http.StatusRequestTimeout, "request_timeout", "the request was not read in time"))
	default:
		s.edgeWriteError(ctx, newError(http.StatusBadRequest, "bad_request", "malformed HTTP request"))
	}
}

var jsonContentTypeBytes = []byte("application/json")

// maxReadBody is the most of a body the edge reads (413 beyond).
const maxReadBody = 256 << 10

// edgeExchange is a check carried by the edge.
type edgeExchange struct{ ctx *fasthttp.RequestCtx }

// context is not the request's: fasthttp's request context is reused
// once the handler returns and ends only when the server does.
func (x edgeExchange) context() context.Context { return context.Background() }

func (x edgeExchange) header(name string) (string, int) {
	vals := x.ctx.Request.Header.PeekAll(name)
	if len(vals) == 0 {
		return "", 0
	}
	if string(vals[0]) == jsonContentType[0] {
		// Every check's Content-Type, without a copy.
		return jsonContentType[0], len(vals)
	}
	return string(vals[0]), len(vals)
}

func (x edgeExchange) contentLength() int64 { return int64(len(x.ctx.PostBody())) }

func (x edgeExchange) body() ([]byte, func(), error) { return x.ctx.PostBody(), func() {}, nil }

// answerBuffer is the response's own pooled body buffer, emptied: the
// answer is written where fasthttp sends it from, not in a buffer of its
// own per check.
func (x edgeExchange) answerBuffer() []byte { return x.ctx.Response.SwapBody(nil)[:0] }

func (x edgeExchange) answer(status int, h answerHeaders, body []byte) error {
	x.ctx.SetStatusCode(status)
	rh := &x.ctx.Response.Header
	rh.SetContentTypeBytes(jsonContentTypeBytes)
	text, start := h.text(), 0
	for i := range h.n {
		rh.SetBytesV(h.keys[i], text[start:h.ends[i]])
		start = h.ends[i]
	}
	// The body becomes the response's buffer (the pool's once sent).
	x.ctx.Response.SwapBody(body)
	return nil
}

// statusCounters are a route's quota_http_requests_total series by
// status, resolved once each rather than by label on every request.
type statusCounters struct {
	route  string
	m      *metrics.Metrics
	byCode [600]atomic.Pointer[prometheus.Counter]
}

func (c *statusCounters) inc(code int) {
	if code < 0 || code >= len(c.byCode) {
		c.m.Requests.WithLabelValues(c.route, strconv.Itoa(code)).Inc()
		return
	}
	p := c.byCode[code].Load()
	if p == nil {
		ctr := c.m.Requests.WithLabelValues(c.route, strconv.Itoa(code))
		p = &ctr
		c.byCode[code].Store(p)
	}
	(*p).Inc()
}

// edgeLogger writes fasthttp's own messages (connections it dropped) at
// debug level.
type edgeLogger struct{ log *slog.Logger }

func (l edgeLogger) Printf(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug("http server", "msg", fmt.Sprintf(format, args...))
	}
}

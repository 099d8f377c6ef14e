// Package api is quotad's HTTP surface: it decodes requests, calls the
// limiter (checks through api/decide, the decision path it shares with
// the gRPC edge, api/rlsgrpc) and the other services, and encodes
// answers. It holds no counting logic of its own.
package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/analytics/throttled"
	"github.com/quota-platform/quota/api/checkjson"
	"github.com/quota-platform/quota/api/decide"
	"github.com/quota-platform/quota/apps"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/metrics"
	"github.com/quota-platform/quota/rules"
)

// MaxBody is the largest request body accepted (413 beyond).
const MaxBody = 64 << 10

// ReadinessCheck reports whether one dependency is reachable.
type ReadinessCheck struct {
	Name  string
	Check func(context.Context) error
}

// Deps is what the HTTP layer calls.
type Deps struct {
	Settings config.Settings
	Limiter  *limiter.Limiter
	Metrics  *metrics.Metrics
	Gatherer prometheus.Gatherer
	Log      *slog.Logger
	// PersistRules saves rules accepted by PUT /v1/rules (to the shared
	// rules store, and QUOTA_RULES_STATE when set; never the rules file:
	// cmd/quotad) before they take effect; nil keeps them in memory only. An error wrapping
	// rulesync.ErrUnavailable is a 503: nothing changed.
	PersistRules func(*rules.Set) error
	Ready        []ReadinessCheck
	// Checks decides single checks; nil means Limiter.Check. quotad passes a
	// coalesce.Coalescer so concurrent checks share one Redis pipeline.
	Checks SingleChecker
	// Usage receives every decided check for analytics; nil records nothing.
	Usage UsageRecorder
	// Analytics answers the stats API and the dashboard; nil serves neither.
	Analytics *analytics.Stats
	// Throttled records the denying rules' identities of denied checks and
	// answers GET /v1/apps/{app_id}/throttled (api/throttled.go); nil: the
	// answer lists interfaces only.
	Throttled *throttled.Throttled
	// Keys mints and verifies the app keys of the stats API; nil: only the
	// admin token reads stats, and POST /v1/admin/apps answers 404.
	Keys *apps.Keys
	// Tiers answers GET /v1/admin/tiers and POST /v1/admin/migrate; nil
	// (tiering off) answers them 404.
	Tiers TiersAdmin
	// Status answers GET /v1/admin/status (quotactl status); nil: 404.
	Status StatusSource
	// AppPlans changes apps' plans and overrides (the admin API); nil
	// answers those paths 404. GET /v1/apps/{app_id}/usage needs only the
	// Limiter.
	AppPlans AppPlans
	// Nearest names the identities past half of an app's identity quotas
	// (nearquota.Record) for GET /v1/apps/{app_id}/usage/nearest; nil:
	// that path answers 404.
	Nearest NearestIdentities
}

// SingleChecker decides one check (decide.SingleChecker).
type SingleChecker = decide.SingleChecker

// UsageRecorder is fed every decided check (decide.UsageRecorder).
type UsageRecorder = decide.UsageRecorder

// Server is the HTTP handler of quotad.
type Server struct {
	deps     Deps
	core     *decide.Core // the checks' decisions, shared with the gRPC edge
	echo     *echo.Echo
	bufs     sync.Pool
	bodies   sync.Pool // *bufferedBody, for checks read before their slot
	inFlight chan struct{}
	// draining is set on SIGTERM: /readyz answers 503 from then on.
	draining atomic.Bool
}

// New builds the routes.
func New(d Deps) *Server {
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	core := decide.New(decide.Deps{Settings: d.Settings, Limiter: d.Limiter, Checks: d.Checks, Metrics: d.Metrics,
		Log: d.Log, Usage: d.Usage, Throttled: d.Throttled})
	s := &Server{deps: d, core: core, echo: echo.New(), inFlight: make(chan struct{}, d.Settings.MaxInFlight)}
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	s.bodies.New = func() any { return &bufferedBody{b: make([]byte, 0, 4096)} }
	e := s.echo
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.limitInFlight, s.observe)

	e.POST("/v1/check", s.timed("/v1/check", s.check))
	e.POST("/v1/check/batch", s.timed("/v1/check/batch", s.checkBatch))
	e.Any("/v1/auth", s.timed("/v1/auth", s.auth))
	e.GET("/v1/rules", s.getRules)
	e.PUT("/v1/rules", s.putRules, s.requireAdmin)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{})))
	s.analyticsRoutes(e)
	s.tiersRoutes(e)
	s.statusRoutes(e)
	s.planRoutes(e)
	s.openAPIRoute(e)
	return s
}

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// Echo exposes the router so that other packages' routes can be added.
func (s *Server) Echo() *echo.Echo { return s.echo }

// Core is the decision path of this server's checks, for quotad's other
// check edge (api/rlsgrpc) to share: one set of metrics, analytics and
// fail-mode log lines for both.
func (s *Server) Core() *decide.Core { return s.core }

// apiError is an error answered with the contract's error body.
type apiError struct {
	status    int
	code, msg string
}

func (e *apiError) Error() string { return e.msg }

func newError(status int, code, msg string) *apiError {
	return &apiError{status: status, code: code, msg: msg}
}

func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	writeError(c, s.apiErrorOf(err, c.Path()))
}

// apiErrorOf is the contract's error answer to a handler's err; an error
// that is not the client's is logged and answered 500.
func (s *Server) apiErrorOf(err error, route string) *apiError {
	var ae *apiError
	var ie *checkjson.InputError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ie):
		return newError(http.StatusBadRequest, ie.Code, ie.Msg)
	case errors.As(err, &he):
		return fromEchoError(he)
	}
	s.deps.Log.Error("internal error", "path", route, "err", err)
	return newError(http.StatusInternalServerError, "internal", "internal error")
}

func fromEchoError(he *echo.HTTPError) *apiError {
	switch he.Code {
	case http.StatusNotFound:
		return newError(he.Code, "not_found", "no such path")
	case http.StatusMethodNotAllowed:
		return newError(he.Code, "method_not_allowed", "method not allowed on this path")
	case http.StatusRequestEntityTooLarge:
		return newError(he.Code, "body_too_large", "request body is over 64 KiB")
	}
	msg := http.StatusText(he.Code)
	if m, ok := he.Message.(string); ok {
		msg = m
	}
	return newError(he.Code, strings.ReplaceAll(strings.ToLower(http.StatusText(he.Code)), " ", "_"), msg)
}

// body is the error's JSON answer.
func (ae *apiError) body() []byte {
	b := make([]byte, 0, 128)
	b = append(b, `{"error":{"code":`...)
	b = strconv.AppendQuote(b, ae.code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, ae.msg)
	return append(b, "}}\n"...)
}

func writeError(c echo.Context, ae *apiError) {
	b := ae.body()
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if ae.status == http.StatusMethodNotAllowed {
		h.Set("Allow", allowFor(c.Request().URL.Path))
	}
	c.Response().WriteHeader(ae.status)
	_, _ = c.Response().Write(b)
}

func allowFor(path string) string {
	if path == "/v1/rules" {
		return "GET, PUT"
	}
	if strings.HasPrefix(path, "/v1/admin/") {
		return "POST"
	}
	if strings.HasPrefix(path, "/v1/check") {
		return "POST"
	}
	return "GET"
}

// limitInFlight answers a fast 503 beyond QUOTA_MAX_IN_FLIGHT concurrent
// requests, rather than queueing until everything times out. A check's
// body is read before its slot is taken (bufferBody): a client trickling a
// body holds a connection, not a slot.
func (s *Server) limitInFlight(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		// Liveness and metrics answer even when overloaded: a liveness probe
		// failing under load gets instances restarted just when they are
		// needed, and /metrics is how the overload is seen.
		if p := c.Request().URL.Path; p == "/healthz" || p == "/metrics" {
			return next(c)
		}
		if readsBodyFirst(c) {
			defer s.bufferBody(c.Request())()
		}
		select {
		case s.inFlight <- struct{}{}:
		default:
			s.deps.Metrics.Rejected.Inc()
			return newError(http.StatusServiceUnavailable, "overloaded", "too many requests in flight; retry shortly")
		}
		s.deps.Metrics.InFlight.Inc()
		defer func() {
			<-s.inFlight
			s.deps.Metrics.InFlight.Dec()
		}()
		return next(c)
	}
}

// readsBodyFirst reports whether c is a check, whose body is read before
// its in-flight slot is taken.
func readsBodyFirst(c echo.Context) bool {
	if c.Request().Method != http.MethodPost {
		return false
	}
	p := c.Path()
	return p == "/v1/check" || p == "/v1/check/batch"
}

// bufferedBody is a request body read in full (at most MaxBody+1 bytes)
// before the handler ran: it replays those bytes, then the read's outcome
// (io.EOF, or the error that cut the read).
type bufferedBody struct {
	b   []byte
	off int
	err error
}

func (bb *bufferedBody) Read(p []byte) (int, error) {
	if bb.off == len(bb.b) {
		if bb.err != nil {
			return 0, bb.err
		}
		return 0, io.EOF
	}
	n := copy(p, bb.b[bb.off:])
	bb.off += n
	return n, nil
}

// Close does nothing: net/http closes the connection's own body.
func (bb *bufferedBody) Close() error { return nil }

// bufferBody reads r's body into a pooled buffer and puts it back in its
// place, so the handler reads what it would have read (and answers 413, 415
// or 400 as before, in its own order); it returns the function that gives
// the buffer back. A body announced over MaxBody is left unread: the
// handler answers 413 without reading it.
func (s *Server) bufferBody(r *http.Request) (release func()) {
	if r.ContentLength > MaxBody {
		return func() {}
	}
	bb := s.bodies.Get().(*bufferedBody)
	bb.b, bb.err = readLimited(bb.b[:0], r.Body)
	bb.off = 0
	r.Body = bb
	return func() { bb.err = nil; s.bodies.Put(bb) }
}

// readLimited appends to buf what r yields, up to MaxBody+1 bytes; the
// error is nil at the end of the body or at the limit.
func readLimited(buf []byte, r io.Reader) ([]byte, error) {
	lr := io.LimitReader(r, MaxBody+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// observe counts every request in quota_http_requests_total by route and
// status.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		code := c.Response().Status
		s.deps.Metrics.Requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		return nil
	}
}

// timed is check route's handler h, timed in quota_check_duration_seconds
// under route, its error answer included. The observer is resolved here,
// once per route, rather than looked up by label on every request (as
// ShouldRateLimit's own timing), and the wrapper is built here too: Echo
// would build a route middleware's chain anew per request. Requests no
// route matched (404, and 405 on a check's path) are not checks and are
// not timed.
func (s *Server) timed(route string, h echo.HandlerFunc) echo.HandlerFunc {
	if s.deps.Metrics == nil {
		return h
	}
	latency := s.deps.Metrics.CheckLatency.WithLabelValues(route)
	return func(c echo.Context) error {
		start := time.Now()
		if err := h(c); err != nil {
			c.Error(err)
		}
		latency.Observe(time.Since(start).Seconds())
		return nil
	}
}

// readBody reads a JSON request body into a pooled buffer, enforcing the
// content type and size limits. The caller must call release.
func (s *Server) readBody(x exchange) ([]byte, func(), error) {
	// The usual exact "application/json" skips the parser (an allocation).
	if ct, _ := x.header(echo.HeaderContentType); ct != "" && ct != echo.MIMEApplicationJSON {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, nil, newError(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be application/json")
		}
	}
	if x.contentLength() > MaxBody {
		return nil, nil, errBodyTooLarge
	}
	buf, release, err := x.body()
	if err != nil {
		release()
		return nil, nil, newError(http.StatusBadRequest, "unreadable_body", "could not read the request body")
	}
	if len(buf) > MaxBody {
		release()
		return nil, nil, errBodyTooLarge
	}
	return buf, release, nil
}

var errBodyTooLarge = newError(http.StatusRequestEntityTooLarge, "body_too_large", "request body is over 64 KiB")

// readEchoBody is readBody for the routes Echo serves alone.
func (s *Server) readEchoBody(c echo.Context) ([]byte, func(), error) {
	return s.readBody(echoExchange{s, c})
}

// bodyBytes is r's body (at most MaxBody+1 bytes): the bytes bufferBody
// read already, or read now into a pooled buffer given back by release.
func (s *Server) bodyBytes(r *http.Request) ([]byte, func(), error) {
	if bb, ok := r.Body.(*bufferedBody); ok {
		return bb.b, func() {}, bb.err
	}
	bp := s.bufs.Get().(*[]byte)
	buf, err := readLimited((*bp)[:0], r.Body)
	*bp = buf
	return buf, func() { *bp = (*bp)[:0]; s.bufs.Put(bp) }, err
}

// bearer returns the token of an `Authorization: Bearer …` header.
func bearer(x exchange) string {
	h, _ := x.header(echo.HeaderAuthorization)
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.deps.Settings.AdminToken == "" {
			return newError(http.StatusForbidden, "admin_disabled", "admin endpoints are disabled: QUOTA_ADMIN_TOKEN is not set")
		}
		tok := bearer(echoExchange{s, c})
		if tok == "" {
			return newError(http.StatusUnauthorized, "unauthorized", "this endpoint needs the admin token as Authorization: Bearer")
		}
		if !decide.SameToken(tok, s.deps.Settings.AdminToken) {
			return newError(http.StatusForbidden, "forbidden", "the token given is not the admin token")
		}
		return next(c)
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// StartDraining makes /readyz answer 503 from now on, so that load
// balancers stop sending new requests before the server stops (SIGTERM).
func (s *Server) StartDraining() { s.draining.Store(true) }

// readyz answers whether this instance can answer checks as its fail mode
// promises. In open mode an unreachable dependency is reported but keeps the
// instance ready: checks are still answered (allowed, unenforced), and every
// instance shares the same Redis and shards, so taking this one out of the
// balancer would take them all out. In closed mode checks would be 503s, so
// the instance is not ready.
func (s *Server) readyz(c echo.Context) error {
	mode := s.deps.Settings.FailMode
	if s.draining.Load() {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{
			"error":     map[string]string{"code": "draining", "message": "shutting down: finishing the requests in flight"},
			"fail_mode": mode,
		})
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	status := map[string]string{}
	failed := false
	for _, rc := range s.deps.Ready {
		if err := rc.Check(ctx); err != nil {
			status[rc.Name] = err.Error()
			failed = true
		} else {
			status[rc.Name] = "ok"
		}
	}
	switch {
	case failed && mode == config.FailOpen:
		return c.JSON(http.StatusOK, map[string]any{"status": "degraded", "fail_mode": mode, "checks": status})
	case failed:
		return c.JSON(http.StatusServiceUnavailable, map[string]any{
			"error":     map[string]string{"code": "not_ready", "message": "a dependency is unreachable"},
			"fail_mode": mode,
			"checks":    status,
		})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": "ready", "fail_mode": mode, "checks": status})
}

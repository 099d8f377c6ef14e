// Package httpmw is net/http middleware that asks quota before each
// request: allowed requests go on with the rate-limit headers set on their
// answer; denied ones are answered 429 with those headers and Retry-After.
package httpmw

import (
	"errors"
	"net"
	"net/http"

	"github.com/quota-platform/quota/client"
)

// RequestFunc builds the check of a request; ok false lets the request
// through unchecked (e.g. a health probe).
type RequestFunc func(r *http.Request) (req client.CheckRequest, ok bool)

// ErrorFunc answers a request whose check failed (quota unreachable under
// FailClosed, or an *client.APIError).
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

type config struct {
	build   RequestFunc
	onError ErrorFunc
}

// Option configures the middleware.
type Option func(*config)

// WithRequestFunc replaces DefaultRequest.
func WithRequestFunc(f RequestFunc) Option { return func(c *config) { c.build = f } }

// WithErrorFunc replaces DefaultError.
func WithErrorFunc(f ErrorFunc) Option { return func(c *config) { c.onError = f } }

// DefaultRequest takes app_id, user_id and interface_id from the X-App-Id,
// X-User-Id and X-Interface-Id headers (each only when present) and ip
// from the connection's remote address — not from X-Forwarded-For, which
// the client writes; behind a proxy, supply a RequestFunc that reads the
// header your proxy sets.
func DefaultRequest(r *http.Request) (client.CheckRequest, bool) {
	dims := make(map[string]string, 4)
	for dim, h := range map[string]string{"app_id": "X-App-Id", "user_id": "X-User-Id", "interface_id": "X-Interface-Id"} {
		if v := r.Header.Get(h); v != "" {
			dims[dim] = v
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		dims["ip"] = host
	}
	return client.CheckRequest{Dimensions: dims}, len(dims) > 0
}

// DefaultError answers 400 when quota found the request's identity invalid
// (e.g. a header value over 256 bytes), else 503.
func DefaultError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *client.APIError
	w.Header().Set("Content-Type", "application/json")
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":"invalid_identity","message":"the request's identity headers are invalid"}}` + "\n"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"error":{"code":"quota_unavailable","message":"rate limiting is unavailable; retry shortly"}}` + "\n"))
}

// Middleware checks every request with c before next runs.
func Middleware(c *client.Client, opts ...Option) func(http.Handler) http.Handler {
	cfg := config{build: DefaultRequest, onError: DefaultError}
	for _, o := range opts {
		o(&cfg)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, ok := cfg.build(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			d, err := c.Check(r.Context(), req)
			if err != nil {
				cfg.onError(w, r, err)
				return
			}
			for k, v := range d.Header {
				w.Header()[k] = v
			}
			if !d.Allowed {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write([]byte(`{"error":{"code":"rate_limited","message":"too many requests; retry after the Retry-After seconds"}}` + "\n"))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

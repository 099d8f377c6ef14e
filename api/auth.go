package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/api/checkjson"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// Forward auth (nginx auth_request, Traefik forwardAuth, Caddy
// forward_auth): the gateway sends the headers of the request it is about
// to pass on, and quota decides it as a check built from them.
const (
	// HeaderQuotaToken carries QUOTA_CHECK_TOKEN on GET /v1/auth. The
	// gateway forwards the client's own Authorization header to the auth
	// endpoint, so the check token travels in a header of its own; a
	// request without it may still give the token as Authorization: Bearer,
	// as /v1/check takes it.
	HeaderQuotaToken = "X-Quota-Token"
	// HeaderQuotaCost is the optional cost of the call (1..MaxCost, default 1).
	HeaderQuotaCost = "X-Quota-Cost"
)

func (s *Server) auth(c echo.Context) error { return s.serveAuth(echoExchange{s, c}) }

// serveAuth answers /v1/auth.
func (s *Server) serveAuth(x exchange) error {
	if err := s.authorizeAuth(x); err != nil {
		return err
	}
	req, err := decodeAuth(x, s.deps.Settings.AuthHeaders)
	if err != nil {
		return err
	}
	return s.decide(x, &req, s.deps.Settings.AuthDenyStatus)
}

// authorizeAuth asks GET /v1/auth for the check token when /v1/check needs
// it (QUOTA_CHECK_TOKEN): in X-Quota-Token, else as Authorization: Bearer.
func (s *Server) authorizeAuth(x exchange) error {
	if s.deps.Settings.CheckToken == "" {
		return nil
	}
	if tok, _ := x.header(HeaderQuotaToken); tok != "" {
		return s.checkToken(tok)
	}
	return s.checkToken(bearer(x))
}

// headerMap reads an http.Header as an exchange's request headers.
type headerMap http.Header

func (h headerMap) header(name string) (string, int) {
	vals := h[name]
	if len(vals) == 0 {
		return "", 0
	}
	return vals[0], len(vals)
}

// DecodeAuth builds a check from request headers: each header of m that is
// present and not empty gives its dimension; X-Quota-Cost the cost. A
// header given twice, a value that is not 1–256 bytes of valid UTF-8, an
// invalid cost, or no dimension at all is an input error (a 400 that
// counts nothing).
func DecodeAuth(h http.Header, m []config.AuthHeader) (limiter.Request, error) {
	return decodeAuth(headerMap(h), m)
}

// requestHeaders is what decodeAuth reads of a request: a header's first
// value and its number of values.
type requestHeaders interface {
	header(name string) (string, int)
}

func decodeAuth(h requestHeaders, m []config.AuthHeader) (limiter.Request, error) {
	req := limiter.Request{Cost: 1}
	for _, ah := range m {
		v, n := h.header(ah.Header)
		if n == 0 || (n == 1 && v == "") {
			continue
		}
		if n > 1 {
			return req, checkjson.BadInput("invalid_header", "header %s is given %d times: give it once", ah.Header, n)
		}
		if !rules.ValidValue(v) {
			return req, checkjson.BadInput("invalid_header", "header %s (dimension %s) must be 1-256 bytes of valid UTF-8", ah.Header, ah.Dimension)
		}
		if req.Dims == nil {
			req.Dims = make([]limiter.Dim, 0, len(m))
		}
		req.Dims = append(req.Dims, limiter.Dim{Name: ah.Dimension, Value: v})
	}
	if v, count := h.header(HeaderQuotaCost); count > 0 {
		n, ok := parseCost(v, count)
		if !ok {
			return req, checkjson.BadInput("invalid_cost", "header %s must be given once, an integer from 1 to %d", HeaderQuotaCost, checkjson.MaxCost)
		}
		req.Cost = n
	}
	if len(req.Dims) == 0 {
		names := make([]byte, 0, 64)
		for i, ah := range m {
			if i > 0 {
				names = append(names, ", "...)
			}
			names = append(names, ah.Header...)
		}
		return req, checkjson.BadInput("no_dimensions", "none of the headers that name dimensions was given (QUOTA_AUTH_HEADERS: %s)", names)
	}
	return req, nil
}

// parseCost reads one decimal integer in 1..MaxCost: digits only, no sign,
// no leading zero.
func parseCost(v string, count int) (int64, bool) {
	if count != 1 {
		return 0, false
	}
	if v == "" || len(v) > 7 || v[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n >= 1 && n <= checkjson.MaxCost
}

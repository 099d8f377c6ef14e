// Package client calls quota's HTTP API from Go: Check, CheckBatch and
// Auth mirror POST /v1/check, POST /v1/check/batch and GET /v1/auth.
//
// One Client is meant to be shared: it keeps its connections to quotad
// open between calls. Every call has a deadline — the context's, or the
// client's default timeout. When quotad cannot be reached, times out or
// answers 5xx, the client's fail mode decides: FailOpen (the default, as
// quotad's own QUOTA_FAIL_MODE) allows the call with Decision.Enforced
// false and the cause in Decision.Err; FailClosed returns the error. A 4xx
// other than a denial is always an *APIError: the request was wrong, and
// allowing it would hide that.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = 500 * time.Millisecond

// FailMode says what a call answers when quotad gives no decision.
type FailMode int

// The fail modes.
const (
	FailOpen   FailMode = iota // allow, Enforced false
	FailClosed                 // return the error
)

// CheckRequest is one check: its dimensions (name → value) and the
// reserved fields of POST /v1/check.
type CheckRequest struct {
	Dimensions map[string]string
	Cost       int64 // 0 means 1
	DryRun     bool
	Report     bool
}

// MarshalJSON writes the flat object of the contract: the dimensions and
// the reserved fields side by side.
func (r CheckRequest) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(r.Dimensions)+3)
	for k, v := range r.Dimensions {
		switch k {
		case "cost", "dry_run", "report":
			return nil, fmt.Errorf("client: %q is a reserved field, not a dimension", k)
		}
		m[k] = v
	}
	if r.Cost != 0 {
		m["cost"] = r.Cost
	}
	if r.DryRun {
		m["dry_run"] = true
	}
	if r.Report {
		m["report"] = true
	}
	return json.Marshal(m)
}

// RuleResult is one entry of a decision's "rules".
type RuleResult struct {
	Rule         string `json:"rule"`
	Window       string `json:"window"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	Tier         string `json:"tier"`
	Allowed      bool   `json:"allowed"`
	Shadow       bool   `json:"shadow,omitempty"`
}

// Decision is quota's answer to one check.
type Decision struct {
	Allowed bool         `json:"allowed"`
	Rules   []RuleResult `json:"rules"`
	// Enforced is false when no limit was applied: quotad's store was down
	// and its QUOTA_FAIL_MODE is open, or this client failed open (Err).
	Enforced bool `json:"-"`
	// Header holds the rate-limit headers of the answer (RateLimit-*,
	// RateLimit-Policy, RateLimit, Retry-After), for passing on; nil for
	// batch items.
	Header http.Header `json:"-"`
	// Err is why the client failed open; nil otherwise.
	Err error `json:"-"`
}

// APIError is an error answer of quotad (a 4xx other than a denial, or a
// 5xx under FailClosed).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("quota: %d %s: %s", e.Status, e.Code, e.Message)
}

// Client is a quota client; safe for concurrent use.
type Client struct {
	base    string
	hc      *http.Client
	token   string
	timeout time.Duration
	fail    FailMode
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the client's own http.Client.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken sends QUOTA_CHECK_TOKEN with every call.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithTimeout sets the deadline of calls whose context has none.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithFailMode sets what a call answers when quotad gives no decision.
func WithFailMode(m FailMode) Option { return func(c *Client) { c.fail = m } }

// New returns a client of the quotad at baseURL (e.g. http://127.0.0.1:8080).
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), timeout: DefaultTimeout, fail: FailOpen}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport()}
	}
	return c
}

// newTransport keeps enough idle connections to quotad for a busy service:
// net/http's default keeps 2 per host, so under concurrency most calls
// would dial (and leave TIME_WAIT sockets) instead of reusing one.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 5 * time.Second,
	}
}

// Check decides one call (POST /v1/check).
func (c *Client) Check(ctx context.Context, req CheckRequest) (Decision, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Decision{}, err
	}
	var d Decision
	err = c.do(ctx, http.MethodPost, "/v1/check", body, nil, func(resp *http.Response, b []byte) error {
		return decodeDecision(resp, b, &d, http.StatusTooManyRequests)
	})
	return c.answer(d, err)
}

// CheckBatch decides several calls in order, each as if sent alone (POST
// /v1/check/batch); under FailOpen a failed batch allows every item.
func (c *Client) CheckBatch(ctx context.Context, reqs []CheckRequest) ([]Decision, error) {
	body, err := json.Marshal(map[string][]CheckRequest{"checks": reqs})
	if err != nil {
		return nil, err
	}
	var out struct {
		Results []Decision `json:"results"`
	}
	err = c.do(ctx, http.MethodPost, "/v1/check/batch", body, nil, func(resp *http.Response, b []byte) error {
		if resp.StatusCode != http.StatusOK {
			return apiError(resp, b)
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return fmt.Errorf("quota: batch answer: %w", err)
		}
		enforced := resp.Header.Get("Quota-Enforced") != "false"
		for i := range out.Results {
			out.Results[i].Enforced = enforced
		}
		return nil
	})
	if err == nil {
		return out.Results, nil
	}
	if c.fail == FailClosed || !failsOpen(err) {
		return nil, err
	}
	ds := make([]Decision, len(reqs))
	for i := range ds {
		ds[i] = Decision{Allowed: true, Err: err}
	}
	return ds, nil
}

// Auth decides a call from request headers, as a gateway's forward auth
// does (GET /v1/auth): header carries the headers QUOTA_AUTH_HEADERS names
// (X-App-Id, X-User-Id, X-Interface-Id, X-Real-IP by default) and
// optionally X-Quota-Cost. Any status other than 2xx that carries a
// decision (429, or QUOTA_AUTH_DENY_STATUS) is a denial.
func (c *Client) Auth(ctx context.Context, header http.Header) (Decision, error) {
	var d Decision
	err := c.do(ctx, http.MethodGet, "/v1/auth", nil, header, func(resp *http.Response, b []byte) error {
		return decodeDecision(resp, b, &d, 0)
	})
	return c.answer(d, err)
}

// answer applies the fail mode to a single decision.
func (c *Client) answer(d Decision, err error) (Decision, error) {
	if err == nil {
		return d, nil
	}
	if c.fail == FailClosed || !failsOpen(err) {
		return Decision{}, err
	}
	return Decision{Allowed: true, Err: err}, nil
}

// failsOpen reports whether err is one FailOpen allows through: no answer
// or a 5xx, not a 4xx.
func failsOpen(err error) bool {
	var ae *APIError
	return !errors.As(err, &ae) || ae.Status >= 500
}

// do sends one request with the call's deadline and hands the answer, read
// in full (so the connection goes back to the pool), to decode.
func (c *Client) do(ctx context.Context, method, path string, body []byte, header http.Header, decode func(*http.Response, []byte) error) error {
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("quota: %s %s: %w", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		if path == "/v1/auth" {
			req.Header.Set("X-Quota-Token", c.token)
		} else {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("quota: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("quota: %s %s: reading the answer: %w", method, path, err)
	}
	return decode(resp, b)
}

// rateLimitHeaders are the headers a Decision keeps for passing on.
var rateLimitHeaders = []string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit", "Retry-After"}

// decodeDecision reads a single decision: 200, or denyStatus (0: any
// non-2xx whose body is a decision), else an *APIError.
func decodeDecision(resp *http.Response, b []byte, d *Decision, denyStatus int) error {
	var body struct {
		Allowed  *bool        `json:"allowed"`
		Rules    []RuleResult `json:"rules"`
		Enforced *bool        `json:"enforced"`
	}
	isDecision := json.Unmarshal(b, &body) == nil && body.Allowed != nil
	ok := resp.StatusCode == http.StatusOK || resp.StatusCode == denyStatus || (denyStatus == 0 && resp.StatusCode < 500)
	if !isDecision || !ok {
		return apiError(resp, b)
	}
	d.Allowed, d.Rules = *body.Allowed, body.Rules
	d.Enforced = resp.Header.Get("Quota-Enforced") != "false" && (body.Enforced == nil || *body.Enforced)
	for _, k := range rateLimitHeaders {
		if v := resp.Header[k]; len(v) > 0 {
			if d.Header == nil {
				d.Header = make(http.Header, len(rateLimitHeaders))
			}
			d.Header[k] = v
		}
	}
	return nil
}

func apiError(resp *http.Response, b []byte) error {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	ae := &APIError{Status: resp.StatusCode}
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		ae.Code, ae.Message = body.Error.Code, body.Error.Message
	} else {
		ae.Code, ae.Message = "unexpected_answer", strings.TrimSpace(string(b))
	}
	return ae
}

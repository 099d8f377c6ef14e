package api

import (
	"context"
	"net/http"
	"sort"
	"strconv"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/limiter"
)

// defaultThrottledTop and maxThrottledTop: identities and interfaces
// GET /v1/apps/{app_id}/throttled lists, by default and at most (?top=).
const defaultThrottledTop, maxThrottledTop = 10, 100

// recordDenied feeds Deps.Throttled with a denied check's denying rules
// (not shadow ones). An allowed check costs one branch; a dry run is not a
// call.
func (s *Server) recordDenied(req *limiter.Request, d *limiter.Decision) {
	if d.Allowed || s.deps.Throttled == nil || req.DryRun {
		return
	}
	app, ok := req.Lookup("app_id")
	if !ok {
		return
	}
	var set []string // rules already recorded: one count per rule, not per limit
	for i := range d.Entries {
		e := &d.Entries[i]
		if e.Allowed || e.Shadow || contains(set, e.Rule) {
			continue
		}
		set = append(set, e.Rule)
		dims := s.ruleDimensions(e.Rule)
		if dims == nil {
			continue
		}
		values := make([]string, len(dims))
		for j, name := range dims {
			values[j], _ = req.Lookup(name)
		}
		s.deps.Throttled.Denied(app, e.Rule, dims, values)
	}
}

// recordDeniedDescriptor feeds Deps.Throttled with one descriptor of a
// gRPC (Envoy) check that its limit denied: the "rule" is the limit's full
// key in the envoy configuration, the identity the descriptor's entries.
func (s *Server) recordDeniedDescriptor(app, key string, entries []*rlcommon.RateLimitDescriptor_Entry) {
	if app == "" || s.deps.Throttled == nil {
		return
	}
	names, values := make([]string, len(entries)), make([]string, len(entries))
	for i, e := range entries {
		names[i], values[i] = e.GetKey(), e.GetValue()
	}
	s.deps.Throttled.Denied(app, key, names, values)
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// ruleDimensions are the dimensions of the rule in force named name.
func (s *Server) ruleDimensions(name string) []string {
	if r := s.deps.Limiter.Rules().Rule(name); r != nil {
		return r.Dimensions
	}
	return nil
}

type throttledIdentityJSON struct {
	Dimensions map[string]string `json:"dimensions"`
	Denied     int64             `json:"denied"`
	// MaxOvercount is present when Denied may count up to that many
	// denials of other identities (absent: the count is exact).
	MaxOvercount int64 `json:"max_overcount,omitempty"`
}

type throttledRuleJSON struct {
	Rule string                  `json:"rule"`
	Top  []throttledIdentityJSON `json:"top"`
}

type throttledIfaceJSON struct {
	InterfaceID string `json:"interface_id"`
	Denied      int64  `json:"denied"`
}

type throttledJSON struct {
	AppID      string               `json:"app_id"`
	Date       string               `json:"date"`
	Rules      []throttledRuleJSON  `json:"rules"`
	Interfaces []throttledIfaceJSON `json:"interfaces"`
}

// throttledTop is the ?top= query parameter.
func throttledTop(c echo.Context) (int, error) {
	q := c.QueryParam("top")
	if q == "" {
		return defaultThrottledTop, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > maxThrottledTop {
		return 0, newError(http.StatusBadRequest, "invalid_top", "top "+strconvQuote(q)+": want an integer from 1 to 100")
	}
	return n, nil
}

// throttled answers GET /v1/apps/{app_id}/throttled?date=YYYY-MM-DD[&top=N]:
// the most denied identities of each rule and the most denied interfaces
// of the app that day, most denied first.
func (s *Server) throttled(c echo.Context) error {
	app := c.Get("app_id").(string)
	day, date, err := s.statsDay(c)
	if err != nil {
		return err
	}
	top, err := throttledTop(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	body, err := s.throttledBody(ctx, app, day, date, top)
	if err != nil {
		return s.storeError(err)
	}
	return c.JSON(http.StatusOK, body)
}

func (s *Server) throttledBody(ctx context.Context, app string, day analytics.Day, date string, top int) (throttledJSON, error) {
	body := throttledJSON{AppID: app, Date: date, Rules: []throttledRuleJSON{}, Interfaces: []throttledIfaceJSON{}}
	if s.deps.Throttled != nil {
		rules, err := s.deps.Throttled.Top(ctx, app, day, top)
		if err != nil {
			return body, err
		}
		for _, r := range rules {
			rj := throttledRuleJSON{Rule: r.Rule, Top: make([]throttledIdentityJSON, len(r.Top))}
			for i, id := range r.Top {
				rj.Top[i] = throttledIdentityJSON{id.Dimensions, id.Denied, id.MaxOvercount}
			}
			body.Rules = append(body.Rules, rj)
		}
	}
	st, err := s.deps.Analytics.AppDay(ctx, app, day)
	if err != nil {
		return body, err
	}
	for _, ic := range st.Interfaces {
		if ic.Denied > 0 {
			body.Interfaces = append(body.Interfaces, throttledIfaceJSON{ic.InterfaceID, ic.Denied})
		}
	}
	sort.SliceStable(body.Interfaces, func(i, j int) bool {
		if body.Interfaces[i].Denied != body.Interfaces[j].Denied {
			return body.Interfaces[i].Denied > body.Interfaces[j].Denied
		}
		return body.Interfaces[i].InterfaceID < body.Interfaces[j].InterfaceID
	})
	body.Interfaces = body.Interfaces[:min(top, len(body.Interfaces))]
	return body, nil
}

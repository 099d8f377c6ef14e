package api

import (
	"context"
	"net/http"
	"sort"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/analytics"
)

// defaultThrottledTop and maxThrottledTop: identities and interfaces
// GET /v1/apps/{app_id}/throttled lists, by default and at most (?top=).
const defaultThrottledTop, maxThrottledTop = 10, 100

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

package api

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/nearquota"
)

// NearestIdentities names the identities past half of an app's identity
// quota in its current period, the highest share first.
type NearestIdentities interface {
	Nearest(ctx context.Context, app string, q limiter.IdentityQuota, n int) ([]nearquota.Near, error)
}

const (
	defaultNearestTop = 10
	maxNearestTop     = 50
)

// nearestJSON is GET /v1/apps/{app_id}/usage/nearest's answer.
type nearestJSON struct {
	AppID string             `json:"app_id"`
	Rules []nearestQuotaJSON `json:"rules"`
}

type nearestQuotaJSON struct {
	Rule         string                `json:"rule"`
	Window       string                `json:"window"`
	Limit        int64                 `json:"limit"`
	ResetAfterMs int64                 `json:"reset_after_ms"`
	Top          []nearestIdentityJSON `json:"top"`
}

type nearestIdentityJSON struct {
	Dimensions map[string]string `json:"dimensions"`
	Used       int64             `json:"used"`
	Remaining  int64             `json:"remaining"`
}

// nearest answers GET /v1/apps/{app_id}/usage/nearest[?top=N]: for each
// calendar quota of the app counted per identity, the identities nearest
// their limits (at least half used), their exact use read from the
// counters (counting nothing), most used first.
func (s *Server) nearest(c echo.Context) error {
	app, err := pathParam(c, "app_id")
	if err != nil {
		return err
	}
	top, err := nearestTop(c.QueryParam("top"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	out := nearestJSON{AppID: app, Rules: []nearestQuotaJSON{}}
	for _, q := range s.deps.Limiter.IdentityQuotas(app) {
		ids, err := s.nearestOf(ctx, app, q, top)
		if err != nil {
			s.deps.Log.Warn("nearest undecided", "app_id", app, "rule", q.Rule, "err", err)
			return newError(http.StatusServiceUnavailable, "store_unavailable", "the counters' store did not answer")
		}
		out.Rules = append(out.Rules, nearestQuotaJSON{
			Rule: q.Rule, Window: q.Window.String(), Limit: q.Limit,
			ResetAfterMs: q.ResetAfter.Milliseconds(), Top: ids,
		})
	}
	return c.JSON(http.StatusOK, out)
}

func nearestTop(q string) (int, error) {
	if q == "" {
		return defaultNearestTop, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > maxNearestTop {
		return 0, newError(http.StatusBadRequest, "invalid_top", "top "+strconvQuote(q)+": want an integer from 1 to "+strconv.Itoa(maxNearestTop))
	}
	return n, nil
}

// nearestOf reads the use of twice top candidates of quota q (a refund or
// a reset may have lowered some) and keeps the top still at half or more.
func (s *Server) nearestOf(ctx context.Context, app string, q limiter.IdentityQuota, top int) ([]nearestIdentityJSON, error) {
	cands, err := s.deps.Nearest.Nearest(ctx, app, q, 2*top)
	if err != nil {
		return nil, err
	}
	out := []nearestIdentityJSON{}
	for _, cand := range cands {
		used, ok, err := s.usedOf(ctx, app, q, cand.Identity)
		if err != nil {
			return nil, err
		}
		if ok && 2*used >= q.Limit {
			out = append(out, nearestIdentityJSON{Dimensions: cand.Identity, Used: used, Remaining: q.Limit - used})
		}
	}
	slices.SortStableFunc(out, func(a, b nearestIdentityJSON) int { return cmp.Compare(b.Used, a.Used) })
	return out[:min(top, len(out))], nil
}

// usedOf is what identity has used of quota q, counting nothing; ok is
// false when the identity's dimensions no longer fill the rule (its
// dimensions changed since it was recorded).
func (s *Server) usedOf(ctx context.Context, app string, q limiter.IdentityQuota, identity map[string]string) (used int64, ok bool, err error) {
	dims := []limiter.Dim{{Name: "app_id", Value: app}}
	for _, k := range slices.Sorted(maps.Keys(identity)) {
		dims = append(dims, limiter.Dim{Name: k, Value: identity[k]})
	}
	for _, k := range slices.Sorted(maps.Keys(q.Match)) {
		if _, dup := identity[k]; !dup && k != "app_id" {
			dims = append(dims, limiter.Dim{Name: k, Value: q.Match[k]})
		}
	}
	d, err := s.deps.Limiter.Usage(ctx, dims)
	if err != nil {
		return 0, false, err
	}
	for _, e := range d.Entries {
		if e.Rule == q.Rule && e.Window == time.Duration(q.Window) {
			return max(0, e.Limit-e.Remaining), true, nil
		}
	}
	return 0, false, nil
}

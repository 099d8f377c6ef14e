package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/appplans"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
)

// AppPlans changes which plan an app is on and its overrides, on every
// instance (cmd/quotad: appplans.Store, then this instance's limiter at
// once). An error wrapping appplans.ErrUnavailable is a 503: nothing changed.
type AppPlans interface {
	SetPlan(ctx context.Context, app, plan string) error
	SetOverride(ctx context.Context, app, rule string, spec rules.LimitsSpec) error
	DeleteOverride(ctx context.Context, app, rule string) error
}

func (s *Server) planRoutes(e *echo.Echo) {
	e.GET("/v1/apps/:app_id/usage", s.usage, s.requireAppAccess)
	if s.deps.Nearest != nil {
		e.GET("/v1/apps/:app_id/usage/nearest", s.nearest, s.requireAppAccess)
	}
	if s.deps.AppPlans == nil {
		return
	}
	admin := e.Group("/v1/admin/apps/:app_id", s.requireAdmin)
	admin.GET("/plan", s.getAppPlan)
	admin.PUT("/plan", s.putAppPlan)
	admin.PUT("/overrides/:rule", s.putOverride)
	admin.DELETE("/overrides/:rule", s.deleteOverride)
}

// appPlanBody is GET /v1/admin/apps/{app_id}/plan's answer.
type appPlanBody struct {
	AppID     string                      `json:"app_id"`
	Plan      string                      `json:"plan"`
	Overrides map[string]rules.LimitsSpec `json:"overrides"`
}

func (s *Server) appPlan(app string) appPlanBody {
	p := s.deps.Limiter.Assignments().Policy(app)
	if p.Overrides == nil {
		p.Overrides = map[string]rules.LimitsSpec{}
	}
	return appPlanBody{AppID: app, Plan: p.Plan, Overrides: p.Overrides}
}

func (s *Server) getAppPlan(c echo.Context) error {
	app, err := pathParam(c, "app_id")
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.appPlan(app))
}

func (s *Server) putAppPlan(c echo.Context) error {
	app, err := pathParam(c, "app_id")
	if err != nil {
		return err
	}
	var body struct {
		Plan *string `json:"plan"`
	}
	if err := s.decodeAdminBody(c, &body); err != nil {
		return err
	}
	plan := rules.DefaultPlan
	if body.Plan != nil {
		plan = *body.Plan
	}
	if set := s.deps.Limiter.Rules(); !set.HasPlan(plan) {
		return newError(http.StatusBadRequest, "unknown_plan",
			"no plan "+strconvQuote(plan)+" in the rules in force (plans: "+strings.Join(set.PlanNames(), ", ")+")")
	}
	if err := s.deps.AppPlans.SetPlan(c.Request().Context(), app, plan); err != nil {
		return plansStoreError(err)
	}
	s.deps.Log.Info("app plan set", "app_id", app, "plan", plan)
	return c.JSON(http.StatusOK, map[string]string{"app_id": app, "plan": plan})
}

func (s *Server) putOverride(c echo.Context) error {
	app, rule, err := overridePath(c)
	if err != nil {
		return err
	}
	var spec rules.LimitsSpec
	if err := s.decodeAdminBody(c, &spec); err != nil {
		return err
	}
	ls, err := s.deps.Limiter.Rules().OverrideLimits(rule, spec)
	if err != nil {
		return newError(http.StatusBadRequest, "invalid_override", err.Error())
	}
	if err := s.deps.AppPlans.SetOverride(c.Request().Context(), app, rule, spec); err != nil {
		return plansStoreError(err)
	}
	s.deps.Log.Info("app override set", "app_id", app, "rule", rule)
	return c.JSON(http.StatusOK, map[string]any{"app_id": app, "rule": rule, "limits": ls})
}

func (s *Server) deleteOverride(c echo.Context) error {
	app, rule, err := overridePath(c)
	if err != nil {
		return err
	}
	if err := s.deps.AppPlans.DeleteOverride(c.Request().Context(), app, rule); err != nil {
		return plansStoreError(err)
	}
	s.deps.Log.Info("app override deleted", "app_id", app, "rule", rule)
	return c.NoContent(http.StatusNoContent)
}

func overridePath(c echo.Context) (app, rule string, err error) {
	if app, err = pathParam(c, "app_id"); err != nil {
		return "", "", err
	}
	rule = c.Param("rule")
	if !rules.ValidName(rule) {
		return "", "", newError(http.StatusBadRequest, "invalid_rule", "rule must match [a-z][a-z0-9_]{0,31}")
	}
	return app, rule, nil
}

// decodeAdminBody reads a small JSON object, refusing unknown fields.
func (s *Server) decodeAdminBody(c echo.Context, v any) error {
	body, release, err := s.readEchoBody(c)
	if err != nil {
		return err
	}
	defer release()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return newError(http.StatusBadRequest, "invalid_json", "body: "+err.Error())
	}
	return nil
}

func plansStoreError(err error) error {
	if errors.Is(err, appplans.ErrUnavailable) {
		return newError(http.StatusServiceUnavailable, "plans_store_unavailable",
			"the shared plans store is unreachable; nothing changed on any instance")
	}
	return err
}

// usageLimit is one limit of GET /v1/apps/{app_id}/usage.
type usageLimit struct {
	Rule         string `json:"rule"`
	Window       string `json:"window"`
	Limit        int64  `json:"limit"`
	Used         int64  `json:"used"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	Tier         string `json:"tier,omitempty"`
}

// usage answers {"app_id","plan","limits":[...]}: every limit whose
// dimensions the app id and the query's dimensions fill, counting nothing.
func (s *Server) usage(c echo.Context) error {
	app, err := pathParam(c, "app_id")
	if err != nil {
		return err
	}
	dims, err := usageDims(app, c.QueryParams())
	if err != nil {
		return err
	}
	d, err := s.deps.Limiter.Usage(c.Request().Context(), dims)
	if err != nil {
		s.deps.Log.Warn("usage undecided", "app_id", app, "err", err)
		return newError(http.StatusServiceUnavailable, "store_unavailable", "the counters' store did not answer")
	}
	set := s.deps.Limiter.Rules()
	plan := s.deps.Limiter.Assignments().Policy(app).Plan
	if !set.HasPlan(plan) {
		plan = rules.DefaultPlan
	}
	out := make([]usageLimit, len(d.Entries))
	for i, e := range d.Entries {
		out[i] = usageLimit{
			Rule: e.Rule, Window: rules.Duration(e.Window).String(), Limit: e.Limit,
			Used: max(0, e.Limit-e.Remaining), Remaining: max(0, e.Remaining),
			ResetAfterMs: e.ResetAfter.Milliseconds(), Tier: string(e.Tier),
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"app_id": app, "plan": plan, "limits": out})
}

// usageDims is app_id plus each query parameter as a dimension.
func usageDims(app string, q map[string][]string) ([]limiter.Dim, error) {
	dims := []limiter.Dim{{Name: "app_id", Value: app}}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vals := q[name]
		switch {
		case name == "app_id":
			return nil, newError(http.StatusBadRequest, "invalid_dimension", "app_id is the path's")
		case !rules.ValidName(name) || name == "cost" || name == "dry_run" || name == "report":
			return nil, newError(http.StatusBadRequest, "invalid_dimension", "query parameter "+strconvQuote(name)+" is not a dimension name ([a-z][a-z0-9_]{0,31}, not cost, dry_run or report)")
		case len(vals) != 1 || !rules.ValidValue(vals[0]):
			return nil, newError(http.StatusBadRequest, "invalid_dimension", "dimension "+name+" needs one value of 1 to 256 bytes of UTF-8")
		}
		dims = append(dims, limiter.Dim{Name: name, Value: vals[0]})
	}
	return dims, nil
}

// plansStillAssigned refuses rules that drop a plan some app is on: its
// apps would silently fall back to the rules' own limits.
func plansStillAssigned(set *rules.Set, a *rules.Assignments) error {
	if a == nil {
		return nil
	}
	on := map[string]int{}
	for _, plan := range a.Plans {
		if !set.HasPlan(plan) {
			on[plan]++
		}
	}
	for _, plan := range slices.Sorted(maps.Keys(on)) {
		return fmt.Errorf("plan %q is dropped but %d app(s) are on it: move them first (PUT /v1/admin/apps/{app_id}/plan)", plan, on[plan])
	}
	return nil
}

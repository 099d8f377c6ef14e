package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/api/dashboard"
	"github.com/quota-platform/quota/api/decide"
)

// maxUniqueDays bounds GET /v1/apps/{app_id}/uniques.
const maxUniqueDays = 366

// analyticsRoutes adds the stats API, app keys and the dashboard when
// analytics is configured.
func (s *Server) analyticsRoutes(e *echo.Echo) {
	if s.deps.Analytics == nil {
		return
	}
	e.GET("/v1/apps", s.listApps)
	app := e.Group("/v1/apps/:app_id", s.requireAppAccess)
	app.GET("/stats", s.appStats)
	app.GET("/interfaces/:interface_id/stats", s.interfaceStats)
	app.GET("/users/:user_id/stats", s.userStats)
	app.GET("/series", s.series)
	app.GET("/series.svg", s.seriesSVG)
	app.GET("/uniques", s.uniques)
	app.GET("/throttled", s.throttled)
	if s.deps.Keys != nil {
		e.POST("/v1/admin/apps", s.createApp, s.requireAdmin)
	}
	dashboard.Routes(e)
}

// pathParam is a path parameter, unescaped (an id may hold '/' or ' ' as
// %2F or %20), checked to be 1–256 bytes of UTF-8.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath != "" {
		if u, err := url.PathUnescape(v); err == nil {
			v = u
		}
	}
	if err := checkID(name, v); err != nil {
		return "", err
	}
	return v, nil
}

func checkID(name, v string) error {
	if v == "" || len(v) > 256 || !utf8.ValidString(v) {
		return newError(http.StatusBadRequest, "invalid_"+name, name+" must be 1 to 256 bytes of UTF-8")
	}
	return nil
}

// caller says who the bearer token belongs to: the admin, an app, or no one
// (401). A store error is a 503.
func (s *Server) caller(c echo.Context) (app string, admin bool, err error) {
	tok := bearer(echoExchange{s, c})
	if tok == "" {
		return "", false, newError(http.StatusUnauthorized, "unauthorized", "stats need an app key or the admin token as Authorization: Bearer")
	}
	if decide.SameToken(tok, s.deps.Settings.AdminToken) {
		return "", true, nil
	}
	if s.deps.Keys == nil { // no app keys: the admin token only
		return "", false, newError(http.StatusUnauthorized, "unauthorized", "the token is not the admin token")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	app, ok, err := s.deps.Keys.App(ctx, tok)
	if err != nil {
		s.deps.Log.Warn("app key lookup failed", "err", err)
		return "", false, newError(http.StatusServiceUnavailable, "store_unavailable", "app keys cannot be checked right now; retry shortly")
	}
	if !ok {
		return "", false, newError(http.StatusUnauthorized, "unauthorized", "the key is neither an app key nor the admin token")
	}
	return app, false, nil
}

// requireAppAccess lets the admin token read every app, and an app's key
// only its own app (403 for another).
func (s *Server) requireAppAccess(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		app, err := pathParam(c, "app_id")
		if err != nil {
			return err
		}
		own, admin, err := s.caller(c)
		if err != nil {
			return err
		}
		if !admin && own != app {
			return newError(http.StatusForbidden, "forbidden", "this key belongs to another app")
		}
		c.Set("app_id", app)
		return next(c)
	}
}

// statsDay is the date query parameter; today (UTC) when absent.
func (s *Server) statsDay(c echo.Context) (analytics.Day, string, error) {
	q := c.QueryParam("date")
	if q == "" {
		d := s.deps.Analytics.Today()
		return d, d.String(), nil
	}
	d, err := analytics.ParseDay(q)
	if err != nil {
		return 0, "", newError(http.StatusBadRequest, "invalid_date", "date "+strconvQuote(q)+" is not a date: want YYYY-MM-DD (UTC)")
	}
	return d, q, nil
}

func strconvQuote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return string(appendJSONString(nil, s))
}

type ifaceJSON struct {
	InterfaceID string `json:"interface_id"`
	Calls       int64  `json:"calls"`
	Allowed     int64  `json:"allowed"`
	Denied      int64  `json:"denied"`
}

func ifacesJSON(l []analytics.InterfaceCounts) []ifaceJSON {
	out := make([]ifaceJSON, len(l))
	for i, ic := range l {
		out[i] = ifaceJSON{ic.InterfaceID, ic.Calls, ic.Allowed, ic.Denied}
	}
	return out
}

func (s *Server) storeError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	s.deps.Log.Warn("analytics query failed", "err", err)
	return newError(http.StatusServiceUnavailable, "store_unavailable", "the analytics store is unreachable; retry shortly")
}

func (s *Server) queryCtx(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), 10*time.Second)
}

func (s *Server) appStats(c echo.Context) error {
	app := c.Get("app_id").(string)
	day, date, err := s.statsDay(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	st, err := s.deps.Analytics.AppDay(ctx, app, day)
	if err != nil {
		return s.storeError(err)
	}
	return c.JSON(http.StatusOK, struct {
		AppID       string      `json:"app_id"`
		Date        string      `json:"date"`
		Calls       int64       `json:"calls"`
		Allowed     int64       `json:"allowed"`
		Denied      int64       `json:"denied"`
		UniqueUsers int64       `json:"unique_users"`
		Interfaces  []ifaceJSON `json:"interfaces"`
	}{app, date, st.Calls, st.Allowed, st.Denied, st.UniqueUsers, ifacesJSON(st.Interfaces)})
}

func (s *Server) interfaceStats(c echo.Context) error {
	app := c.Get("app_id").(string)
	iface, err := pathParam(c, "interface_id")
	if err != nil {
		return err
	}
	day, date, err := s.statsDay(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	st, err := s.deps.Analytics.InterfaceDay(ctx, app, iface, day)
	if err != nil {
		return s.storeError(err)
	}
	return c.JSON(http.StatusOK, struct {
		AppID       string `json:"app_id"`
		InterfaceID string `json:"interface_id"`
		Date        string `json:"date"`
		Calls       int64  `json:"calls"`
		Allowed     int64  `json:"allowed"`
		Denied      int64  `json:"denied"`
		UniqueUsers int64  `json:"unique_users"`
	}{app, iface, date, st.Calls, st.Allowed, st.Denied, st.UniqueUsers})
}

func (s *Server) userStats(c echo.Context) error {
	app := c.Get("app_id").(string)
	user, err := pathParam(c, "user_id")
	if err != nil {
		return err
	}
	day, date, err := s.statsDay(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	st, err := s.deps.Analytics.UserDay(ctx, app, user, day)
	if err != nil {
		return s.storeError(err)
	}
	return c.JSON(http.StatusOK, struct {
		AppID      string      `json:"app_id"`
		UserID     string      `json:"user_id"`
		Date       string      `json:"date"`
		Calls      int64       `json:"calls"`
		Allowed    int64       `json:"allowed"`
		Denied     int64       `json:"denied"`
		Interfaces []ifaceJSON `json:"interfaces"`
	}{app, user, date, st.Calls, st.Allowed, st.Denied, ifacesJSON(st.Interfaces)})
}

// seriesQuery reads interface_id, from, to (RFC 3339; default the last 24
// hours) and resolution (default: by the age of from, as retention keeps
// points).
func (s *Server) seriesQuery(c echo.Context) (analytics.SeriesQuery, error) {
	q := analytics.SeriesQuery{App: c.Get("app_id").(string)}
	if v := c.QueryParam("interface_id"); v != "" {
		if err := checkID("interface_id", v); err != nil {
			return q, err
		}
		q.Interface, q.ByInterface = v, true
	}
	now := s.deps.Analytics.Now()
	q.To = now
	if v := c.QueryParam("to"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return q, newError(http.StatusBadRequest, "invalid_time", "to "+strconvQuote(v)+" is not an RFC 3339 time (e.g. 2026-11-23T10:00:00Z)")
		}
		q.To = t
	}
	q.From = q.To.Add(-24 * time.Hour)
	if v := c.QueryParam("from"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return q, newError(http.StatusBadRequest, "invalid_time", "from "+strconvQuote(v)+" is not an RFC 3339 time (e.g. 2026-11-22T10:00:00Z)")
		}
		q.From = t
	}
	if q.From.After(q.To) {
		return q, newError(http.StatusBadRequest, "invalid_range", "from is after to")
	}
	q.Res = analytics.ResolutionFor(q.From, now)
	if v := c.QueryParam("resolution"); v != "" {
		r, ok := analytics.ParseResolution(v)
		if !ok {
			return q, newError(http.StatusBadRequest, "invalid_resolution", "resolution "+strconvQuote(v)+": want 1m, 5m, 1h or 1w")
		}
		q.Res = r
	}
	if n := analytics.Points(q.From, q.To, q.Res); n > analytics.MaxPoints {
		return q, newError(http.StatusBadRequest, "range_too_long",
			"from "+q.From.UTC().Format(time.RFC3339)+" to "+q.To.UTC().Format(time.RFC3339)+" is over a year at "+q.Res.String()+" resolution: ask a shorter range or a coarser resolution")
	}
	return q, nil
}

type pointJSON struct {
	T       string `json:"t"`
	Calls   int64  `json:"calls"`
	Allowed int64  `json:"allowed"`
	Denied  int64  `json:"denied"`
}

func (s *Server) series(c echo.Context) error {
	q, err := s.seriesQuery(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	pts, err := s.deps.Analytics.Series(ctx, q)
	if err != nil {
		return s.storeError(err)
	}
	out := make([]pointJSON, len(pts))
	for i, p := range pts {
		out[i] = pointJSON{time.Unix(p.T, 0).UTC().Format(time.RFC3339), p.Calls, p.Allowed, p.Denied}
	}
	var iface *string
	if q.ByInterface {
		iface = &q.Interface
	}
	return c.JSON(http.StatusOK, struct {
		AppID       string      `json:"app_id"`
		InterfaceID *string     `json:"interface_id,omitempty"`
		From        string      `json:"from"`
		To          string      `json:"to"`
		Resolution  string      `json:"resolution"`
		Points      []pointJSON `json:"points"`
	}{q.App, iface, q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339), q.Res.String(), out})
}

// seriesSVG draws the call curve that GET …/series answers as an SVG chart
// (same query parameters), so the dashboard needs no chart library.
func (s *Server) seriesSVG(c echo.Context) error {
	q, err := s.seriesQuery(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	pts, err := s.deps.Analytics.Series(ctx, q)
	if err != nil {
		return s.storeError(err)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(http.StatusOK, "image/svg+xml; charset=utf-8", dashboard.Chart(pts, q.Res))
}

// uniques answers the distinct users of an app over a range of days
// (from..to inclusive, YYYY-MM-DD), merging the daily HyperLogLogs.
func (s *Server) uniques(c echo.Context) error {
	app := c.Get("app_id").(string)
	today := s.deps.Analytics.Today()
	from, to := today-6, today
	for _, p := range []struct {
		name string
		dst  *analytics.Day
	}{{"from", &from}, {"to", &to}} {
		if v := c.QueryParam(p.name); v != "" {
			d, err := analytics.ParseDay(v)
			if err != nil {
				return newError(http.StatusBadRequest, "invalid_date", p.name+" "+strconvQuote(v)+" is not a date: want YYYY-MM-DD (UTC)")
			}
			*p.dst = d
		}
	}
	if from > to {
		return newError(http.StatusBadRequest, "invalid_range", "from is after to")
	}
	if to-from >= maxUniqueDays {
		return newError(http.StatusBadRequest, "range_too_long", "at most 366 days of distinct users at once")
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	n, err := s.deps.Analytics.Uniques(ctx, app, from, to)
	if err != nil {
		return s.storeError(err)
	}
	return c.JSON(http.StatusOK, map[string]any{"app_id": app, "from": from.String(), "to": to.String(), "unique_users": n})
}

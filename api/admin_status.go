package api

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/fleet"
)

// StatusSource gathers an instance's status and what it sees of the fleet
// (fleet.Source in quotad).
type StatusSource interface {
	Status(ctx context.Context, scope string) fleet.Status
}

func (s *Server) statusRoutes(e *echo.Echo) {
	e.GET("/v1/admin/status", s.getStatus, s.requireAdmin)
}

// getStatus answers fleet.Status: ?scope=instance for this instance only
// (what quotactl status asks every other instance), else also what this
// instance sees of the fleet. Readiness is /readyz's, with its reasons.
func (s *Server) getStatus(c echo.Context) error {
	if s.deps.Status == nil {
		return newError(http.StatusNotFound, "status_unavailable", "this instance serves no status")
	}
	scope := c.QueryParam("scope")
	switch scope {
	case "", "fleet", "instance":
	default:
		return newError(http.StatusBadRequest, "bad_scope", "scope must be fleet or instance, got "+scope)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 5*time.Second)
	defer cancel()
	st := s.deps.Status.Status(ctx, scope)
	in := &st.Instance
	in.FailMode, in.State, in.Ready = string(s.deps.Settings.FailMode), "serving", true
	if s.draining.Load() {
		in.State, in.Ready, in.NotReady = "draining", false, "shutting down, finishing the requests in flight"
		return c.JSON(http.StatusOK, st)
	}
	in.Checks = map[string]string{}
	var failed []string
	for _, rc := range s.deps.Ready {
		if err := rc.Check(ctx); err != nil {
			in.Checks[rc.Name] = err.Error()
			failed = append(failed, rc.Name)
		} else {
			in.Checks[rc.Name] = "ok"
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		why := strings.Join(failed, ", ") + " unreachable"
		if s.deps.Settings.FailMode == config.FailOpen {
			// As /readyz: open mode stays ready, its checks unenforced.
			in.NotReady = "degraded: " + why + " (fail mode open: checks answered unenforced)"
		} else {
			in.Ready, in.NotReady = false, why
		}
	}
	return c.JSON(http.StatusOK, st)
}

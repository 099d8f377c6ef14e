package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/migrate/jobs"
	"github.com/quota-platform/quota/migrate/worker"
)

// JobsAdmin is the job resource of the long admin jobs (a migration
// cycle, a cold filter rebuild or compaction) and the fleet's cycle
// (worker.Admin in quotad). A Deps.Tiers that implements it gets the
// routes below.
type JobsAdmin interface {
	// StartJob starts a job of kind in the background and returns it (the
	// one running, if any).
	StartJob(ctx context.Context, kind string) (jobs.JobView, error)
	Job(id string) (jobs.JobView, bool)
	Jobs() []jobs.JobView
	// FleetCycle is the cycle running now or the last (nil: none known).
	FleetCycle(ctx context.Context) (*jobs.FleetProgress, error)
}

func (s *Server) jobsAdmin() (JobsAdmin, error) {
	if s.deps.Tiers == nil {
		return nil, s.tiersOff()
	}
	ja, ok := s.deps.Tiers.(JobsAdmin)
	if !ok {
		return nil, newError(http.StatusNotFound, "jobs_unavailable", "this instance keeps no job progress")
	}
	return ja, nil
}

func (s *Server) jobsRoutes(e *echo.Echo) {
	e.GET("/v1/admin/jobs", s.getJobs, s.requireAdmin)
	e.POST("/v1/admin/jobs", s.postJob, s.requireAdmin)
	e.GET("/v1/admin/jobs/:id", s.getJob, s.requireAdmin)
	e.GET("/v1/admin/cycle", s.getCycle, s.requireAdmin)
}

// wantsAsync reports whether a POST that starts a job asks for the job at
// once (Prefer: respond-async, RFC 7240, or ?wait=false) rather than for
// its result when it ends (the default, as before).
func wantsAsync(c echo.Context) (bool, error) {
	switch c.QueryParam("wait") {
	case "false", "0":
		return true, nil
	case "", "true", "1":
	default:
		return false, newError(http.StatusBadRequest, "bad_wait", "wait must be true or false, got "+c.QueryParam("wait"))
	}
	for _, v := range c.Request().Header.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "respond-async") {
				return true, nil
			}
		}
	}
	return false, nil
}

// async reports whether a POST that starts a job is to answer the job at
// once: asked for (wantsAsync), and this instance keeps jobs (else it
// answers the result when the job ends, as it always did).
func (s *Server) async(c echo.Context) (bool, error) {
	want, err := wantsAsync(c)
	if err != nil || !want {
		return false, err
	}
	_, ok := s.deps.Tiers.(JobsAdmin)
	return ok, nil
}

// startAsync answers 202 with the job started, and its URL in Location.
func (s *Server) startAsync(c echo.Context, kind string) error {
	ja, err := s.jobsAdmin()
	if err != nil {
		return err
	}
	v, err := ja.StartJob(c.Request().Context(), kind)
	if err != nil {
		if errors.Is(err, worker.ErrUnknownJobKind) {
			return newError(http.StatusBadRequest, "bad_kind", err.Error())
		}
		return newError(http.StatusServiceUnavailable, "job_not_started", err.Error())
	}
	s.deps.Log.Info("admin job started", "job", v.ID, "kind", kind)
	c.Response().Header().Set("Location", "/v1/admin/jobs/"+v.ID)
	return c.JSON(http.StatusAccepted, v)
}

// postJob starts {"kind": "migrate" | "rebuild-filters" | "compact-filters"}
// and answers 202 with the job.
func (s *Server) postJob(c echo.Context) error {
	var body struct {
		Kind string `json:"kind"`
	}
	if err := c.Bind(&body); err != nil {
		return newError(http.StatusBadRequest, "bad_request", "want {\"kind\": \"migrate\" | \"rebuild-filters\" | \"compact-filters\"}")
	}
	if body.Kind == "" {
		return newError(http.StatusBadRequest, "bad_kind", "kind is required: migrate, rebuild-filters or compact-filters")
	}
	return s.startAsync(c, body.Kind)
}

// getJobs answers {"jobs": [...newest first], "cycle": the fleet's current
// or last cycle, or null}.
func (s *Server) getJobs(c echo.Context) error {
	ja, err := s.jobsAdmin()
	if err != nil {
		return err
	}
	out := map[string]any{"jobs": ja.Jobs(), "cycle": nil}
	if fp, err := ja.FleetCycle(c.Request().Context()); err == nil && fp != nil {
		out["cycle"] = fp
	} else if err != nil {
		out["cycle_error"] = err.Error()
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) getJob(c echo.Context) error {
	ja, err := s.jobsAdmin()
	if err != nil {
		return err
	}
	v, ok := ja.Job(c.Param("id"))
	if !ok {
		return newError(http.StatusNotFound, "job_not_found", "no job "+c.Param("id")+" on this instance (jobs are kept by the instance that runs them, the last 32)")
	}
	return c.JSON(http.StatusOK, v)
}

// getCycle answers the fleet's current or last migration cycle.
func (s *Server) getCycle(c echo.Context) error {
	ja, err := s.jobsAdmin()
	if err != nil {
		return err
	}
	fp, err := ja.FleetCycle(c.Request().Context())
	if err != nil {
		return newError(http.StatusServiceUnavailable, "cycle_unavailable", "cycle progress: "+err.Error())
	}
	if fp == nil {
		return newError(http.StatusNotFound, "no_cycle", "no migration cycle runs, and none ended in the last two days")
	}
	return c.JSON(http.StatusOK, fp)
}

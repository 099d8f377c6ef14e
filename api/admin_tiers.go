package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/migrate/jobs"
)

// migrateWriteTimeout replaces the server's WriteTimeout (10 s in quotad)
// for POST /v1/admin/migrate and the filter rebuild and compaction: a job
// over many cells takes hours, and the connection must not be cut before
// its report is written (the endpoints are the admin's only).
const migrateWriteTimeout = 24 * time.Hour

// TiersAdmin is the migration worker as the admin endpoints see it
// (worker.Admin in quotad).
type TiersAdmin interface {
	// TierStats returns the tiers' cells and bytes (JSON-encodable).
	TierStats(ctx context.Context) (any, error)
	// Migrate runs one migration cycle now and returns what it moved.
	Migrate(ctx context.Context) (any, error)
	// RebuildColdFilters puts every cold cell back in its app's cold
	// filter (after Redis lost data) and returns how many it covered.
	RebuildColdFilters(ctx context.Context) (any, error)
	// CompactColdFilters rebuilds each cold filter as one layer of the
	// cells cold now and returns what it did.
	CompactColdFilters(ctx context.Context) (any, error)
}

func (s *Server) tiersRoutes(e *echo.Echo) {
	e.GET("/v1/admin/tiers", s.getTiers, s.requireAdmin)
	e.POST("/v1/admin/migrate", s.postMigrate, s.requireAdmin)
	e.POST("/v1/admin/tiers/rebuild-filters", s.postRebuildFilters, s.requireAdmin)
	e.POST("/v1/admin/tiers/compact-filters", s.postCompactFilters, s.requireAdmin)
	s.jobsRoutes(e)
}

func (s *Server) tiersOff() error {
	return newError(http.StatusNotFound, "tiering_off", "storage tiering is off (QUOTA_TIERING=off)")
}

// getTiers answers {"hot":{"identities":N,"bytes":N},"warm":{...},"cold":{...},...}.
func (s *Server) getTiers(c echo.Context) error {
	if s.deps.Tiers == nil {
		return s.tiersOff()
	}
	st, err := s.deps.Tiers.TierStats(c.Request().Context())
	if err != nil {
		s.deps.Log.Error("tier stats", "err", err)
		return newError(http.StatusServiceUnavailable, "tiers_unavailable", "tier statistics failed: "+err.Error())
	}
	return c.JSON(http.StatusOK, st)
}

// postMigrate runs a migration cycle and answers its report; a cycle with
// failures still answers 200 with them listed (the next run repairs).
func (s *Server) postMigrate(c echo.Context) error {
	if s.deps.Tiers == nil {
		return s.tiersOff()
	}
	if async, err := s.async(c); err != nil || async {
		if err != nil {
			return err
		}
		return s.startAsync(c, jobs.KindMigrate)
	}
	s.extendWriteDeadline(c, "migration cycle")
	rep, err := s.deps.Tiers.Migrate(detached(c))
	if err != nil && rep == nil {
		s.deps.Log.Error("migration cycle", "err", err)
		return newError(http.StatusServiceUnavailable, "migration_failed", "migration cycle failed: "+err.Error())
	}
	s.deps.Log.Info("migration cycle done", "report", rep)
	return c.JSON(http.StatusOK, rep)
}

// postRebuildFilters answers {"cells": N}: the cold cells now held by their
// filters. Like a cycle, it reads all of cell_activity.
func (s *Server) postRebuildFilters(c echo.Context) error {
	if s.deps.Tiers == nil {
		return s.tiersOff()
	}
	if async, err := s.async(c); err != nil || async {
		if err != nil {
			return err
		}
		return s.startAsync(c, jobs.KindRebuild)
	}
	s.extendWriteDeadline(c, "cold filter rebuild")
	rep, err := s.deps.Tiers.RebuildColdFilters(detached(c))
	if err != nil {
		s.deps.Log.Error("cold filter rebuild", "err", err)
		return newError(http.StatusServiceUnavailable, "rebuild_failed", "cold filter rebuild failed: "+err.Error())
	}
	s.deps.Log.Info("cold filter rebuild done", "report", rep)
	return c.JSON(http.StatusOK, rep)
}

// postCompactFilters answers worker.CompactReport. Like a cycle, it reads
// all of cell_activity.
func (s *Server) postCompactFilters(c echo.Context) error {
	if s.deps.Tiers == nil {
		return s.tiersOff()
	}
	if async, err := s.async(c); err != nil || async {
		if err != nil {
			return err
		}
		return s.startAsync(c, jobs.KindCompact)
	}
	s.extendWriteDeadline(c, "cold filter compaction")
	rep, err := s.deps.Tiers.CompactColdFilters(detached(c))
	if err != nil {
		s.deps.Log.Error("cold filter compaction", "err", err)
		return newError(http.StatusServiceUnavailable, "compaction_failed", "cold filter compaction failed: "+err.Error())
	}
	s.deps.Log.Info("cold filter compaction done", "report", rep)
	return c.JSON(http.StatusOK, rep)
}

// detached is the request's context without its cancellation: a long
// admin job (a cycle, a rebuild, a compaction) runs to its end when the
// caller goes away (a client timeout, a dropped connection), rather than
// stopping half done; its outcome is logged either way.
func detached(c echo.Context) context.Context {
	return context.WithoutCancel(c.Request().Context())
}

// extendWriteDeadline gives a long admin job (a cycle, a rebuild) the time
// to write its answer, past the server's WriteTimeout.
func (s *Server) extendWriteDeadline(c echo.Context, what string) {
	if err := http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(migrateWriteTimeout)); err != nil {
		s.deps.Log.Warn(what+": cannot extend the write deadline; a long run's answer may be cut", "err", err)
	}
}

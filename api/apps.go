package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/apps"
)

// maxListedApps bounds GET /v1/apps.
const maxListedApps = 10000

// listApps answers the apps the caller may read: every app with a key or
// recent calls for the admin, the key's own app for an app key.
//
//	GET /v1/apps → {"admin": bool, "apps": [{"app_id": "…"}, …]}
func (s *Server) listApps(c echo.Context) error {
	own, admin, err := s.caller(c)
	if err != nil {
		return err
	}
	type appJSON struct {
		AppID string `json:"app_id"`
	}
	list := []appJSON{}
	if admin {
		ctx, cancel := s.queryCtx(c)
		defer cancel()
		ids, err := s.deps.Analytics.Apps(ctx, maxListedApps)
		if err != nil {
			return s.storeError(err)
		}
		if s.deps.Keys != nil {
			keyed, err := s.deps.Keys.List(ctx)
			if err != nil {
				return s.storeError(err)
			}
			ids = slices.Compact(slices.Sorted(slices.Values(append(ids, keyed...))))
			ids = ids[:min(len(ids), maxListedApps)]
		}
		for _, id := range ids {
			list = append(list, appJSON{id})
		}
	} else {
		list = append(list, appJSON{own})
	}
	return c.JSON(http.StatusOK, map[string]any{"admin": admin, "apps": list})
}

// createApp mints an app's key (admin only).
//
//	POST /v1/admin/apps {"app_id": "a1"}                → 201 {"app_id", "key"}
//	POST /v1/admin/apps {"app_id": "a1", "rotate": true} → 201, the old key stops working
//
// An app that has a key already is a 409 without "rotate": a key is shown
// once, so a second POST must not silently replace the one in use.
func (s *Server) createApp(c echo.Context) error {
	body, release, err := s.readEchoBody(c)
	if err != nil {
		return err
	}
	var req struct {
		AppID  *string `json:"app_id"`
		Rotate bool    `json:"rotate"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(&req)
	release()
	if err != nil || dec.More() {
		return newError(http.StatusBadRequest, "invalid_body", `the body must be {"app_id": "…"} (and optionally "rotate": true)`)
	}
	if req.AppID == nil {
		return newError(http.StatusBadRequest, "invalid_body", "app_id is missing")
	}
	if err := checkID("app_id", *req.AppID); err != nil {
		return err
	}
	ctx, cancel := s.queryCtx(c)
	defer cancel()
	key, err := s.deps.Keys.Create(ctx, *req.AppID, req.Rotate)
	if errors.Is(err, apps.ErrAppExists) {
		return newError(http.StatusConflict, "app_exists", "app "+strconvQuote(*req.AppID)+` has a key already; send "rotate": true to replace it`)
	}
	if err != nil {
		return s.storeError(err)
	}
	return c.JSON(http.StatusCreated, map[string]string{"app_id": *req.AppID, "key": key})
}

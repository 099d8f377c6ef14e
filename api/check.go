package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/api/checkjson"
	"github.com/quota-platform/quota/api/decide"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/rulesync"
)

// HeaderEnforced is set to "false" on a check answered without a decision
// because the store was unreachable and QUOTA_FAIL_MODE is open.
const HeaderEnforced = "Quota-Enforced"

func (s *Server) authorizeCheck(x exchange) error {
	if s.deps.Settings.CheckToken == "" {
		return nil
	}
	return s.checkToken(bearer(x))
}

// checkToken compares tok, as the caller found it, with QUOTA_CHECK_TOKEN.
func (s *Server) checkToken(tok string) error {
	if tok == "" {
		return newError(http.StatusUnauthorized, "unauthorized", "checks need the check token as Authorization: Bearer (or X-Quota-Token on /v1/auth)")
	}
	if !decide.SameToken(tok, s.deps.Settings.CheckToken) {
		return newError(http.StatusUnauthorized, "unauthorized", "the check token is wrong")
	}
	return nil
}

func (s *Server) check(c echo.Context) error      { return s.serveCheck(echoExchange{s, c}) }
func (s *Server) checkBatch(c echo.Context) error { return s.serveBatch(echoExchange{s, c}) }

// serveCheck answers POST /v1/check.
func (s *Server) serveCheck(x exchange) error {
	if err := s.authorizeCheck(x); err != nil {
		return err
	}
	body, release, err := s.readBody(x)
	if err != nil {
		return err
	}
	req, err := checkjson.DecodeCheck(body)
	release()
	if err != nil {
		return err
	}
	return s.decide(x, &req, http.StatusTooManyRequests)
}

// decide runs one check and answers it: 200 when allowed, denyStatus when
// denied, with the rate-limit headers; metrics, analytics and the fail
// mode are the same whichever entry point decoded req.
func (s *Server) decide(x exchange, req *limiter.Request, denyStatus int) error {
	d, err := s.core.Check(x.context(), req)
	if err != nil {
		return s.storeFailure(x, err, 0)
	}
	s.core.Decided(req, &d)
	status := http.StatusOK
	if !d.Allowed {
		status = denyStatus
	}
	var h answerHeaders
	s.rateLimitHeaders(&h, &d)
	return x.answer(status, h, appendDecision(x.answerBuffer(), &d))
}

// serveBatch answers POST /v1/check/batch.
func (s *Server) serveBatch(x exchange) error {
	if err := s.authorizeCheck(x); err != nil {
		return err
	}
	body, release, err := s.readBody(x)
	if err != nil {
		return err
	}
	reqs, err := checkjson.DecodeBatch(body)
	release()
	if err != nil {
		return err
	}
	ptrs := make([]*limiter.Request, len(reqs))
	for i := range reqs {
		ptrs[i] = &reqs[i]
	}
	ds, err := s.core.CheckBatch(x.context(), ptrs)
	if err != nil {
		return s.storeFailure(x, err, len(reqs))
	}
	b := make([]byte, 0, 64+160*len(ds))
	b = append(b, `{"results":[`...)
	for i := range ds {
		s.core.Decided(&reqs[i], &ds[i])
		if i > 0 {
			b = append(b, ',')
		}
		b = appendDecision(b, &ds[i])
	}
	b = append(b, "]}\n"...)
	return x.answer(http.StatusOK, answerHeaders{}, b)
}

// storeFailure applies QUOTA_FAIL_MODE to checks the store could not
// decide; batch is the number of items of a batch (0 for a single check).
func (s *Server) storeFailure(x exchange, err error, batch int) error {
	if !s.core.Undecided(err, max(batch, 1)) {
		return newError(http.StatusServiceUnavailable, "store_unavailable", "the counter store is unreachable; no decision could be made")
	}
	var h answerHeaders
	h.add(HeaderEnforced, []byte("false"))
	const item = `{"allowed":true,"rules":[],"enforced":false}`
	if batch == 0 {
		return x.answer(http.StatusOK, h, append(x.answerBuffer(), item+"\n"...))
	}
	b := make([]byte, 0, 16+len(item)*batch)
	b = append(b, `{"results":[`...)
	for i := 0; i < batch; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, item...)
	}
	return x.answer(http.StatusOK, h, append(b, "]}\n"...))
}

// rateLimitHeaders adds the rate-limit headers QUOTA_HEADERS asks for
// (legacy, draft or both) and, on a denial, Retry-After.
func (s *Server) rateLimitHeaders(h *answerHeaders, d *limiter.Decision) {
	style := s.deps.Settings.Headers
	legacyHeaders(h, d, style.Legacy())
	if style.Draft() {
		draftHeaders(h, d)
	}
}

// legacyHeaders adds RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset of the most restrictive entry (when limits is true) and,
// on a denial, Retry-After.
func legacyHeaders(h *answerHeaders, d *limiter.Decision, limits bool) {
	if i := d.MostRestrictive(); i >= 0 && limits {
		e := &d.Entries[i]
		h.addInt("Ratelimit-Limit", e.Limit)
		h.addInt("Ratelimit-Remaining", e.Remaining)
		h.addInt("Ratelimit-Reset", decide.CeilSeconds(e.ResetAfter))
	}
	if !d.Allowed {
		h.addInt("Retry-After", max(1, decide.CeilSeconds(d.RetryAfter())))
	}
}

func appendDecision(b []byte, d *limiter.Decision) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"rules":[`...)
	for i := range d.Entries {
		e := &d.Entries[i]
		if i > 0 {
			b = append(b, ',')
		}
		// Rule names match [a-z][a-z0-9_]*, so they need no escaping.
		b = append(b, `{"rule":"`...)
		b = append(b, e.Rule...)
		b = append(b, `","window":"`...)
		b = rules.Duration(e.Window).Append(b)
		b = append(b, `","limit":`...)
		b = strconv.AppendInt(b, e.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, e.Remaining, 10)
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, e.ResetAfter.Milliseconds(), 10)
		if !e.Allowed {
			b = append(b, `,"retry_after_ms":`...)
			b = strconv.AppendInt(b, e.RetryAfter.Milliseconds(), 10)
		}
		b = append(b, `,"tier":"`...)
		b = append(b, e.Tier...)
		b = append(b, `","allowed":`...)
		b = strconv.AppendBool(b, e.Allowed)
		if e.Shadow {
			b = append(b, `,"shadow":true`...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// jsonContentType is the Content-Type header's value, shared by every answer
// (cap 1: an Add by anyone else copies it rather than writing into it).
var jsonContentType = []string{echo.MIMEApplicationJSON}[:1:1]

func writeJSON(c echo.Context, status int, b []byte) error {
	c.Response().Header()[echo.HeaderContentType] = jsonContentType
	c.Response().WriteHeader(status)
	_, err := c.Response().Write(b)
	return err
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // marshalling a string cannot fail
	return append(b, q...)
}

func (s *Server) getRules(c echo.Context) error {
	return c.JSON(http.StatusOK, rulesBody(s.deps.Limiter.Rules()))
}

func rulesBody(set *rules.Set) map[string]any {
	body := map[string]any{"version": set.Version, "rules": set.Rules}
	if len(set.Plans) > 0 {
		body["plans"] = set.Plans
	}
	return body
}

func (s *Server) putRules(c echo.Context) error {
	body, release, err := s.readEchoBody(c)
	if err != nil {
		return err
	}
	set, err := rules.ParseJSON(body)
	release()
	if err == nil {
		err = s.deps.Limiter.CheckRules(set)
	}
	if err == nil {
		err = plansStillAssigned(set, s.deps.Limiter.Assignments())
	}
	if err != nil {
		s.deps.Metrics.RulesReloads.WithLabelValues("error").Inc()
		return newError(http.StatusBadRequest, "invalid_rules", err.Error())
	}
	if s.deps.PersistRules != nil {
		if err := s.deps.PersistRules(set); err != nil {
			s.deps.Metrics.RulesReloads.WithLabelValues("error").Inc()
			if errors.Is(err, rulesync.ErrUnavailable) {
				// Nothing changed anywhere: a change on this instance alone
				// would leave the fleet with different rules.
				return newError(http.StatusServiceUnavailable, "rules_store_unavailable",
					"the shared rules store is unreachable; the rules in force are unchanged on every instance")
			}
			return errors.Join(errors.New("persist rules"), err)
		}
	}
	if err := s.deps.Limiter.SetRules(set); err != nil {
		return newError(http.StatusBadRequest, "invalid_rules", err.Error())
	}
	s.deps.Metrics.RulesReloads.WithLabelValues("ok").Inc()
	s.deps.Metrics.SetRulesVersion(set.Version)
	s.deps.Log.Info("rules replaced", "version", set.Version, "rules", len(set.Rules))
	return c.JSON(http.StatusOK, rulesBody(set))
}

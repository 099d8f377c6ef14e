// Package echomw is httpmw's middleware for Echo: it asks quota before
// each request and answers 429 with the rate-limit headers when denied.
package echomw

import (
	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/client"
	"github.com/quota-platform/quota/client/httpmw"
)

// Middleware checks every request with c before the handler runs; opts
// are httpmw's (WithRequestFunc, WithErrorFunc).
func Middleware(c *client.Client, opts ...httpmw.Option) echo.MiddlewareFunc {
	return echo.WrapMiddleware(httpmw.Middleware(c, opts...))
}

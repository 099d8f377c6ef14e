package echomw_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/client"
	"github.com/quota-platform/quota/client/echomw"
	"github.com/quota-platform/quota/internal/testsupport/quotatest"
)

var (
	quotaSrv *quotatest.Server
	quotaURL string
)

func TestMain(m *testing.M) { quotatest.Main(m, &quotaSrv, &quotaURL) }

func ExampleMiddleware() {
	e := echo.New()
	e.Use(echomw.Middleware(client.New(quotaURL, client.WithTimeout(5*time.Second))))
	e.GET("/users", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/users", nil)
		r.Header.Set("X-User-Id", "echo-example")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit-Limit=%s RateLimit-Remaining=%s Retry-After=%q\n", w.Code,
			w.Header().Get("RateLimit-Limit"), w.Header().Get("RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Limit=2 RateLimit-Remaining=1 Retry-After=""
	// 200 RateLimit-Limit=2 RateLimit-Remaining=0 Retry-After=""
	// 429 RateLimit-Limit=2 RateLimit-Remaining=0 Retry-After="3600"
}

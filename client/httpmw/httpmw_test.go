package httpmw_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quota-platform/quota/client"
	"github.com/quota-platform/quota/client/httpmw"
	"github.com/quota-platform/quota/internal/testsupport/quotatest"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

var (
	quotaSrv *quotatest.Server
	quotaURL string
)

func TestMain(m *testing.M) { quotatest.Main(m, &quotaSrv, &quotaURL) }

func hello(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }

func ExampleMiddleware() {
	c := client.New(quotaURL, client.WithTimeout(5*time.Second), client.WithFailMode(client.FailClosed))
	h := httpmw.Middleware(c)(http.HandlerFunc(hello))
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/users", nil)
		r.Header.Set("X-User-Id", "mw-example")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit-Remaining=%s Retry-After=%q\n", w.Code, w.Header().Get("RateLimit-Remaining"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit-Remaining=1 Retry-After=""
	// 200 RateLimit-Remaining=0 Retry-After=""
	// 429 RateLimit-Remaining=0 Retry-After="3600"
}

func ExampleWithRequestFunc() {
	c := client.New(quotaURL, client.WithTimeout(5*time.Second), client.WithFailMode(client.FailClosed))
	// The app is the API key's owner; health probes are not counted.
	build := func(r *http.Request) (client.CheckRequest, bool) {
		if r.URL.Path == "/healthz" {
			return client.CheckRequest{}, false
		}
		return client.CheckRequest{Dimensions: map[string]string{"user_id": "key-" + r.Header.Get("X-Api-Key")}}, true
	}
	h := httpmw.Middleware(c, httpmw.WithRequestFunc(build))(http.HandlerFunc(hello))
	for _, path := range []string{"/a", "/healthz", "/b", "/healthz", "/c"} {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("X-Api-Key", "k-example")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(path, w.Code)
	}
	// Output:
	// /a 200
	// /healthz 200
	// /b 200
	// /healthz 200
	// /c 429
}

func TestMiddleware_ErrorsAnswer503Or400AndNeverReachTheHandler(t *testing.T) {
	t.Parallel()
	dead := "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	reached := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })
	for _, tc := range []struct {
		name   string
		c      *client.Client
		userID string
		status int
		reach  int
	}{
		{"unreachable, fail closed", client.New(dead, client.WithFailMode(client.FailClosed)), "u", 503, 0},
		{"unreachable, fail open", client.New(dead), "u", 200, 1},
		{"invalid identity", client.New(quotaURL), strings.Repeat("x", 300), 400, 0},
	} {
		reached = 0
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User-Id", tc.userID)
		w := httptest.NewRecorder()
		httpmw.Middleware(tc.c)(next).ServeHTTP(w, r)
		if w.Code != tc.status || reached != tc.reach {
			t.Errorf("%s: %d (handler ran %d times), want %d (%d)", tc.name, w.Code, reached, tc.status, tc.reach)
		}
	}
}

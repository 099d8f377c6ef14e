package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quota-platform/quota/client"
	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/quotatest"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

func user(id string) client.CheckRequest {
	return client.CheckRequest{Dimensions: map[string]string{"user_id": id}}
}

func TestClient_UnreachableQuotaFailsOpenOrClosed(t *testing.T) {
	t.Parallel()
	dead := "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	ctx := context.Background()
	hdr := http.Header{"X-User-Id": {"u"}}

	open := client.New(dead)
	d, err := open.Check(ctx, user("u"))
	if err != nil || !d.Allowed || d.Enforced || d.Err == nil {
		t.Fatalf("fail open Check: %+v %v", d, err)
	}
	if d, err := open.Auth(ctx, hdr); err != nil || !d.Allowed || d.Enforced || d.Err == nil {
		t.Fatalf("fail open Auth: %+v %v", d, err)
	}
	ds, err := open.CheckBatch(ctx, []client.CheckRequest{user("a"), user("b")})
	if err != nil || len(ds) != 2 || !ds[0].Allowed || !ds[1].Allowed || ds[1].Enforced {
		t.Fatalf("fail open CheckBatch: %+v %v", ds, err)
	}

	closed := client.New(dead, client.WithFailMode(client.FailClosed))
	if _, err := closed.Check(ctx, user("u")); err == nil {
		t.Fatal("fail closed Check: no error")
	}
	if _, err := closed.Auth(ctx, hdr); err == nil {
		t.Fatal("fail closed Auth: no error")
	}
	if _, err := closed.CheckBatch(ctx, []client.CheckRequest{user("a")}); err == nil {
		t.Fatal("fail closed CheckBatch: no error")
	}
}

// hanging accepts connections and never answers.
func hanging(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

func TestClient_TimeoutsBoundAHangingQuota(t *testing.T) {
	t.Parallel()
	url := hanging(t)
	for _, tc := range []struct {
		name    string
		c       *client.Client
		ctx     time.Duration // 0: no deadline of the caller's
		atMost  time.Duration
		atLeast time.Duration
	}{
		{"default timeout", client.New(url, client.WithFailMode(client.FailClosed)), 0, 4 * time.Second, client.DefaultTimeout},
		{"client timeout", client.New(url, client.WithFailMode(client.FailClosed), client.WithTimeout(50*time.Millisecond)), 0, 4 * time.Second, 50 * time.Millisecond},
		{"caller's deadline wins", client.New(url, client.WithFailMode(client.FailClosed), client.WithTimeout(time.Minute)), 80 * time.Millisecond, 4 * time.Second, 80 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The clock starts before the caller's deadline is set, so the
			// deadline can never fall before began+atLeast.
			began := time.Now()
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			_, err := tc.c.Check(ctx, user("u"))
			took := time.Since(began)
			if !errors.Is(err, context.DeadlineExceeded) || took < tc.atLeast || took > tc.atMost {
				t.Fatalf("took %s (want %s..%s), err %v", took, tc.atLeast, tc.atMost, err)
			}
		})
	}
}

func TestClient_BadRequestIsAnAPIErrorEvenUnderFailOpen(t *testing.T) {
	t.Parallel()
	c := client.New(quotaURL)
	for name, call := range map[string]func() error{
		"check": func() error {
			_, err := c.Check(context.Background(), client.CheckRequest{Dimensions: map[string]string{"user_id": ""}})
			return err
		},
		"batch": func() error { _, err := c.CheckBatch(context.Background(), nil); return err },
		"auth":  func() error { _, err := c.Auth(context.Background(), http.Header{"X-Other": {"v"}}); return err },
	} {
		var ae *client.APIError
		if err := call(); !errors.As(err, &ae) || ae.Status != 400 || ae.Code == "" || ae.Message == "" {
			t.Errorf("%s: %v, want a 400 *APIError", name, err)
		}
	}
	if _, err := c.Check(context.Background(), client.CheckRequest{Dimensions: map[string]string{"cost": "1"}}); err == nil {
		t.Error("a reserved field as a dimension was sent")
	}
}

func TestClient_CheckTokenGoesWithEveryCall(t *testing.T) {
	t.Parallel()
	s := config.Defaults()
	s.CheckToken = "client-check-token-0123"
	srv, err := quotatest.Start(quotatest.ExampleRules, &s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	var ae *client.APIError
	if _, err := client.New(srv.URL).Check(context.Background(), user("u")); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("without the token: %v", err)
	}
	c := client.New(srv.URL, client.WithToken(s.CheckToken))
	if d, err := c.Check(context.Background(), user("u")); err != nil || !d.Allowed {
		t.Fatalf("Check with the token: %+v %v", d, err)
	}
	// The client's own Authorization header goes along untouched on Auth.
	if d, err := c.Auth(context.Background(), http.Header{"X-User-Id": {"u"}, "Authorization": {"Bearer users-own"}}); err != nil || !d.Allowed {
		t.Fatalf("Auth with the token: %+v %v", d, err)
	}
	if ds, err := c.CheckBatch(context.Background(), []client.CheckRequest{user("u")}); err != nil || ds[0].Allowed {
		t.Fatalf("third call of a limit of 2 in a batch: %+v %v", ds, err)
	}
}

func TestClient_ReusesConnections(t *testing.T) {
	t.Parallel()
	var dialed atomic.Int64
	srv := httptest.NewUnstartedServer(quotaSrv.Handler)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	// A generous timeout: a call cut by its deadline closes its connection,
	// and this test is about reuse, not about a loaded machine.
	c := client.New(srv.URL, client.WithTimeout(30*time.Second), client.WithFailMode(client.FailClosed))
	const workers, calls = 32, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				if _, err := c.Check(context.Background(), user("reuse-"+strconv.Itoa(w*calls+i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// A caller may dial while the connection it just used is still on its
	// way back to the pool, so a few more than one per caller is fine; a
	// client that closes idle connections (net/http's default keeps 2 per
	// host) dials hundreds.
	if n := dialed.Load(); n > 2*workers {
		t.Fatalf("%d connections for %d concurrent callers (%d calls): not reused", n, workers, workers*calls)
	}
}

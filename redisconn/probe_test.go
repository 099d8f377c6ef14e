package redisconn

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// fakeRedis accepts connections and answers each with reply ("" never answers).
func fakeRedis(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				_, _ = c.Read(buf)
				if reply == "" {
					time.Sleep(5 * time.Second)
					return
				}
				_, _ = c.Write([]byte(reply))
			}()
		}
	}()
	return ln.Addr().String()
}

func TestProbeAny(t *testing.T) {
	t.Parallel()
	live := testenv.StartRedis(t)
	dead := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	for _, tc := range []struct {
		name  string
		addrs []string
		ok    bool
	}{
		{"redis answers PONG", []string{live.Addr()}, true},
		{"nothing listens", []string{dead}, false},
		{"accepts but never answers (hung)", []string{fakeRedis(t, "")}, false},
		{"still loading its data", []string{fakeRedis(t, "-LOADING Redis is loading the dataset in memory\r\n")}, false},
		{"wants AUTH: it answers, so it is up", []string{fakeRedis(t, "-NOAUTH Authentication required.\r\n")}, true},
		{"one seed of several answers", []string{dead, live.Addr()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			defer cancel()
			began := time.Now()
			err := probeAny(tc.addrs, pingAddr)(ctx)
			if (err == nil) != tc.ok {
				t.Fatalf("probe: %v, want ok=%v", err, tc.ok)
			}
			if took := time.Since(began); took > time.Second {
				t.Fatalf("probe took %s with a 250 ms deadline", took)
			}
		})
	}
}

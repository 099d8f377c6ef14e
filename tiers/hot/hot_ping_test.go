package hot

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// closingProxy forwards connections to a real Redis; once dropNext is set,
// the next request on the first connection is not forwarded: the proxy
// closes that connection instead, as Redis does after answering a request
// it will not serve (an idle timeout, or an unauthenticated client's
// oversized bulk), so that the client's next read on it finds EOF.
type closingProxy struct {
	addr     string
	dropNext atomic.Bool
	conns    atomic.Int64
}

func startClosingProxy(t *testing.T, target string) *closingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &closingProxy{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c, target, p.conns.Add(1) == 1)
		}
	}()
	return p
}

func (p *closingProxy) serve(c net.Conn, target string, first bool) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(c, up) }()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if first && p.dropNext.Load() {
			return
		}
		if _, err := up.Write(buf[:n]); err != nil {
			return
		}
	}
}

// A pooled connection that Redis closed does not make Redis look down: the
// readiness ping tries a new connection when its own one ends.
func TestHotStore_PingSurvivesAConnectionRedisClosed(t *testing.T) {
	t.Parallel()
	p := startClosingProxy(t, testenv.RedisAddr())
	rdb := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { rdb.Close() })
	s := NewStore(rdb, Options{Prefix: "t:" + testenv.RandomHex(6) + ":"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("first ping: %v", err)
	}
	p.dropNext.Store(true)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping after Redis closed the pooled connection: %v", err)
	}
	if n := p.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the closed one and the one the ping retried on", n)
	}
}

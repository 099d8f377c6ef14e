package hot_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/internal/testsupport/tierstest"
	"github.com/quota-platform/quota/redisconn"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// A check that first waits for the pool's only connection, held by an
// earlier check on a slow link, and then meets a link that has gone
// silent, is answered within its call's bound, the wait included: the
// bound reaches the socket read (redisconn.New sets
// ContextTimeoutEnabled; hot.Options.CallTimeout applies to a single Redis
// too). Before, the read got a fresh ReadTimeout once the connection was
// handed over, and such a check took the wait plus a whole timeout
// (about 400 ms here, against the 350 ms of QUOTA_REDIS_TIMEOUT + 100 ms).
func TestCallTimeout_IncludesTheWaitForAPooledConnection(t *testing.T) {
	t.Parallel()
	redis := testenv.StartRedis(t)
	link := newSlowLink(t, redis.Addr())
	s := config.Defaults()
	s.RedisAddrs, s.RedisTimeout, s.RedisPoolSize = []string{link.addr()}, 250*time.Millisecond, 1
	rdb := redisconn.New(s)
	t.Cleanup(func() { rdb.Close() })
	store := hot.NewStore(rdb, hot.Options{Prefix: "ctp:", CallTimeout: s.RedisTimeout})
	ctx := context.Background()
	cell := tierstest.NewCell(100, time.Hour).At(tierstest.T0)
	check := func() error { return store.Check(ctx, tierstest.T0, []*tiers.Op{{Cost: 1, Cells: []tiers.Cell{cell}}}) }
	if err := check(); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	// Redis' answers are held until slowUntil, then dropped: the first
	// check keeps the connection for 200 ms and gets its answer; the
	// second waits for it and then never hears back.
	slowUntil := time.Now().Add(200 * time.Millisecond)
	link.degrade(slowUntil)
	first := make(chan error, 1)
	go func() { first <- check() }()
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	err := check()
	took := time.Since(began)
	if err := <-first; err != nil {
		t.Fatalf("the first check, answered late: %v", err)
	}
	if !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("the waiting check: %v, want ErrUnavailable", err)
	}
	if bound := s.RedisTimeout + 100*time.Millisecond; took > bound {
		t.Fatalf("the waiting check took %v, want at most %v (QUOTA_REDIS_TIMEOUT + 100 ms)", took, bound)
	}
}

// slowLink is a TCP proxy to a Redis whose answers can be held back and
// then dropped, as a congested link that then goes silent: what a
// partition between hosts looks like to the client, which SIGSTOP is not
// (a stopped Redis's kernel still accepts new connections).
type slowLink struct {
	ln     net.Listener
	mu     sync.Mutex
	until  time.Time // answers read before it are held until it
	silent bool      // answers read after until are dropped
}

func newSlowLink(t *testing.T, target string) *slowLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(r, c); r.Close() }()
			go l.answer(c, r)
		}
	}()
	return l
}

func (l *slowLink) addr() string { return l.ln.Addr().String() }

// degrade holds every answer until until, and drops those read after it.
func (l *slowLink) degrade(until time.Time) {
	l.mu.Lock()
	l.until, l.silent = until, true
	l.mu.Unlock()
}

func (l *slowLink) answer(client, redis net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := redis.Read(buf)
		if err != nil {
			return
		}
		l.mu.Lock()
		until, silent := l.until, l.silent
		l.mu.Unlock()
		if now := time.Now(); silent && !now.Before(until) {
			continue
		} else if now.Before(until) {
			time.Sleep(until.Sub(now))
		}
		if _, err := client.Write(buf[:n]); err != nil {
			return
		}
	}
}

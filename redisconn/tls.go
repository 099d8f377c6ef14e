package redisconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/quota-platform/quota/config"
)

// tlsDialer is dialer with TLS on top when cfg is not nil: go-redis
// negotiates TLS itself only with its own dialer. The server name checked
// is QUOTA_REDIS_TLS_SERVER_NAME, else the host of the address dialled
// (each cluster node's, the master a sentinel names). A failed handshake,
// like a failed dial, fails the command that needed it.
func tlsDialer(timeout time.Duration, cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := dialer(timeout)
	if cfg == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if _, failed := c.(failedConn); failed || err != nil {
			return c, err
		}
		tc, err := tlsHandshake(ctx, c, addr, cfg, timeout)
		if err != nil {
			return failedConn{err: err, remote: addr}, nil
		}
		return tc, nil
	}
}

func tlsHandshake(ctx context.Context, c net.Conn, addr string, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// dial opens a connection to addr, over TLS when it is on.
func dial(s config.Settings) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("redis dial %s: %w", addr, err)
		}
		if s.RedisTLSConfig == nil {
			return c, nil
		}
		return tlsHandshake(ctx, c, addr, s.RedisTLSConfig, s.RedisTimeout)
	}
}

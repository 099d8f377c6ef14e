package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/quota-platform/quota/config"
)

// redisTLSDialer is redisDialer with TLS on top when cfg is not nil:
// go-redis negotiates TLS itself only with its own dialer. The server name
// checked is QUOTA_REDIS_TLS_SERVER_NAME, else the host of the address
// dialled (each cluster node's, the master a sentinel names). A failed
// handshake, like a failed dial, fails the command that needed it.
func redisTLSDialer(timeout time.Duration, cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := redisDialer(timeout)
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

// redisPing is a PING of one Redis address on a connection of its own
// (pingConn), over TLS when quotad's Redis options say so.
func redisPing(s config.Settings) func(ctx context.Context, addr string) error {
	if s.RedisTLSConfig == nil {
		return pingRedis
	}
	return func(ctx context.Context, addr string) error {
		c, err := redisDial(s)(ctx, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		return pingConn(ctx, c, addr)
	}
}

// redisDial opens a connection to addr, over TLS when it is on.
func redisDial(s config.Settings) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil || s.RedisTLSConfig == nil {
			return c, err
		}
		return tlsHandshake(ctx, c, addr, s.RedisTLSConfig, s.RedisTimeout)
	}
}

// redisProbeFor is the circuit breaker's probe (redisProbe) for quotad's
// Redis options: over TLS when it is on, and with Sentinel a PING of the
// master the sentinels name (a sentinel answering proves nothing about it).
func redisProbeFor(s config.Settings) func(context.Context) error {
	ping := redisPing(s)
	if s.RedisSentinelMaster == "" {
		return redisProbe(s.RedisAddrs, ping)
	}
	dial := redisDial(s)
	return func(ctx context.Context) error {
		var errs []error
		for _, addr := range s.RedisAddrs {
			m, err := sentinelMaster(ctx, dial, addr, s.RedisSentinelMaster, s.RedisSentinelPassword)
			if err == nil {
				if err = ping(ctx, m); err == nil {
					return nil
				}
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// sentinelMaster asks the sentinel at addr for the address of master.
func sentinelMaster(ctx context.Context, dial func(context.Context, string) (net.Conn, error), addr, master, password string) (string, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	r := bufio.NewReaderSize(c, 512)
	if password != "" {
		if _, err := c.Write(resp("AUTH", password)); err != nil {
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return "", fmt.Errorf("sentinel %s: AUTH: %q %v", addr, strings.TrimSpace(line), err)
		}
	}
	if _, err := c.Write(resp("SENTINEL", "get-master-addr-by-name", master)); err != nil {
		return "", fmt.Errorf("sentinel %s: %w", addr, err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", addr, err)
	}
	if !strings.HasPrefix(line, "*2") {
		return "", fmt.Errorf("sentinel %s: no master %q: %s", addr, master, strings.TrimSpace(line))
	}
	var parts [2]string
	for i := range parts {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		v, err := r.ReadString('\n')
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		parts[i] = strings.TrimSpace(v)
	}
	return net.JoinHostPort(parts[0], parts[1]), nil
}

// resp encodes a command in the Redis protocol.
func resp(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

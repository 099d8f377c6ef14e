package redisconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/config"
)

// probeAny returns the circuit breaker's probe of Redis: a PING on a
// connection of its own, outside go-redis' pool, so that probing a Redis
// that is down does not count towards the pool's dial gate (after PoolSize
// failed dials go-redis stops dialling and retries once a second). It
// succeeds when one of addrs answers anything but a "not ready" error: a
// Redis that accepts connections but hangs (SIGSTOP, a long command) fails
// by the context's deadline, and -NOAUTH still proves Redis is answering.
func probeAny(addrs []string, ping func(ctx context.Context, addr string) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, addr := range addrs {
			err := ping(ctx, addr)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// pingAddr is a PING of addr on a connection of its own, without TLS.
func pingAddr(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("redis probe %s: %w", addr, err)
	}
	defer c.Close()
	return pingConn(ctx, c, addr)
}

// pingConn sends PING on c and reads the answer (see probeAny).
func pingConn(ctx context.Context, c net.Conn, addr string) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return fmt.Errorf("redis probe %s: %w", addr, err)
	}
	line, err := bufio.NewReaderSize(c, 256).ReadString('\n')
	if err != nil {
		return fmt.Errorf("redis probe %s: %w", addr, err)
	}
	for _, notReady := range []string{"-LOADING", "-BUSY", "-MASTERDOWN", "-CLUSTERDOWN", "-TRYAGAIN"} {
		if strings.HasPrefix(line, notReady) {
			return fmt.Errorf("redis probe %s: %s", addr, strings.TrimSpace(line))
		}
	}
	return nil
}

// ClusterProbe returns the probe of one part of a Redis Cluster (a master's
// address, or several comma-separated; see routing.ClusterPartition): a PING
// of each, outside the pool, as probeAny, over TLS when s says so. Each probe first asks go-redis
// to reload its slot map (at most every 200 ms, in the background): go-redis
// reloads it on its own only on a MOVED reply or once a minute
// (ClusterStateReloadInterval), and a master that died answers nothing, so
// without this the checks of its slots would keep going to the dead address
// for up to a minute after its replica took over. Once the map names the new
// master, those checks belong to the new master's part and its circuit.
func ClusterProbe(cc *redis.ClusterClient, s config.Settings) func(ctx context.Context, part string) error {
	ping := Ping(s)
	anyNode := probeAny(s.RedisAddrs, ping)
	return func(ctx context.Context, part string) error {
		cc.ReloadState(ctx)
		if part == "" {
			return anyNode(ctx)
		}
		var errs []error
		for _, addr := range strings.Split(part, ",") {
			if err := ping(ctx, addr); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// Ping returns a PING of one Redis address on a connection of its own
// (pingConn), over TLS when s says so.
func Ping(s config.Settings) func(ctx context.Context, addr string) error {
	if s.RedisTLSConfig == nil {
		return pingAddr
	}
	return func(ctx context.Context, addr string) error {
		c, err := dial(s)(ctx, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		return pingConn(ctx, c, addr)
	}
}

// Probe returns the circuit breaker's probe of the Redis s names (see
// probeAny): over TLS when it is on, and with Sentinel a PING of the master
// the sentinels name (a sentinel answering proves nothing about it).
func Probe(s config.Settings) func(context.Context) error {
	ping := Ping(s)
	if s.RedisSentinelMaster == "" {
		return probeAny(s.RedisAddrs, ping)
	}
	dial := dial(s)
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

package redisconn

import (
	"context"
	"net"
	"time"
)

// dialer returns go-redis' Dialer: a TCP dial whose failure is handed
// to go-redis as a connection that fails on first use instead of as a dial
// error.
//
// Why: go-redis counts failed dials over the life of a pool, never resets
// the count on a successful dial, and once it reaches PoolSize stops dialling
// and tries once a second. Every Redis outage adds a few failed dials, so
// now and then the first check after an outage would wait for that
// once-a-second retry: enforcement back up to ~1.1 s after Redis, against
// the 1 s quotad promises (docs/reliability.md). Its pipeline pool, which the
// coalesced checks use, has a gate of only 10. A connection that fails on
// its first write still fails the command at once with the dial's error, and
// go-redis discards it, so nothing else changes.
func dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return failedConn{err: err, remote: addr}, nil
		}
		return c, nil
	}
}

// failedConn is a connection whose dial failed: every read and write
// returns the dial's error.
type failedConn struct {
	err    error
	remote string
}

func (c failedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c failedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c failedConn) Close() error                     { return nil }
func (c failedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c failedConn) RemoteAddr() net.Addr             { return failedAddr(c.remote) }
func (c failedConn) SetDeadline(time.Time) error      { return nil }
func (c failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c failedConn) SetWriteDeadline(time.Time) error { return nil }

type failedAddr string

func (failedAddr) Network() string  { return "tcp" }
func (a failedAddr) String() string { return string(a) }

package testenv

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RedisCalls counts what a client sends (a redis.Hook: client.AddHook):
// round trips (a command or a pipeline) and commands, leaving out go-redis
// setting up a pooled connection.
type RedisCalls struct{ Trips, Cmds atomic.Int64 }

// Reset zeroes both counts.
func (c *RedisCalls) Reset() {
	c.Trips.Store(0)
	c.Cmds.Store(0)
}

func (c *RedisCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *RedisCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.Trips.Add(1)
			c.Cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *RedisCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !handshake(cmds...) {
			c.Trips.Add(1)
			c.Cmds.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmds are go-redis setting up a new pooled
// connection (HELLO, CLIENT SETINFO): not a check's commands.
func handshake(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if n := c.Name(); n != "hello" && n != "client" {
			return false
		}
	}
	return len(cmds) > 0
}

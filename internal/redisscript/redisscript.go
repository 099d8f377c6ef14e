// Package redisscript runs one Lua script many times in one pipeline.
//
// Scripts are sent by EVALSHA: Redis hashes and looks up the body of every
// EVAL, which costs more than most of the scripts it runs. A call that
// Redis refused for want of the script (a restart, SCRIPT FLUSH, a newly
// promoted cluster master) is sent again once the script is loaded, and
// only that call: the others ran, and a write must not be applied twice.
package redisscript

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Call is one run of a script: its keys and arguments.
type Call struct {
	Keys []string
	Args []any
}

// RunEach runs sc once per call, in one pipeline, and returns each call's
// command (errors of single calls are left in them). The error is that of
// loading a script Redis had lost.
func RunEach(ctx context.Context, rdb redis.UniversalClient, sc *redis.Script, calls []Call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	switch len(calls) {
	case 0:
		return cmds, nil
	case 1:
		cmds[0] = sc.Run(ctx, rdb, calls[0].Keys, calls[0].Args...)
		return cmds, nil
	}
	pipe := rdb.Pipeline()
	for i := range calls {
		cmds[i] = sc.EvalSha(ctx, pipe, calls[i].Keys, calls[i].Args...)
	}
	if _, err := pipe.Exec(ctx); err == nil {
		return cmds, nil
	}
	loaded := false
	for i := range calls {
		if !IsNoScript(cmds[i].Err()) {
			continue
		}
		if !loaded {
			if err := sc.Load(ctx, rdb).Err(); err != nil {
				return nil, fmt.Errorf("load script: %w", err)
			}
			loaded = true
		}
		cmds[i] = sc.EvalSha(ctx, rdb, calls[i].Keys, calls[i].Args...)
	}
	return cmds, nil
}

// IsNoScript reports whether err is Redis' NOSCRIPT reply.
func IsNoScript(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

package hot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/redisscript"
	"github.com/quota-platform/quota/tiers"
)

// waitOptions is Options' WaitReplicas and WaitTimeout.
type waitOptions struct {
	replicas int64
	timeout  time.Duration
}

// hotRequest is one call's script, keys and arguments.
type hotRequest struct {
	sc   *redis.Script
	keys []string
	args []any
}

// runWaited sends calls as runPipelined does, followed on the same
// connection by WAIT (WaitReplicas, WaitTimeout): on a single Redis (or
// Sentinel's master) one pipeline; on a Redis Cluster one pipeline to each
// master that holds some of the calls, in parallel, since WAIT answers only
// for the writes of its own connection. A call whose master answers WAIT
// with fewer replicas (or fails it) gets an ErrUnavailable reply: the
// count was made but may not survive a failover, so the fail mode answers
// it, never an enforced allow. Still one round trip (per master).
func (s *Store) runWaited(ctx context.Context, now time.Time, calls []Call) error {
	reqs := make([]hotRequest, len(calls))
	for i := range calls {
		reqs[i].sc, reqs[i].keys, reqs[i].args = s.request(&calls[i], now)
	}
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		idxs := make([]int, len(calls))
		for i := range idxs {
			idxs[i] = i
		}
		s.waitedPipeline(ctx, s.rdb, calls, reqs, idxs, true)
		return nil
	}
	nodes := map[string]*redis.Client{}
	groups := map[string][]int{}
	for i := range calls {
		node, err := cc.MasterForKey(ctx, reqs[i].keys[0])
		if err != nil {
			calls[i].cmd = failedCmd(ctx, fmt.Errorf("%w: hot check: master of %s: %w", tiers.ErrUnavailable, reqs[i].keys[0], err))
			continue
		}
		addr := node.Options().Addr
		nodes[addr] = node
		groups[addr] = append(groups[addr], i)
	}
	var wg sync.WaitGroup
	for addr, idxs := range groups {
		wg.Go(func() { s.waitedPipeline(ctx, nodes[addr], calls, reqs, idxs, true) })
	}
	wg.Wait()
	for i := range calls {
		if isRedirect(calls[i].cmd.Err()) {
			// The slot moved (a failover): a fresh map for the next checks;
			// this one is answered by the fail mode.
			cc.ReloadState(ctx)
			break
		}
	}
	return nil
}

// waitedPipeline sends the calls idxs to c in one pipeline ending in WAIT,
// and marks the calls WAIT does not vouch for as unavailable. A call
// refused for want of its script (a restarted or promoted master) is sent
// again once the scripts are loaded, with a WAIT of its own.
func (s *Store) waitedPipeline(ctx context.Context, c redis.Cmdable, calls []Call, reqs []hotRequest, idxs []int, retry bool) {
	pipe := c.Pipeline()
	for _, i := range idxs {
		calls[i].cmd = reqs[i].sc.EvalSha(ctx, pipe, reqs[i].keys, reqs[i].args...)
	}
	wait := pipe.Do(ctx, "wait", s.wait.replicas, s.wait.timeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // each command's error is read below and in decode
	var again []int
	if retry {
		for _, i := range idxs {
			if redisscript.IsNoScript(calls[i].cmd.Err()) {
				again = append(again, i)
			}
		}
	}
	var notFinal error
	if n, err := wait.Int64(); err != nil {
		notFinal = fmt.Errorf("%w: hot check not final: WAIT: %w", tiers.ErrUnavailable, err)
	} else if n < s.wait.replicas {
		notFinal = fmt.Errorf("%w: hot check not final: %d of %d replicas acknowledged it within %s", tiers.ErrUnavailable, n, s.wait.replicas, s.wait.timeout)
	}
	for _, i := range idxs {
		err := calls[i].cmd.Err()
		switch {
		case err == nil && notFinal != nil:
			calls[i].cmd.SetErr(notFinal)
		case isRedirect(err):
			calls[i].cmd.SetErr(fmt.Errorf("%w: hot check: %w", tiers.ErrUnavailable, err))
		}
	}
	if len(again) == 0 {
		return
	}
	for _, sc := range []*redis.Script{s.script, s.fixed} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			for _, i := range again {
				calls[i].cmd = failedCmd(ctx, fmt.Errorf("hot load script: %w", tiers.WrapUnavailable(err)))
			}
			return
		}
	}
	s.waitedPipeline(ctx, c, calls, reqs, again, false)
}

// failedCmd is a script reply that is err.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// isRedirect reports a cluster redirection (MOVED, ASK).
func isRedirect(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (strings.HasPrefix(re.Error(), "MOVED ") || strings.HasPrefix(re.Error(), "ASK "))
}

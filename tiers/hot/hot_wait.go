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
// master that holds some of the calls, in parallel (runByMaster), since
// WAIT answers only for the writes of its own connection. A call whose
// master answers WAIT with fewer replicas (or fails it) gets an
// ErrUnavailable reply: the count was made but may not survive a
// failover, so the fail mode answers it, never an enforced allow. Still
// one round trip (per master).
func (s *Store) runWaited(ctx context.Context, now time.Time, calls []Call) error {
	reqs := s.requests(calls, now)
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		idxs := make([]int, len(calls))
		for i := range idxs {
			idxs[i] = i
		}
		s.nodePipeline(ctx, s.rdb, calls, reqs, idxs, true, true)
		return nil
	}
	s.runByMaster(ctx, cc, calls, reqs, true)
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

// runClustered sends calls on a Redis Cluster without WAIT: one pipeline
// to each master that holds some of the calls, in parallel, on that
// master's own connection pool (runByMaster). go-redis' cluster pipeline
// is not used for the first attempt because of what it does when one
// master does not answer: it sends that master's commands again (up to
// MaxRedirects times, each on a new dial), and when the call's deadline
// ends that loop it sets the deadline's error on every command of the
// pipeline, the other masters' answered ones included: behind one silent
// master the checks of the healthy ones failed too, with an error
// (context.DeadlineExceeded) the breaker does not take for the backend's
// timeout, so it waited for three of them before it opened the silent
// master's circuit, and a check queued meanwhile waited two timeouts.
// Here each master's calls get that master's answer or its own error.
//
// A call answered MOVED or ASK did not run (the slot is served
// elsewhere): those are sent once more through the cluster client, which
// follows the redirection, within what is left of the deadline.
func (s *Store) runClustered(ctx context.Context, cc *redis.ClusterClient, now time.Time, calls []Call) {
	s.runByMaster(ctx, cc, calls, s.requests(calls, now), false)
	var again []Call
	var at []int
	reload := false
	for i := range calls {
		err := calls[i].cmd.Err()
		if isRedirect(err) {
			again, at = append(again, calls[i]), append(at, i)
		}
		// A node that is no longer a master (READONLY) or a cluster that
		// is failing over: go-redis' cluster client reloaded its slot map
		// on these; answered by the fail mode, the next checks get a
		// fresh map.
		reload = reload || isNotMaster(err)
	}
	if reload {
		cc.ReloadState(ctx)
	}
	if len(again) == 0 {
		return
	}
	if _, err := s.runPipelined(ctx, now, again, true, nil); err != nil {
		for _, i := range at {
			calls[i].cmd = failedCmd(ctx, err)
		}
		return
	}
	for j, i := range at {
		calls[i].cmd = again[j].cmd
	}
}

// requests builds each call's script, keys and arguments.
func (s *Store) requests(calls []Call, now time.Time) []hotRequest {
	reqs := make([]hotRequest, len(calls))
	for i := range calls {
		reqs[i].sc, reqs[i].keys, reqs[i].args = s.request(&calls[i], now)
	}
	return reqs
}

// runByMaster sends calls to the masters of their keys' slots (go-redis'
// cached slot map), one pipeline per master in parallel, each on that
// master's own client (no retries: MaxRetries -1), followed by WAIT when
// wait is set (nodePipeline). A call whose master is not known fails as
// ErrUnavailable.
func (s *Store) runByMaster(ctx context.Context, cc *redis.ClusterClient, calls []Call, reqs []hotRequest, wait bool) {
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
	if len(groups) == 1 {
		for addr, idxs := range groups {
			s.nodePipeline(ctx, nodes[addr], calls, reqs, idxs, wait, true)
		}
		return
	}
	var wg sync.WaitGroup
	for addr, idxs := range groups {
		wg.Go(func() { s.nodePipeline(ctx, nodes[addr], calls, reqs, idxs, wait, true) })
	}
	wg.Wait()
}

// nodePipeline sends the calls idxs to c in one pipeline, ending in WAIT
// when wait is set, and marks the calls WAIT does not vouch for (and,
// with WAIT, those redirected) as unavailable. A call refused for want of
// its script (a restarted or promoted master) is sent again once the
// scripts are loaded (with a WAIT of its own).
func (s *Store) nodePipeline(ctx context.Context, c redis.Cmdable, calls []Call, reqs []hotRequest, idxs []int, wait, retry bool) {
	pipe := c.Pipeline()
	for _, i := range idxs {
		calls[i].cmd = reqs[i].sc.EvalSha(ctx, pipe, reqs[i].keys, reqs[i].args...)
	}
	var waited *redis.Cmd
	if wait {
		waited = pipe.Do(ctx, "wait", s.wait.replicas, s.wait.timeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below and in decode
	var again []int
	if retry {
		for _, i := range idxs {
			if redisscript.IsNoScript(calls[i].cmd.Err()) {
				again = append(again, i)
			}
		}
	}
	if waited != nil {
		var notFinal error
		if n, err := waited.Int64(); err != nil {
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
	s.nodePipeline(ctx, c, calls, reqs, again, wait, false)
}

// failedCmd is a script reply that is err.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// isNotMaster reports a node that refused a write as no longer (or not
// yet) the master of its slots.
func isNotMaster(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (strings.HasPrefix(re.Error(), "READONLY ") || strings.HasPrefix(re.Error(), "CLUSTERDOWN ") || strings.HasPrefix(re.Error(), "MASTERDOWN "))
}

// isRedirect reports a cluster redirection (MOVED, ASK).
func isRedirect(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (strings.HasPrefix(re.Error(), "MOVED ") || strings.HasPrefix(re.Error(), "ASK "))
}

package migrate

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/redisscript"
	"github.com/quota-platform/quota/tiers"
)

var (
	//go:embed lease_take.lua
	takeSource string
	//go:embed lease_release.lua
	releaseSource string
	//go:embed lease_renew.lua
	renewSource   string
	takeScript    = redis.NewScript(takeSource)
	releaseScript = redis.NewScript(releaseSource)
	renewScript   = redis.NewScript(renewSource)
)

// ReleaseKey deletes key if it still holds token: a lease of one key
// (a cycle's part, the cycle key) by the move leases' script.
func ReleaseKey(ctx context.Context, rdb redis.Scripter, key, token string) {
	releaseScript.Run(ctx, rdb, []string{key}, token)
}

// RenewKey sets key's time to live to ttl if it still holds token.
func RenewKey(ctx context.Context, rdb redis.Scripter, key, token string, ttl time.Duration) {
	renewScript.Run(ctx, rdb, []string{key}, token, ttl.Milliseconds())
}

// leaseChunk bounds the keys of one lease script: a batch's leases are
// taken, renewed and released in a few calls on a single Redis, each
// short enough not to hold up the checks behind it.
const leaseChunk = 500

// leases are the cells one MoveCells holds, kept alive until released or
// abandoned.
type leases struct {
	m     *Mover
	token string
	refs  []tiers.Ref
	keys  []string             // the lease key of each of refs
	keyOf map[tiers.Ref]string // the lease key of each of refs, by ref
	stop  chan struct{}
	done  chan struct{}
}

// leaseInfix follows the prefix in a lease key, before the hex cell id.
const leaseInfix = "mig:lease:"

// leaseKey is the key of a cell's lease.
func (m *Mover) leaseKey(r *tiers.Ref) string {
	return string(m.appendLeaseKey(nil, r))
}

// appendLeaseKey appends leaseKey(r) to b.
func (m *Mover) appendLeaseKey(b []byte, r *tiers.Ref) []byte {
	id := r.ID()
	b = append(b, m.Prefix...)
	b = append(b, leaseInfix...)
	return hex.AppendEncode(b, id[:])
}

// leaseKeys returns the lease key of each ref, all cut from one string.
func (m *Mover) leaseKeys(refs []tiers.Ref) []string {
	size := len(m.Prefix) + len(leaseInfix) + hex.EncodedLen(len(tiers.CellID{}))
	buf := make([]byte, 0, size*len(refs))
	for i := range refs {
		buf = m.appendLeaseKey(buf, &refs[i])
	}
	all := string(buf)
	keys := make([]string, len(refs))
	for i := range keys {
		keys[i] = all[i*size : (i+1)*size]
	}
	return keys
}

// leaseCalls cuts lease keys into script calls: chunks on a single Redis,
// one key a call on a cluster (lease keys carry no hash tag, so each may
// live on another master).
func (m *Mover) leaseCalls(keys []string, args ...any) []redisscript.Call {
	size := leaseChunk
	if _, cluster := m.RDB.(*redis.ClusterClient); cluster {
		size = 1
	}
	calls := make([]redisscript.Call, 0, (len(keys)+size-1)/size)
	for part := range slices.Chunk(keys, size) {
		calls = append(calls, redisscript.Call{Keys: part, Args: args})
	}
	return calls
}

// runLeases runs a lease script over keys and returns its per-key replies
// in keys' order (1: done for that key).
func (m *Mover) runLeases(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]bool, error) {
	calls := m.leaseCalls(keys, args...)
	cmds, err := redisscript.RunEach(ctx, m.RDB, sc, calls)
	if err != nil {
		return nil, err
	}
	out := make([]bool, 0, len(keys))
	var first error
	for i, c := range cmds {
		vals, err := c.Int64Slice()
		if err == nil && len(vals) != len(calls[i].Keys) {
			err = fmt.Errorf("%d replies for %d keys", len(vals), len(calls[i].Keys))
		}
		if err != nil {
			first = cmp.Or(first, err)
			vals = make([]int64, len(calls[i].Keys))
		}
		for _, v := range vals {
			out = append(out, v == 1)
		}
	}
	return out, first
}

// lease takes the lease of every ref it can and renews them every
// LeaseTTL/4 until release or abandon.
func (m *Mover) lease(ctx context.Context, refs []tiers.Ref) (*leases, error) {
	l := &leases{m: m, token: fmt.Sprintf("%d-%s", time.Now().UnixNano(), hex.EncodeToString([]byte(EncodeRef(&refs[0]))[:8])),
		stop: make(chan struct{}), done: make(chan struct{})}
	keys := m.leaseKeys(refs)
	got, err := m.runLeases(ctx, takeScript, keys, l.token, m.leaseTTL().Milliseconds())
	l.refs = make([]tiers.Ref, 0, len(refs))
	l.keys = make([]string, 0, len(refs))
	l.keyOf = make(map[tiers.Ref]string, len(refs))
	for i, ok := range got {
		if ok {
			l.refs = append(l.refs, refs[i])
			l.keys = append(l.keys, keys[i])
			l.keyOf[refs[i]] = keys[i]
		}
	}
	go l.keep(context.WithoutCancel(ctx))
	if err != nil {
		l.release()
		return nil, fmt.Errorf("lease: %w", err)
	}
	return l, nil
}

// keep renews the leases until stopped. A renewal that fails (Redis down)
// is tried again at the next tick; the lease lasts LeaseTTL from the last
// success.
func (l *leases) keep(ctx context.Context) {
	defer close(l.done)
	if len(l.refs) == 0 {
		return
	}
	ttl := l.m.leaseTTL()
	t := time.NewTicker(ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		_, _ = l.m.runLeases(ctx, renewScript, l.keys, l.token, ttl.Milliseconds())
	}
}

// abandon stops renewing and leaves the leases to expire, as a crash would.
func (l *leases) abandon() {
	close(l.stop)
	<-l.done
}

// release stops renewing and deletes the leases that are still this
// worker's.
func (l *leases) release() {
	l.abandon()
	if len(l.refs) == 0 {
		return
	}
	_, _ = l.m.runLeases(context.Background(), releaseScript, l.keys, l.token)
}

// owned returns the refs whose lease this worker still holds: one MGET a
// chunk on a single Redis, a GET a key on a cluster.
func (l *leases) owned(ctx context.Context, refs []tiers.Ref) ([]tiers.Ref, error) {
	if len(refs) == 0 {
		return refs, nil
	}
	keys := make([]string, len(refs))
	for i := range refs {
		keys[i] = l.key(&refs[i])
	}
	calls := l.m.leaseCalls(keys)
	pipe := l.m.RDB.Pipeline()
	cmds := make([]*redis.SliceCmd, len(calls))
	for i := range calls {
		cmds[i] = pipe.MGet(ctx, calls[i].Keys...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("lease check: %w", err)
	}
	out := make([]tiers.Ref, 0, len(refs))
	i := 0
	for _, c := range cmds {
		for _, v := range c.Val() {
			if s, ok := v.(string); ok && s == l.token {
				out = append(out, refs[i])
			}
			i++
		}
	}
	return out, nil
}

// refSet is refs as a set, by value (no MD5 a cell).
func refSet(refs []tiers.Ref) map[tiers.Ref]bool {
	set := make(map[tiers.Ref]bool, len(refs))
	for _, r := range refs {
		set[r] = true
	}
	return set
}

// key is the lease key of r, a cell held or not.
func (l *leases) key(r *tiers.Ref) string {
	if k, ok := l.keyOf[*r]; ok {
		return k
	}
	return l.m.leaseKey(r)
}

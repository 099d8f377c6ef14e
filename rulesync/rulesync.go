// Package rulesync keeps the rules in force the same on every quotad
// instance. The validated rules live in one Redis hash (one key, so one
// slot on a Redis Cluster) with their content version and a sequence number
// that every write increments; each instance polls the sequence and puts a
// new one in force. The rules file is the operator's: an instance offers its
// file at start, and the store puts it in force for every instance unless
// it has had that version in force before (Store.Offer), so an edited file
// and a restart change the fleet's rules while a restart with an old copy
// of the file does not roll them back.
package rulesync

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/tick"
	"github.com/quota-platform/quota/rules"
)

// ErrUnavailable is returned (wrapped) when the shared store cannot be
// reached: the rules were not changed anywhere.
var ErrUnavailable = errors.New("the shared rules store (Redis) is unreachable")

// Store is the shared rules store: the hash <prefix>rules with the fields
// seq, version, doc (the rules as JSON), by (which instance wrote them) and
// at (Unix milliseconds).
type Store struct {
	rdb redis.UniversalClient
	key string
}

// NewStore returns the store under prefix (QUOTA_REDIS_KEY_PREFIX).
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, key: prefix + "rules"}
}

// Key is the Redis key holding the rules.
func (s *Store) Key() string { return s.key }

// Entry is what the store holds. Seq 0 means the store is empty.
type Entry struct {
	Seq int64
	Set *rules.Set
	By  string
	At  time.Time
}

var (
	//go:embed put.lua
	putSource string
	//go:embed seed.lua
	seedSource string
	//go:embed seen.lua
	seenSource string
	// putScript writes a new entry and increments the sequence.
	putScript = redis.NewScript(seenSource + putSource)
	// seedScript writes the first entry only if the store is empty.
	seedScript = redis.NewScript(seenSource + seedSource)
)

func args(set *rules.Set, by string, now time.Time) ([]any, error) {
	doc, err := json.Marshal(set.File())
	if err != nil {
		return nil, fmt.Errorf("rules store: %w", err)
	}
	return []any{set.Version, doc, by, now.UnixMilli()}, nil
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, op, err)
}

// Put writes set as the rules in force and returns its sequence number.
func (s *Store) Put(ctx context.Context, set *rules.Set, by string) (int64, error) {
	a, err := args(set, by, time.Now())
	if err != nil {
		return 0, err
	}
	seq, err := putScript.Run(ctx, s.rdb, []string{s.key}, a...).Int64()
	if err != nil {
		return 0, unavailable("write", err)
	}
	return seq, nil
}

// Seed writes set only if the store is empty; it reports whether it did.
func (s *Store) Seed(ctx context.Context, set *rules.Set, by string) (bool, error) {
	a, err := args(set, by, time.Now())
	if err != nil {
		return false, err
	}
	n, err := seedScript.Run(ctx, s.rdb, []string{s.key}, a...).Int64()
	if err != nil {
		return false, unavailable("seed", err)
	}
	return n == 1, nil
}

// Seq is the sequence number of the entry in the store (0: empty).
func (s *Store) Seq(ctx context.Context) (int64, error) {
	seq, err := s.rdb.HGet(ctx, s.key, "seq").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, unavailable("read", err)
	}
	return seq, nil
}

// Get reads the entry in the store. Rules that do not validate (written by
// another version of quotad, or by hand) are an error that is not
// ErrUnavailable.
func (s *Store) Get(ctx context.Context) (Entry, error) {
	vals, err := s.rdb.HMGet(ctx, s.key, "seq", "doc", "by", "at").Result()
	if err != nil {
		return Entry{}, unavailable("read", err)
	}
	str := func(i int) string { v, _ := vals[i].(string); return v }
	if str(0) == "" {
		return Entry{}, nil
	}
	seq, err := strconv.ParseInt(str(0), 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("rules store %s: seq %q is not a number", s.key, str(0))
	}
	set, err := rules.ParseJSON([]byte(str(1)))
	if err != nil {
		return Entry{Seq: seq}, fmt.Errorf("rules store %s (seq %d): %w", s.key, seq, err)
	}
	at, _ := strconv.ParseInt(str(3), 10, 64)
	return Entry{Seq: seq, Set: set, By: str(2), At: time.UnixMilli(at).UTC()}, nil
}

// Syncer keeps this instance's rules in force equal to the store's.
type Syncer struct {
	Store *Store
	// Current is the rules in force here (limiter.Rules).
	Current func() *rules.Set
	// Check validates rules before they are written or put in force
	// (limiter.CheckRules); Apply puts them in force (limiter.SetRules,
	// plus the metrics).
	Check func(*rules.Set) error
	Apply func(*rules.Set) error
	Log   *slog.Logger
	// Name identifies this instance in the store ("by").
	Name string
	// Offline, when set, gives the rules to start with when the store is
	// unreachable at start, from the file's (quotad: QUOTA_RULES_STATE);
	// nil: the file's.
	Offline func(file *rules.Set) *rules.Set

	// mu orders polls and publishes, so that a poll never puts back rules
	// older than the ones just published.
	mu   sync.Mutex
	seq  int64  // sequence of the entry last seen
	bad  int64  // sequence of an entry found invalid (not retried)
	down bool   // the last poll failed: log once per outage
	last string // version of the entry last seen
	// pending is the rules started with while the store was unreachable
	// (the file's, or Offline's): offered at the first poll that reaches it.
	pending *rules.Set
}

// Bootstrap returns the rules to start with, given the file's. The file is
// the operator's: it is offered to the store (Store.Offer), which puts it
// in force for every instance unless the store has had its version in force
// before: an edited file wins at a restart, an old copy of a file the fleet
// has since replaced does not. When the file loses, the store's rules are
// returned and a warning says why. With the store unreachable it returns
// the file's and offers the file again once the store answers.
func (y *Syncer) Bootstrap(ctx context.Context, file *rules.Set) *rules.Set {
	y.mu.Lock()
	defer y.mu.Unlock()
	o, err := y.Store.Offer(ctx, file, y.Name)
	if err != nil {
		start := file
		if y.Offline != nil {
			start = y.Offline(file)
		}
		y.down, y.pending = true, start
		y.Log.Warn("rules store unreachable at start: these rules are in force until it answers",
			"err", err, "version", start.Version, "file_version", file.Version, "key", y.Store.Key())
		return start
	}
	return y.settle(ctx, file, o)
}

// settle records the outcome of offering file and returns the rules to put
// in force: the file's, or the store's when the file lost.
func (y *Syncer) settle(ctx context.Context, file *rules.Set, o Offered) *rules.Set {
	switch o.Outcome {
	case Seeded, New, Current:
		y.seq, y.last = o.Seq, file.Version
		switch o.Outcome {
		case Seeded:
			y.Log.Info("rules store was empty: seeded from the rules file", "version", file.Version, "key", y.Store.Key())
		case New:
			y.Log.Info("the rules file is new to the shared store: its rules are in force on every instance",
				"version", file.Version, "seq", o.Seq, "key", y.Store.Key())
		default:
			y.Log.Info("rules from the shared store (the rules file's)", "version", file.Version, "seq", o.Seq)
		}
		return file
	}
	e, err := y.Store.Get(ctx)
	if err == nil && e.Set == nil {
		err = errors.New("the store was emptied")
	}
	if err == nil {
		err = y.Check(e.Set)
	}
	if err != nil {
		y.bad, y.seq = e.Seq, e.Seq
		y.Log.Error("the shared store's rules could not be read or are invalid: the file's rules are in force here", "err", err, "version", file.Version)
		return file
	}
	y.seq, y.last = e.Seq, e.Set.Version
	if o.Outcome == Stale {
		y.Log.Warn("the rules file lost to the shared store: the fleet had this file's version in force before and has replaced it since, "+
			"so the store's rules are in force (an old file does not roll the fleet back); to put the file in force, edit it and restart, or send SIGHUP",
			"file_version", file.Version, "file_version_first_in_force", o.SeenAt, "version", e.Set.Version, "seq", e.Seq, "by", e.By, "at", e.At, "key", y.Store.Key())
	} else {
		y.Log.Warn("the rules file lost to the shared store: the store was written by a quotad that did not remember rule versions, "+
			"so it cannot tell whether the file is newer and keeps its rules; restart again or send SIGHUP to put the file in force "+
			"(from now on a file whose version the store has never had in force wins at start)",
			"file_version", file.Version, "version", e.Set.Version, "seq", e.Seq, "by", e.By, "at", e.At, "key", y.Store.Key())
	}
	return e.Set
}

// Publish validates set, writes it to the store and puts it in force here;
// every other instance follows at its next poll. With the store unreachable
// nothing changes anywhere and the error wraps ErrUnavailable.
func (y *Syncer) Publish(ctx context.Context, set *rules.Set) error {
	if err := y.Check(set); err != nil {
		return err
	}
	y.mu.Lock()
	defer y.mu.Unlock()
	seq, err := y.Store.Put(ctx, set, y.Name)
	if err != nil {
		return err
	}
	y.seq, y.last = seq, set.Version
	return y.Apply(set)
}

// offerPending offers the rules started with while the store was
// unreachable; they are still in force unless a write since replaced them.
// It reports whether the poll may go on.
func (y *Syncer) offerPending(ctx context.Context) bool {
	file := y.pending
	if cur := y.Current(); cur.Version != file.Version {
		y.pending = nil // replaced here since (a PUT or SIGHUP reached the store)
		return true
	}
	o, err := y.Store.Offer(ctx, file, y.Name)
	if err != nil {
		return false
	}
	y.pending = nil
	switch o.Outcome {
	case Seeded, New, Current:
		y.settle(ctx, file, o)
	default:
		// The poll reads the store's rules and puts them in force.
		y.Log.Warn("the rules started with lost to the shared store once it answered: the store's rules are put in force",
			"file_version", file.Version, "outcome", string(o.Outcome), "seq", o.Seq, "key", y.Store.Key())
	}
	return true
}

// Run polls the store every period until ctx ends.
func (y *Syncer) Run(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, func() {
		pctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		y.Poll(pctx)
	})
}

// Poll looks at the store once and puts a new entry in force. It also puts
// the store's rules back in force when the ones here differ from the entry
// last seen (a write here that raced one elsewhere), and seeds the store
// again with the rules in force when it was emptied (a Redis restarted
// without persistence).
func (y *Syncer) Poll(ctx context.Context) {
	y.mu.Lock()
	defer y.mu.Unlock()
	seq, err := y.Store.Seq(ctx)
	if err != nil {
		if !y.down {
			y.down = true
			y.Log.Warn("rules store unreachable: keeping the rules in force", "err", err, "version", y.Current().Version)
		}
		return
	}
	if y.down {
		y.down = false
		y.Log.Info("rules store reachable again", "seq", seq)
	}
	if y.pending != nil {
		if !y.offerPending(ctx) {
			return
		}
		if seq, err = y.Store.Seq(ctx); err != nil {
			return
		}
	}
	cur := y.Current()
	switch {
	case seq == 0:
		if seeded, err := y.Store.Seed(ctx, cur, y.Name); err == nil && seeded {
			y.seq, y.last = 1, cur.Version
			y.Log.Warn("rules store was empty: seeded again with the rules in force", "version", cur.Version)
		}
		return
	case seq == y.bad:
		return
	case seq == y.seq && cur.Version == y.last:
		return
	}
	e, err := y.Store.Get(ctx)
	if errors.Is(err, ErrUnavailable) {
		return
	}
	if err == nil {
		err = y.Check(e.Set)
	}
	if err != nil {
		y.bad, y.seq = e.Seq, e.Seq
		y.Log.Error("the shared store holds invalid rules: keeping the rules in force", "err", err, "seq", e.Seq, "version", cur.Version)
		return
	}
	y.seq, y.last = e.Seq, e.Set.Version
	if e.Set.Version == cur.Version {
		return
	}
	if err := y.Apply(e.Set); err != nil {
		y.Log.Error("rules from the shared store not applied", "err", err, "seq", e.Seq)
		return
	}
	y.Log.Info("rules updated from the shared store", "version", e.Set.Version, "previous", cur.Version, "seq", e.Seq, "by", e.By)
}

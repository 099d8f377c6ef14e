// Package rulesync keeps the rules in force the same on every quotad
// instance. The validated rules live in one Redis hash (one key, so one
// slot on a Redis Cluster) with their content version and a sequence number
// that every write increments; each instance polls the sequence and puts a
// new one in force. The rules file stays the bootstrap: the first instance
// to find the store empty seeds it from its file.
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
	// putScript writes a new entry and increments the sequence.
	putScript = redis.NewScript(putSource)
	// seedScript writes the first entry only if the store is empty.
	seedScript = redis.NewScript(seedSource)
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

	// mu orders polls and publishes, so that a poll never puts back rules
	// older than the ones just published.
	mu   sync.Mutex
	seq  int64  // sequence of the entry last seen
	bad  int64  // sequence of an entry found invalid (not retried)
	down bool   // the last poll failed: log once per outage
	last string // version of the entry last seen
}

// Bootstrap returns the rules to start with, given the file's: the store's
// when it holds valid rules, else the file's (seeding an empty store with
// them). With the store unreachable it returns the file's and says so: the
// instance follows the store once it answers.
func (y *Syncer) Bootstrap(ctx context.Context, file *rules.Set) *rules.Set {
	y.mu.Lock()
	defer y.mu.Unlock()
	e, err := y.Store.Get(ctx)
	switch {
	case errors.Is(err, ErrUnavailable):
		y.down = true
		y.Log.Warn("rules store unreachable at start: the file's rules are in force until it answers",
			"err", err, "version", file.Version, "key", y.Store.Key())
		return file
	case err != nil:
		y.bad = e.Seq
		y.seq = e.Seq
		y.Log.Error("the shared store's rules are invalid: the file's rules are in force here", "err", err, "version", file.Version)
		return file
	case e.Seq == 0:
		seeded, err := y.Store.Seed(ctx, file, y.Name)
		if err != nil {
			y.down = true
			y.Log.Warn("rules store: seeding failed; the file's rules are in force", "err", err, "version", file.Version)
			return file
		}
		if seeded {
			y.seq, y.last = 1, file.Version
			y.Log.Info("rules store was empty: seeded from the rules file", "version", file.Version, "key", y.Store.Key())
			return file
		}
		// Another instance seeded it first.
		if e, err = y.Store.Get(ctx); err != nil || e.Set == nil {
			y.Log.Warn("rules store: read after seeding failed; the file's rules are in force", "err", err, "version", file.Version)
			return file
		}
	}
	if err := y.Check(e.Set); err != nil {
		y.bad, y.seq = e.Seq, e.Seq
		y.Log.Error("the shared store's rules are invalid: the file's rules are in force here", "err", err, "seq", e.Seq)
		return file
	}
	y.seq, y.last = e.Seq, e.Set.Version
	if e.Set.Version != file.Version {
		y.Log.Info("the shared store's rules are in force; the rules file differs (SIGHUP writes the file to the store)",
			"version", e.Set.Version, "file_version", file.Version, "seq", e.Seq, "by", e.By)
	} else {
		y.Log.Info("rules from the shared store", "version", e.Set.Version, "seq", e.Seq)
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

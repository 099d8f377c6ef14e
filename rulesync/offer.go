package rulesync

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/rules"
)

var (
	//go:embed offer.lua
	offerSource string
	// offerScript puts a starting instance's file in force unless the
	// store has had its version in force before.
	offerScript = redis.NewScript(seenSource + offerSource)
)

// Outcome is what the store made of a file offered at start (Store.Offer).
type Outcome string

const (
	// Seeded: the store was empty; the file's rules are in force.
	Seeded Outcome = "seeded"
	// Current: the store already has the file's version in force.
	Current Outcome = "current"
	// New: the store had never had the file's version in force: it is in
	// force now, for every instance (an edited file and a restart).
	New Outcome = "new"
	// Stale: the store had the file's version in force before and has
	// replaced it since: the store's rules stay (an instance restarted
	// with an old copy of the file does not roll the fleet back).
	Stale Outcome = "stale"
	// Unknown: the store was written by a quotad that did not remember
	// versions, so whether the file is newer cannot be told: the store's
	// rules stay, and the versions in force are remembered from now on.
	Unknown Outcome = "unknown"
)

// Offered is the answer to Store.Offer.
type Offered struct {
	Outcome Outcome
	// Seq is the sequence of the entry in force after the offer.
	Seq int64
	// SeenAt is, for Stale, when the file's version was first in force.
	SeenAt time.Time
}

// Offer puts the rules of a starting instance's file in force unless the
// store has had their version in force before (in force then or replaced
// since): a file whose version the store has never seen wins, one it has
// seen does not. The store remembers the latest 900 to 1,000 versions (the
// oldest are forgotten first; seen.lua), in the rules hash itself.
func (s *Store) Offer(ctx context.Context, set *rules.Set, by string) (Offered, error) {
	a, err := args(set, by, time.Now())
	if err != nil {
		return Offered{}, err
	}
	res, err := offerScript.Run(ctx, s.rdb, []string{s.key}, a...).Slice()
	if err != nil {
		return Offered{}, unavailable("offer", err)
	}
	if len(res) != 3 {
		return Offered{}, fmt.Errorf("rules store %s: offer answered %v", s.key, res)
	}
	outcome, _ := res[0].(string)
	seq, _ := res[1].(int64)
	var seenAt time.Time
	if ms, _ := res[2].(int64); ms > 0 {
		seenAt = time.UnixMilli(ms).UTC()
	}
	switch o := Outcome(outcome); o {
	case Seeded, Current, New, Stale, Unknown:
		return Offered{Outcome: o, Seq: seq, SeenAt: seenAt}, nil
	}
	return Offered{}, fmt.Errorf("rules store %s: offer answered %q", s.key, outcome)
}

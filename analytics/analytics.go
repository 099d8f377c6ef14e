// Package analytics turns the stream of decided checks into usage figures:
// per app, interface, user and day, distinct users (Redis HyperLogLogs), and
// call curves at falling resolution.
//
// New wires five parts, each a type with one job:
//   - Recorder (record.go) counts each call in memory, per (app,
//     interface, user, minute), in one of many small maps: no I/O, on the
//     check path;
//   - Flusher (flush.go, rows.go) every FlushEvery (15 s by default) moves
//     the Recorder's counts into per-shard rows and writes them to MySQL in
//     multi-row INSERT … ON DUPLICATE KEY UPDATE statements, one
//     transaction per shard, so the write rate follows the distinct rows,
//     not the calls; it hands the users to uniques and the per-user rows to
//     userFigures;
//   - uniques (uniques.go, ifaceadds.go, hllstore.go, hlldense.go) adds the
//     distinct users to Redis HyperLogLogs, saves their registers to MySQL
//     and counts them;
//   - userFigures (users.go, userchunk.go, chunkmerge.go, userfold.go,
//     userseal.go) keeps the per-user figures as compressed chunks per
//     (day, app), merged as the day goes on and sealed once it is over;
//   - Stats (stats.go) answers the figures: MySQL's plus what is still in
//     memory.
//
// Rollup (rollup.go) is the scheduled job: curve points rolled up to
// coarser resolutions, per-user chunks merged and sealed, finished days'
// distinct-user registers saved.
//
// Exactly once: a transaction that fails before COMMIT is rolled back and
// its rows stay pending for the next flush; a COMMIT whose answer is lost is
// resolved by looking up the batch id that the transaction inserted.
package analytics

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
)

// Options configure analytics. DBs and Redis are required.
type Options struct {
	DBs       []*sql.DB             // the MySQL shards (schema sql/002_analytics.sql applied)
	Redis     redis.UniversalClient // holds the distinct-user HyperLogLogs
	KeyPrefix string                // Redis key prefix (QUOTA_REDIS_KEY_PREFIX); HLL keys are KeyPrefix+"hll:…"
	Clock     clock.Clock           // default clock.Real{}
	// FlushEvery is the period of Run's flushes (default 15 s).
	FlushEvery time.Duration
	// FlushDuty is the share of wall time Run's flushes work, resting in
	// between, until half of FlushEvery has passed (default
	// DefaultFlushDuty; 1: flat out). It keeps a flush from taking the
	// cores that the check path shares with Redis and MySQL.
	FlushDuty float64
	// MaxPendingRows bounds the rows held in memory while MySQL cannot be
	// written (default 2,000,000); calls past it are dropped and counted.
	MaxPendingRows int
	// RowsPerStatement bounds the rows of one INSERT (default 500).
	RowsPerStatement int
	// HLLTTL is the expiry of the daily HyperLogLog keys (default 48 h).
	HLLTTL time.Duration
	// HLLDenseAt is the size (bytes of Redis' sparse encoding) past which
	// Redis turns a HyperLogLog dense, where an add costs the same however
	// many users the key holds: the first flush sets Redis'
	// hll-sparse-max-bytes to it (0: default DefaultHLLDenseAt; negative:
	// left as Redis has it). hlldense.go says why.
	HLLDenseAt int
	// IfaceUsersEvery is how often Run's flushes send the distinct users
	// of the (app, interface) HyperLogLogs (default 1 min; the app-level
	// ones go with every flush, and Flush and Close send both): under
	// uniform traffic every flush touches nearly every interface's key
	// with a few users, and the PFADD commands, not the users, are what
	// Redis pays for (ifaceadds.go). Queries count the users waiting.
	IfaceUsersEvery time.Duration
	// PersistEvery is how often the app-level HLL registers of the current
	// day are saved to MySQL (default 10 min); interface-level ones are saved
	// once their day is over, and every touched key on Close.
	PersistEvery time.Duration
	// Registerer receives the analytics metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Log        *slog.Logger
	// LiveShards is the number of the Recorder's maps (rounded up to a
	// power of two, default 64).
	LiveShards int
	// HoldOpenMinute makes Run's flushes write the day and curve figures
	// of a minute once, in the first flush after the minute is over, rather
	// than in each flush of the minute (four at 15 s): a quarter of those
	// upserts. The minute in progress is answered from memory meanwhile;
	// other instances see it up to a minute later. Per-user figures and
	// distinct users are written by every flush either way, and Flush and
	// Close write everything.
	HoldOpenMinute bool
}

// withDefaults is o with every unset setting at its default, or an error
// for a setting out of range.
func (o Options) withDefaults() (Options, error) {
	if len(o.DBs) == 0 {
		return o, errors.New("analytics: no MySQL shard")
	}
	if o.Redis == nil {
		return o, errors.New("analytics: no Redis client")
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 15 * time.Second
	}
	if o.FlushDuty <= 0 {
		o.FlushDuty = DefaultFlushDuty
	}
	if o.MaxPendingRows <= 0 {
		o.MaxPendingRows = 2_000_000
	}
	if o.MaxPendingRows > math.MaxInt32 {
		// The Recorder's rows (up to this many) are indexed with 32 bits.
		return o, fmt.Errorf("analytics: MaxPendingRows %d: want at most %d", o.MaxPendingRows, math.MaxInt32)
	}
	if o.RowsPerStatement <= 0 {
		o.RowsPerStatement = 500
	}
	if o.HLLTTL <= 0 {
		o.HLLTTL = 48 * time.Hour
	}
	if o.HLLDenseAt == 0 {
		o.HLLDenseAt = DefaultHLLDenseAt
	}
	if o.IfaceUsersEvery <= 0 {
		o.IfaceUsersEvery = time.Minute
	}
	if o.PersistEvery <= 0 {
		o.PersistEvery = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.LiveShards <= 0 {
		o.LiveShards = 64
	}
	return o, nil
}

// Analytics is the parts New wires together. All are safe for concurrent
// use.
type Analytics struct {
	Recorder *Recorder // Record: each decided call, on the check path
	Flusher  *Flusher  // Run, Flush, Close: the recorded calls into MySQL and Redis
	Stats    *Stats    // the figures, for the stats API and the dashboard
	Rollup   *Rollup   // the scheduled job (QUOTA_ROLLUP_SCHEDULE)
}

// New wires analytics' parts on o's servers. It starts nothing: call
// Flusher.Run for the periodic flush.
func New(o Options) (*Analytics, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	met := newCollectors(o.Registerer)
	dbs := shards(o.DBs)
	rec := newRecorder(o, met)
	uniq := newUniques(o, dbs, met)
	users := &userFigures{perStatement: o.RowsPerStatement, duty: o.FlushDuty, met: met}
	flusher := newFlusher(o, dbs, rec, uniq, users, met)
	return &Analytics{
		Recorder: rec,
		Flusher:  flusher,
		Stats:    &Stats{clk: o.Clock, dbs: dbs, rec: rec, flusher: flusher, uniq: uniq, users: users},
		Rollup:   &Rollup{clk: o.Clock, dbs: dbs, users: users, uniq: uniq},
	}, nil
}

// shards are the MySQL shards, an app's on shards[ShardIndex(app, n)].
type shards []*sql.DB

func (s shards) of(app string) *sql.DB { return s[ShardIndex(app, len(s))] }

// Counts are the figures of one aggregate.
type Counts struct {
	Calls, Allowed, Denied int64
}

func (c *Counts) add(o Counts) {
	c.Calls += o.Calls
	c.Allowed += o.Allowed
	c.Denied += o.Denied
}

func (c *Counts) sub(o Counts) {
	c.Calls -= o.Calls
	c.Allowed -= o.Allowed
	c.Denied -= o.Denied
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

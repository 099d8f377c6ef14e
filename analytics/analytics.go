// Package analytics turns the stream of decided checks into usage figures:
// per app, interface, user and day, distinct users (Redis HyperLogLogs), and
// call curves at falling resolution.
//
// New wires the parts, each a type with one job: Recorder (record.go)
// counts each call in memory, with no I/O; Flusher (flush.go, rows.go)
// every FlushEvery moves the counts into per-shard rows and upserts them
// into MySQL, one transaction per shard, handing the users to uniques
// (uniques.go: Redis HyperLogLogs, their registers saved to MySQL) and the
// per-user rows to userdays.Store (package userdays: compressed chunks
// per (day, app)); Stats (stats.go) answers the figures, MySQL's plus what
// is still in memory; Rollup (rollup.go) is the scheduled job that rolls
// curve points up and merges and seals the per-user chunks. Throttled
// (package throttled) keeps who is throttled; package usage holds what the
// parts share.
//
// Exactly once: a transaction that fails before COMMIT is rolled back and
// its rows stay pending; a COMMIT whose answer is lost is resolved by
// looking up the batch id that the transaction inserted.
package analytics

import (
	"cmp"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics/throttled"
	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
	"github.com/quota-platform/quota/clock"
)

// DefaultFlushDuty is the share of wall time a periodic flush works while it
// is within its budget (Options.FlushDuty; usage.Pacer).
const DefaultFlushDuty = 0.25

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
	// DefaultFlushDuty; 1: flat out).
	FlushDuty float64
	// MaxPendingRows bounds the rows held in memory while MySQL cannot be
	// written (default 2,000,000); calls past it are dropped and counted.
	MaxPendingRows int
	// RowsPerStatement bounds the rows of one INSERT (default 500).
	RowsPerStatement int
	// HLLTTL is the expiry of the daily HyperLogLog keys (default 48 h).
	HLLTTL time.Duration
	// HLLDenseAt is what the first flush sets Redis' hll-sparse-max-bytes
	// to (0: DefaultHLLDenseAt; negative: left as Redis has it).
	HLLDenseAt int
	// IfaceUsersEvery is how often Run's flushes send the distinct users
	// of the (app, interface) HyperLogLogs (default 1 min; the app-level
	// ones go with every flush, and Flush and Close send both).
	IfaceUsersEvery time.Duration
	// PersistEvery is how often the app-level HLL registers are saved to
	// MySQL (default 10 min); interface-level ones once their day is over.
	PersistEvery time.Duration
	// Location is the zone of the analytics day (QUOTA_TIMEZONE): stats
	// dates, "today", distinct users per day. nil: UTC.
	Location *time.Location
	// Registerer receives the analytics metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Log        *slog.Logger
	// LiveShards is the number of the Recorder's maps (rounded up to a
	// power of two, default 64).
	LiveShards int
	// HoldOpenMinute makes Run's flushes write the day and curve figures
	// of a minute once, in the first flush after the minute is over, rather
	// than in each of the minute's flushes. Flush and Close write
	// everything.
	HoldOpenMinute bool
	// Throttled bounds the who-is-throttled summaries (package throttled).
	Throttled throttled.Options
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
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	orDefault(&o.FlushEvery, 15*time.Second)
	orDefault(&o.FlushDuty, DefaultFlushDuty)
	orDefault(&o.MaxPendingRows, 2_000_000)
	orDefault(&o.RowsPerStatement, 500)
	orDefault(&o.HLLTTL, 48*time.Hour)
	orDefault(&o.IfaceUsersEvery, time.Minute)
	orDefault(&o.PersistEvery, 10*time.Minute)
	orDefault(&o.LiveShards, 64)
	o.HLLDenseAt = cmp.Or(o.HLLDenseAt, DefaultHLLDenseAt)
	if o.MaxPendingRows > math.MaxInt32 { // the Recorder's rows are indexed with 32 bits
		return o, fmt.Errorf("analytics: MaxPendingRows %d: want at most %d", o.MaxPendingRows, math.MaxInt32)
	}
	return o, nil
}

// orDefault sets *v to def unless it is positive.
func orDefault[T int | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Analytics is the parts New wires together. All are safe for concurrent
// use.
type Analytics struct {
	Recorder *Recorder // Record: each decided call, on the check path
	Flusher  *Flusher  // Run, Flush, Close: the recorded calls into MySQL and Redis
	Stats    *Stats    // the figures, for the stats API and the dashboard
	Rollup   *Rollup   // the scheduled job (QUOTA_ROLLUP_SCHEDULE)
	// Throttled: the most denied identities per (day, app, rule); Denied
	// on the check path (denials only), Run for its flushes.
	Throttled *throttled.Throttled
}

// New wires analytics' parts on o's servers. It starts nothing: call
// Flusher.Run for the periodic flush.
func New(o Options) (*Analytics, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	met := newCollectors(o.Registerer)
	dbs := usage.Shards(o.DBs)
	rec := newRecorder(o, met)
	uniq := newUniques(o, dbs, met)
	users := userdays.NewStore(o.RowsPerStatement, o.FlushDuty, met.rowsWritten, met.statements)
	flusher := newFlusher(o, dbs, rec, uniq, users, met)
	return &Analytics{
		Recorder:  rec,
		Flusher:   flusher,
		Stats:     &Stats{clk: o.Clock, days: Days{Loc: o.Location}, dbs: dbs, rec: rec, flusher: flusher, uniq: uniq, users: users},
		Rollup:    &Rollup{clk: o.Clock, days: Days{Loc: o.Location}, dbs: dbs, users: users, uniq: uniq},
		Throttled: throttled.New(o.Clock, Days{Loc: o.Location}, dbs, o.Throttled, o.Registerer),
	}, nil
}

// The figures' vocabulary is package usage's, which analytics' parts
// share; these names keep it in analytics' API.
type (
	Counts = usage.Counts // the figures of one aggregate
	Day    = usage.Day    // a civil date
	Days   = usage.Days   // the days of the analytics' time zone
)

// DayOf is the UTC day of t.
func DayOf(t time.Time) Day { return usage.DayOf(t) }

// ParseDay reads YYYY-MM-DD.
func ParseDay(s string) (Day, error) { return usage.ParseDay(s) }

// ShardIndex is the MySQL shard (0…shards-1) of an app's analytics rows
// (usage.ShardIndex).
func ShardIndex(appID string, shards int) int { return usage.ShardIndex(appID, shards) }

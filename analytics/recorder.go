// Package analytics turns the stream of decided checks into usage figures:
// per app, interface, user and day, distinct users (Redis HyperLogLogs), and
// call curves at falling resolution.
//
// A Recorder does five things, each in its own files:
//   - recording (record.go): Record adds one to a count per (app,
//     interface, user, minute) in one of many small maps, no I/O;
//   - flushing (flush.go, rows.go): every FlushEvery (15 s by default) the
//     counts move into per-shard rows, written to MySQL in multi-row
//     INSERT … ON DUPLICATE KEY UPDATE statements, one transaction per
//     shard, so the write rate follows the distinct rows, not the calls;
//   - distinct users (hll.go, ifaceadds.go, hllstore.go, hlldense.go):
//     pipelined PFADDs to Redis HyperLogLogs in the same flush, their
//     registers saved to MySQL;
//   - per-user figures (userchunk.go, chunkmerge.go, userfold.go,
//     userseal.go): compressed chunks per (day, app), merged as the day
//     goes on and sealed once it is over (rollup.go runs both);
//   - queries (query.go): MySQL's figures plus what is still in memory.
//
// Exactly once: a transaction that fails before COMMIT is rolled back and
// its rows stay pending for the next flush; a COMMIT whose answer is lost is
// resolved by looking up the batch id that the transaction inserted.
package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
)

// Options configure a Recorder. DBs and Redis are required.
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
	// LiveShards is the number of in-memory aggregate maps (rounded up to a
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

// Recorder records usage and answers questions about it. It is safe for
// concurrent use.
type Recorder struct {
	opt Options
	clk clock.Clock
	log *slog.Logger
	rdb redis.UniversalClient
	met *collectors

	// Recording (record.go): the calls not yet folded into rows.
	live *live

	// mu orders readers (stats queries: DB, then memory) against the
	// flusher's moves of rows between memory and MySQL, so a row is seen
	// exactly once. Only the flusher (holding flushing) writes shards and
	// the distinct-user queues, and only with mu held.
	mu       sync.RWMutex
	flushing sync.Mutex
	// Flushing (flush.go, rows.go): each MySQL shard's rows not yet
	// written, day and curve figures and per-user figures (userchunk.go).
	shards      []*dbShard
	lastDropLog time.Time
	// Distinct users (hll.go, ifaceadds.go, hllstore.go): the adds
	// waiting for Redis and the keys to save to MySQL.
	uniques

	sparseOnce sync.Once // sets hll-sparse-max-bytes
	runOnce    sync.Once
	stop       chan struct{}
	stopOnce   sync.Once
	done       chan struct{}
}

// uniques is the flusher's state of the distinct-user HyperLogLogs.
type uniques struct {
	hllQueue      []userAdd              // distinct-user adds not yet sent to Redis
	ifaceQueue    ifaceAdds              // adds whose interface-level add waits for the interface pass
	ifaceView     []userAdd              // the interface pass's view of ifaceQueue (the flusher's alone)
	lastIfacePass time.Time              // when the interface pass last sent all of ifaceQueue
	touched       map[hllKey]*touchedHLL // keys added to since persisted (the flusher's alone)
	pfaddUsers    stringArena            // PFADD arguments (the flusher's alone)
	lastPersist   time.Time
}

type dbShard struct {
	db      *sql.DB
	pending *rowset // rows certainly not in MySQL
	// open is the day and curve figures of the minute in progress, held
	// back from a periodic flush's write (Options.HoldOpenMinute) while it
	// writes pending; nil when none is held.
	open      *rowset
	uncertain []*batch // rows whose COMMIT answer was lost
}

// unwritten is every rowset of the shard not known to be in MySQL (caller
// holds the Recorder's mu).
func (sh *dbShard) unwritten() []*rowset {
	out := make([]*rowset, 0, 2+len(sh.uncertain))
	out = append(out, sh.pending)
	if sh.open != nil {
		out = append(out, sh.open)
	}
	for _, b := range sh.uncertain {
		out = append(out, b.rows)
	}
	return out
}

type batch struct {
	id   [16]byte
	rows *rowset
}

// New makes a Recorder. It starts nothing: call Run for the periodic flush.
func New(o Options) (*Recorder, error) {
	if len(o.DBs) == 0 {
		return nil, errors.New("analytics: no MySQL shard")
	}
	if o.Redis == nil {
		return nil, errors.New("analytics: no Redis client")
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
		// The live rows (up to this many) are indexed with 32 bits.
		return nil, fmt.Errorf("analytics: MaxPendingRows %d: want at most %d", o.MaxPendingRows, math.MaxInt32)
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
	n := 1
	for n < o.LiveShards || (o.LiveShards <= 0 && n < 64) {
		n <<= 1
	}
	r := &Recorder{
		opt:     o,
		clk:     o.Clock,
		log:     o.Log,
		rdb:     o.Redis,
		met:     newCollectors(o.Registerer),
		live:    newLive(n, o.MaxPendingRows),
		uniques: uniques{touched: map[hllKey]*touchedHLL{}},
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	for _, db := range o.DBs {
		r.shards = append(r.shards, &dbShard{db: db, pending: newRowset()})
	}
	r.lastPersist = r.clk.Now()
	r.met.lastFlush.Set(float64(r.lastPersist.Unix()))
	r.lastIfacePass = r.lastPersist
	return r, nil
}

// Record adds one decided call. It never blocks on I/O: it takes one of
// many small locks for a map update.
func (r *Recorder) Record(appID, interfaceID, userID string, allowed bool) {
	m := floorDiv(r.clk.Now().Unix(), 60) * 60
	if !r.live.record(m, appID, interfaceID, userID, allowed) {
		r.met.dropped.Inc()
	}
}

// Run flushes every FlushEvery until ctx is done or Close is called.
func (r *Recorder) Run(ctx context.Context) {
	started := false
	r.runOnce.Do(func() { started = true })
	if !started {
		return
	}
	defer close(r.done)
	t := time.NewTicker(r.opt.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.stop:
			return
		case <-t.C:
		}
		fctx, cancel := context.WithTimeout(ctx, max(r.opt.FlushEvery, 30*time.Second))
		pace := newPacer(r.opt.FlushDuty, time.Now().Add(r.opt.FlushEvery/2), r.stop)
		if err := r.flush(fctx, false, pace, r.periodicHold()); err != nil {
			r.log.Warn("analytics flush failed; rows kept for the next flush", "err", err)
		}
		cancel()
	}
}

// periodicHold is the hold of one of Run's flushes: the minute in
// progress with Options.HoldOpenMinute, else none.
func (r *Recorder) periodicHold() int64 {
	if !r.opt.HoldOpenMinute {
		return writeAll
	}
	return Res1m.Floor(r.clk.Now().Unix())
}

// Close stops Run and flushes what is pending, persisting the distinct-user
// registers of every key touched. Calls recorded after Close has returned are
// kept in memory only.
func (r *Recorder) Close(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	r.runOnce.Do(func() { close(r.done) }) // Run never started
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.flush(ctx, true, nil, writeAll)
}

// Flush writes every pending aggregate now, flat out (Run paces its own).
func (r *Recorder) Flush(ctx context.Context) error { return r.flush(ctx, false, nil, writeAll) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

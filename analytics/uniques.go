package analytics

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/snappy"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/clock"
)

const (
	pfaddChunk    = 1000 // users per PFADD
	pipelineChunk = 500  // commands per pipeline round trip (and pacing step)
)

// uniques counts distinct users per app and per (app, interface) and UTC
// day, each a Redis HyperLogLog. The Flusher queues each flush's users
// (enqueue) and sends them (send): the app-level adds with every flush, the
// interface-level ones every IfaceUsersEvery, since with spread keys every
// flush touches nearly every interface's key with a few users and Redis
// pays per command (BenchmarkFlushServerCPU). The registers are saved to
// MySQL (persist), so that a count outlives its Redis key.
type uniques struct {
	opt Options
	clk clock.Clock
	log *slog.Logger
	rdb redis.UniversalClient
	dbs usage.Shards
	met *collectors

	// mu orders readers (pending) against the moves of adds from queue to
	// ifaceQueue and out of it.
	mu         sync.RWMutex
	queue      []userAdd // adds not yet sent to Redis
	ifaceQueue ifaceAdds // adds whose app-level add Redis has, waiting for the interface pass

	// sending is held by send and persist: what follows is theirs alone.
	sending       sync.Mutex
	lastIfacePass time.Time              // when the interface pass last sent all of ifaceQueue
	touched       map[hllKey]*touchedHLL // keys added to since persisted
	ifaceView     []userAdd              // a step of the interface pass
	lastPersist   time.Time
	sparseOnce    sync.Once // sets hll-sparse-max-bytes
}

func newUniques(o Options, dbs usage.Shards, met *collectors) *uniques {
	now := o.Clock.Now()
	return &uniques{opt: o, clk: o.Clock, log: o.Log, rdb: o.Redis, dbs: dbs, met: met,
		touched: map[hllKey]*touchedHLL{}, lastIfacePass: now, lastPersist: now}
}

// enqueue adds adds to the queue, up to MaxPendingRows of them waiting
// (the rest are dropped and counted).
func (u *uniques) enqueue(adds []userAdd) {
	u.mu.Lock()
	room := max(0, u.opt.MaxPendingRows-len(u.queue))
	u.queue = append(u.queue, adds[:min(room, len(adds))]...)
	u.mu.Unlock()
	if lost := len(adds) - min(room, len(adds)); lost > 0 {
		u.met.droppedAdds.Add(float64(lost))
	}
}

// userAdd is a user to add to the distinct-user HyperLogLogs of its app and
// of its app's interface on day.
type userAdd struct {
	// group puts the adds of one HyperLogLog next to each other when the
	// queue is sorted by it: a hash of the app and day in the high 40
	// bits, of the interface in the low 24 (a collision only splits a run).
	// Kept: sorting by (day, id) costs 1,330 instructions an add more, 13–20 % of a flush (BenchmarkSortUserAdds).
	group uint64
	id    usage.RowID // app, interface and user
	day   Day
}

func groupOf(appHash uint64, day Day, iface string) uint64 {
	const ifaceBits = 24
	ad := (appHash ^ uint64(day)*0x9E3779B97F4A7C15) << ifaceBits
	return ad | usage.FNV1a64(iface)&(1<<ifaceBits-1)
}

// send sends the queued distinct users to their app-level HyperLogLogs
// and moves them to the interface-level queue, whose users it sends when
// the interface pass is due (always when all). PFADD is idempotent, so a
// pipeline that failed is simply sent again.
func (u *uniques) send(ctx context.Context, pace *usage.Pacer, all bool) error {
	u.sending.Lock()
	defer u.sending.Unlock()
	u.sparseLimit(ctx)
	// Sorted into runs of one key, under mu: readers scan the queue.
	u.mu.Lock()
	slices.SortFunc(u.queue, func(a, b userAdd) int { return cmp.Compare(a.group, b.group) })
	u.mu.Unlock()
	sent, err := u.pfaddRuns(ctx, pace, u.queue, scopeApp)
	u.dropQueued(sent)
	if err == nil && (all || u.ifaceDue(u.clk.Now())) {
		err = u.ifacePass(ctx, pace)
	}
	return err
}

// pfaddRuns sends the users of q (sorted by group) to their HyperLogLogs of
// scope, in pipelines of whole runs of one key, resting after each as pace
// says. It returns how many of q Redis has (a prefix).
func (u *uniques) pfaddRuns(ctx context.Context, pace *usage.Pacer, q []userAdd, scope uint8) (int, error) {
	now := u.clk.Now()
	args := make([]any, 0, pfaddChunk)
	// *string arguments: an any holding a string allocates, 3.8 % (BenchmarkRecordAndPeriodicFlush, GOGC=off).
	users := make([]string, len(q))
	var expiring []hllKey // keys whose TTL this pipeline sets
	sent := 0
	for sent < len(q) {
		pipe := u.rdb.Pipeline()
		cmds, hi := 0, sent
		expiring = expiring[:0]
		for hi < len(q) && cmds < pipelineChunk {
			k, n := q[hi].key(scope)
			end := hi + 1
			for end < len(q) && q[end].day == k.day && strings.HasPrefix(string(q[end].id), string(q[hi].id[:n])) {
				end++
			}
			t := u.touchedKey(k)
			for lo := hi; lo < end; lo += pfaddChunk {
				args = args[:0]
				for i := lo; i < min(lo+pfaddChunk, end); i++ {
					users[i] = q[i].id.User()
					args = append(args, &users[i])
				}
				pipe.PFAdd(ctx, t.name, args...) // go-redis copies args
				cmds++
			}
			if now.Sub(t.ttlSet) >= u.expireEvery() {
				pipe.Expire(ctx, t.name, u.opt.HLLTTL)
				expiring = append(expiring, k)
				cmds++
			}
			hi = end
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return sent, err
		}
		for _, k := range expiring {
			u.touched[k].ttlSet = now
		}
		sent = hi
		pace.Rest(ctx)
	}
	return sent, nil
}

// ifacePass sends the waiting adds to their interface-level HyperLogLogs,
// viewed ifaceViewSize at a time (a view of a minute's adds would be tens
// of MB for the collector), and empties the queue when Redis has them all.
func (u *uniques) ifacePass(ctx context.Context, pace *usage.Pacer) error {
	now := u.clk.Now()
	q := &u.ifaceQueue
	u.mu.Lock() // readers scan the adds
	slices.SortFunc(q.adds, func(a, b ifaceAdd) int { return cmp.Compare(a.group, b.group) })
	u.mu.Unlock()
	for lo := 0; lo < len(q.adds); lo += ifaceViewSize {
		view := q.view(lo, min(lo+ifaceViewSize, len(q.adds)), u.ifaceView[:0])
		_, err := u.pfaddRuns(ctx, pace, view, scopeIface)
		clear(view) // no strings over the buffer kept past the pass
		u.ifaceView = view[:0]
		if err != nil {
			return err // the whole pass is made again
		}
	}
	u.mu.Lock()
	q.reset()
	u.mu.Unlock()
	u.lastIfacePass = now
	return nil
}

const ifaceViewSize = 1 << 14

// ifaceDue reports whether the interface pass is due at now: IfaceUsersEvery
// has passed since the last one, or an add is of a day before now's, whose
// keys persist saves now that the day is over.
func (u *uniques) ifaceDue(now time.Time) bool {
	q := &u.ifaceQueue
	return len(q.adds) > 0 && (now.Sub(u.lastIfacePass) >= u.opt.IfaceUsersEvery || q.minDay < (Days{Loc: u.opt.Location}).Of(now))
}

// touchedHLL is a HyperLogLog added to since it was last persisted.
type touchedHLL struct {
	ttlSet time.Time      // when its TTL was last set (zero: not yet)
	name   string         // its Redis key
	names  canonicalNames // keeps the key's names canonical while it is touched
}

// touchedKey returns k's entry in touched, made if none (with canonical
// copies of its names, as rowset.ifaceDay).
func (u *uniques) touchedKey(k hllKey) *touchedHLL {
	t := u.touched[k]
	if t == nil {
		names := internNames(&k.app, &k.iface)
		t = &touchedHLL{name: k.redisKey(u.opt.KeyPrefix), names: names}
		u.touched[k] = t
	}
	return t
}

// expireEvery is how often a HyperLogLog's TTL is set again while it is
// added to: it bounds how long a key that Redis lost and PFADD re-created
// lives without one, without an EXPIRE beside every PFADD.
func (u *uniques) expireEvery() time.Duration { return min(time.Hour, u.opt.HLLTTL/4) }

// key is the HyperLogLog of scope that a adds to, and the length of the
// id's prefix that names it (its fields are length-prefixed: ids with that
// prefix name the same app and interface).
func (a *userAdd) key(scope uint8) (hllKey, int) {
	app, n := usage.RowField(a.id, 0)
	k := hllKey{app: app, scope: scope, day: a.day}
	if scope == scopeIface {
		k.iface, n = usage.RowField(a.id, n)
	}
	return k, n
}

// dropQueued moves the first n queued adds, whose app-level add Redis has,
// to the interface-level queue (up to MaxPendingRows of them waiting).
func (u *uniques) dropQueued(n int) {
	if n == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	lost := 0
	for i := range u.queue[:n] {
		if len(u.ifaceQueue.adds) >= u.opt.MaxPendingRows || !u.ifaceQueue.add(&u.queue[i]) {
			lost++
		}
	}
	if lost > 0 {
		u.met.droppedAdds.Add(float64(lost))
	}
	rest := copy(u.queue, u.queue[n:])
	clear(u.queue[rest:]) // no ids kept alive past their use
	u.queue = u.queue[:rest]
}

// pending adds to extra the users not yet in Redis of the keys like k
// from k.day to last.
func (u *uniques) pending(k hllKey, last Day, extra map[hllKey][]string) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	for i := range u.queue {
		a := &u.queue[i]
		if a.day < k.day || a.day > last || a.id.App() != k.app || (k.scope == scopeIface && a.id.Iface() != k.iface) {
			continue
		}
		dk := k
		dk.day = a.day
		extra[dk] = append(extra[dk], a.id.User())
	}
	if k.scope == scopeIface {
		u.ifaceQueue.pending(k, last, extra)
	}
}

// updateGauges sets the gauges of the adds waiting.
func (u *uniques) updateGauges() {
	u.mu.RLock()
	defer u.mu.RUnlock()
	// An add waiting for its app-level key waits for its interface-level
	// one too.
	u.met.pendingAdds.WithLabelValues("app").Set(float64(len(u.queue)))
	u.met.pendingAdds.WithLabelValues("interface").Set(float64(len(u.queue) + len(u.ifaceQueue.adds)))
}

// persistChunk is how many HyperLogLogs one persisting step reads, merges
// and saves: 200 dense ones (12 KB each) stay under max_allowed_packet.
const persistChunk = 200

// persist saves the registers of the touched HyperLogLogs to MySQL: the
// app-level keys of every day, interface-level keys once their day is over
// (all of them when final). The saved registers are first merged back into
// Redis, so a key that Redis lost never overwrites a fuller saved copy. A
// shard that fails keeps its keys for the next run. With onlyDue, it saves
// nothing before PersistEvery has passed since the last save (unless final).
func (u *uniques) persist(ctx context.Context, final, onlyDue bool) error {
	u.sending.Lock()
	defer u.sending.Unlock()
	now := u.clk.Now()
	if onlyDue && !final && now.Sub(u.lastPersist) < u.opt.PersistEvery {
		return nil
	}
	today := Days{Loc: u.opt.Location}.Of(now)
	byShard := make([][]hllKey, len(u.dbs))
	for k := range u.touched {
		if final || k.scope == scopeApp || k.day < today {
			i := usage.ShardIndex(k.app, len(u.dbs))
			byShard[i] = append(byShard[i], k)
		}
	}
	var errs []error
	for i, keys := range byShard {
		for chunk := range slices.Chunk(keys, persistChunk) {
			if err := u.persistKeys(ctx, u.dbs[i], chunk); err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
				break
			}
			for _, k := range chunk {
				delete(u.touched, k)
			}
		}
	}
	if len(errs) == 0 && onlyDue {
		u.lastPersist = now
	}
	return errors.Join(errs...)
}

// persistKeys saves the registers of keys, all on the shard db.
func (u *uniques) persistKeys(ctx context.Context, db *sql.DB, keys []hllKey) error {
	saved, err := loadRegistersOf(ctx, db, keys)
	if err != nil {
		return fmt.Errorf("usage_uniques read: %w", err)
	}
	regs, counts, err := u.mergeAndRead(ctx, keys, saved)
	if err != nil {
		return err
	}
	var q strings.Builder
	q.WriteString("INSERT INTO usage_uniques (app_id, day, scope, interface_id, unique_users, registers) VALUES ")
	args := make([]any, 0, 6*len(keys))
	n := 0
	for i, k := range keys {
		if regs[i] == nil {
			continue // nothing in Redis, nothing saved: no user that day
		}
		if n > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?, ?, ?, ?, ?, ?)")
		args = append(args, k.app, k.day.String(), k.scope, k.iface, counts[i], packRegisters(regs[i]))
		n++
	}
	if n == 0 {
		return nil
	}
	q.WriteString(" ON DUPLICATE KEY UPDATE unique_users = VALUES(unique_users), registers = VALUES(registers)")
	u.met.statements.WithLabelValues("usage_uniques").Inc()
	if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
		return fmt.Errorf("usage_uniques: %w", err)
	}
	u.met.rowsWritten.WithLabelValues("usage_uniques").Add(float64(n))
	return nil
}

// mergeAndRead merges the saved registers into Redis and reads each key's
// registers and count back, in one pipeline. regs[i] is nil when Redis has
// no such key.
func (u *uniques) mergeAndRead(ctx context.Context, keys []hllKey, saved map[hllKey]savedHLL) ([][]byte, []int64, error) {
	pipe := u.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	cnts := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		rk := k.redisKey(u.opt.KeyPrefix)
		if regs := saved[k].regs; regs != nil {
			mergeRegisters(ctx, pipe, rk, regs)
			pipe.Expire(ctx, rk, u.opt.HLLTTL)
		}
		gets[i] = pipe.Get(ctx, rk)
		cnts[i] = pipe.PFCount(ctx, rk)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("redis HLL read: %w", err)
	}
	regs := make([][]byte, len(keys))
	counts := make([]int64, len(keys))
	for i := range keys {
		b, err := gets[i].Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("redis HLL read: %w", err)
		}
		regs[i], counts[i] = b, cnts[i].Val()
	}
	return regs, counts, nil
}

// mergeRegisters queues in pipe the merge of regs (a HyperLogLog's Redis
// value) into key rk, through a temporary key in rk's cluster slot.
func mergeRegisters(ctx context.Context, pipe redis.Pipeliner, rk string, regs []byte) {
	tmp := rk + ":merge"
	pipe.Set(ctx, tmp, regs, time.Minute)
	pipe.PFMerge(ctx, rk, tmp)
	pipe.Del(ctx, tmp)
}

// savedHLL is a HyperLogLog as usage_uniques keeps it.
type savedHLL struct {
	regs  []byte // the Redis HLL value
	users int64  // its count when saved
}

// loadRegistersOf reads the saved registers of keys (all on db), one
// SELECT per persistChunk keys; keys without a saved row are absent.
func loadRegistersOf(ctx context.Context, db *sql.DB, keys []hllKey) (map[hllKey]savedHLL, error) {
	out := make(map[hllKey]savedHLL, len(keys))
	for chunk := range slices.Chunk(keys, persistChunk) {
		if err := loadRegisterChunk(ctx, db, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func loadRegisterChunk(ctx context.Context, db *sql.DB, keys []hllKey, out map[hllKey]savedHLL) error {
	var q strings.Builder
	q.WriteString("SELECT app_id, day, scope, interface_id, registers, unique_users FROM usage_uniques WHERE ")
	args := make([]any, 0, 4*len(keys))
	for i, k := range keys {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(app_id = ? AND day = ? AND scope = ? AND interface_id = ?)")
		args = append(args, k.app, k.day.String(), k.scope, k.iface)
	}
	return usage.EachRow(ctx, db, q.String(), args, func(rows *sql.Rows) error {
		var k hllKey
		var day string
		var h savedHLL
		err := rows.Scan(&k.app, &day, &k.scope, &k.iface, &h.regs, &h.users)
		if err == nil {
			k.day, err = usage.ParseSQLDay(day)
		}
		if err != nil {
			return err
		}
		if h.regs, err = unpackRegisters(h.regs); err != nil {
			return fmt.Errorf("usage_uniques %s %s: %w", k.app, day, err)
		}
		out[k] = h
		return nil
	})
}

// count is the number of distinct users over the union of keys (all of
// one app): Redis's registers, the saved ones and extra users not yet
// added. Without Redis it falls back to the largest saved count.
func (u *uniques) count(ctx context.Context, keys []hllKey, extra map[hllKey][]string) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	found, err := loadRegistersOf(ctx, u.dbs.Of(keys[0].app), keys)
	if err != nil {
		return 0, err
	}
	var fallback int64
	saved := make([][]byte, len(keys))
	for i, k := range keys {
		saved[i] = found[k].regs
		fallback = max(fallback, found[k].users)
	}
	pipe := u.rdb.TxPipeline()
	count := make([]string, 0, 2*len(keys))
	var tmps []string
	for i, k := range keys {
		rk := k.redisKey(u.opt.KeyPrefix)
		if users := extra[k]; len(users) > 0 {
			for c := range slices.Chunk(users, pfaddChunk) {
				args := make([]any, len(c))
				for i, u := range c {
					args[i] = u
				}
				pipe.PFAdd(ctx, rk, args...)
			}
			pipe.Expire(ctx, rk, u.opt.HLLTTL)
		}
		count = append(count, rk)
		if saved[i] != nil {
			tmp := fmt.Sprintf("%s:read:%d", rk, i)
			pipe.Set(ctx, tmp, saved[i], u.opt.HLLTTL)
			tmps = append(tmps, tmp)
			count = append(count, tmp)
		}
	}
	res := pipe.PFCount(ctx, count...)
	if len(tmps) > 0 {
		pipe.Del(ctx, tmps...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		u.log.Warn("analytics: distinct users from Redis failed; answering the saved count", "err", err)
		return fallback, nil
	}
	return res.Val(), nil
}

// hllKey names one daily distinct-user HyperLogLog.
type hllKey struct {
	app   string
	iface string // "" for the app scope
	scope uint8  // scopeApp or scopeIface
	day   Day
}

const (
	scopeApp   = 0
	scopeIface = 1
)

// redisKey is the HLL's Redis key: prefix + "hll:{" + hash of the app + "}:"
// + day + ":a" or ":i:" + hash of the interface. The {…} tag keeps one
// app's keys in one cluster slot (PFCOUNT and PFMERGE over several keys).
// Kept without fmt: fmt costs 4.5 % (BenchmarkRecordAndPeriodicFlush, GOGC=off) of a 1.1× budget.
func (k hllKey) redisKey(prefix string) string {
	hex16 := func(b []byte, x uint64) []byte { return hex.AppendEncode(b, binary.BigEndian.AppendUint64(nil, x)) }
	b := hex16(append([]byte(prefix), "hll:{"...), usage.FNV1a64(k.app))
	b = append(strconv.AppendInt(append(b, "}:"...), int64(k.day), 10), ':')
	if k.scope == scopeApp {
		return string(append(b, 'a'))
	}
	return string(hex16(hex16(append(b, "i:"...), usage.FNV1a64(k.iface)), usage.FNV1a64("\x00"+k.iface)))
}

// Redis keeps a HyperLogLog sparse until it passes hll-sparse-max-bytes,
// and a PFADD into a sparse key walks the whole encoding, where a dense add
// costs the same however many users (BenchmarkPFADD). So the first flush
// sets that limit to Options.HLLDenseAt: busy keys turn dense early.

// DefaultHLLDenseAt is Options.HLLDenseAt's default: a few hundred users.
const DefaultHLLDenseAt = 1000

// sparseLimit sets Redis' hll-sparse-max-bytes to HLLDenseAt, once; a Redis
// that refuses CONFIG (a managed one may) keeps its own, with a warning.
func (u *uniques) sparseLimit(ctx context.Context) {
	if u.opt.HLLDenseAt < 0 {
		return
	}
	u.sparseOnce.Do(func() {
		if err := u.rdb.ConfigSet(ctx, "hll-sparse-max-bytes", strconv.Itoa(u.opt.HLLDenseAt)).Err(); err != nil {
			u.log.Warn("analytics: Redis refused CONFIG SET hll-sparse-max-bytes; busy distinct-user counts stay sparse longer and cost Redis more",
				"err", err, "want_bytes", u.opt.HLLDenseAt)
		}
	})
}

// usage_uniques.registers holds a HyperLogLog's Redis value (it starts
// "HYLL"), snappy-compressed when that is shorter (a dense key is 12 KB of
// mostly zeros). A snappy block never starts "HYLL" (after its length byte
// 'H' comes a literal's tag, low bits 00; 'Y' is 0x59), so rows saved raw
// read back as they are.
var hllMagic = []byte("HYLL")

// packRegisters is v as usage_uniques stores it.
func packRegisters(v []byte) []byte {
	if c := snappy.Encode(nil, v); len(c) < len(v) {
		return c
	}
	return v
}

// unpackRegisters is the Redis value of a usage_uniques.registers.
func unpackRegisters(b []byte) ([]byte, error) {
	if bytes.HasPrefix(b, hllMagic) {
		return b, nil
	}
	v, err := snappy.Decode(nil, b)
	if err != nil || !bytes.HasPrefix(v, hllMagic) {
		return nil, fmt.Errorf("registers of %d bytes: neither a HyperLogLog nor a compressed one", len(b))
	}
	return v, nil
}

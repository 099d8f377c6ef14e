package analytics

import (
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

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
)

const (
	pfaddChunk    = 1000 // users per PFADD
	pipelineChunk = 500  // commands per pipeline round trip (and pacing step)
)

// uniques counts distinct users: per app and per (app, interface) and UTC
// day, each a Redis HyperLogLog. The Flusher queues each flush's users
// (enqueue) and sends them (send): the app-level adds with every flush, the
// interface-level ones in a pass every IfaceUsersEvery (ifaceadds.go).
// The registers are saved to MySQL (persist, hllstore.go), so that a count
// outlives its Redis key.
type uniques struct {
	opt Options
	clk clock.Clock
	log *slog.Logger
	rdb redis.UniversalClient
	dbs shards
	met *collectors

	// mu orders readers (pending) against the moves of adds from queue to
	// ifaceQueue and out of it.
	mu         sync.RWMutex
	queue      []userAdd // adds not yet sent to Redis
	ifaceQueue ifaceAdds // adds whose interface-level add waits for the interface pass

	// sending is held by send and persist: what follows is theirs alone.
	sending       sync.Mutex
	ifaceView     []userAdd              // the interface pass's view of ifaceQueue
	lastIfacePass time.Time              // when the interface pass last sent all of ifaceQueue
	touched       map[hllKey]*touchedHLL // keys added to since persisted
	pfaddUsers    stringArena            // PFADD arguments
	lastPersist   time.Time
	sparseOnce    sync.Once // sets hll-sparse-max-bytes
}

func newUniques(o Options, dbs shards, met *collectors) *uniques {
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
	// bits, of the interface in the low 24. Sorting by one integer is
	// several times cheaper than by the strings; a collision only splits a
	// run into more PFADDs (runs compare the strings).
	group uint64
	id    rowID // app, interface and user
	day   Day
}

func groupOf(appHash uint64, day Day, iface string) uint64 {
	const ifaceBits = 24
	ad := (appHash ^ uint64(day)*0x9E3779B97F4A7C15) << ifaceBits
	return ad | FNV1a64(iface)&(1<<ifaceBits-1)
}

// send sends the queued distinct users to their app-level HyperLogLogs
// and moves them to the interface-level queue (ifaceadds.go), whose users
// it sends when the interface pass is due (always when all). Only the
// Flusher queues and sends, one flush at a time. PFADD is idempotent, so a pipeline that failed
// half-way is simply sent again: the app-days sent before it leave the
// queue; an interface pass that failed is made again whole.
func (u *uniques) send(ctx context.Context, pace *pacer, all bool) error {
	u.sending.Lock()
	defer u.sending.Unlock()
	u.sparseLimit(ctx)
	// Sorted so that pfaddRuns walks it in runs of one key; under mu,
	// because readers scan the queue.
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
// scope, in pipelines of whole runs of one app-day, resting after each as
// pace says. It returns how many of q Redis has (a prefix).
func (u *uniques) pfaddRuns(ctx context.Context, pace *pacer, q []userAdd, scope uint8) (int, error) {
	now := u.clk.Now()
	args := make([]any, 0, pfaddChunk)
	users := &u.pfaddUsers
	defer users.reset()   // no ids kept alive past the call, whatever its end
	var expiring []hllKey // keys whose TTL this pipeline sets
	// pfadd adds the users of adds to k, each the rest of its id from
	// userAt (-1: each id's own user field).
	pfadd := func(pipe redis.Pipeliner, k hllKey, adds []userAdd, userAt int) int {
		t := u.touchedKey(k)
		rk := t.name
		cmds := 0
		args = args[:0]
		for i := range adds {
			var user string
			if userAt < 0 {
				user = adds[i].id.user()
			} else {
				user = string(adds[i].id[userAt:])
			}
			args = append(args, users.ref(user))
			if len(args) == pfaddChunk {
				pipe.PFAdd(ctx, rk, args...) // go-redis copies args
				cmds++
				args = args[:0]
			}
		}
		if len(args) > 0 {
			pipe.PFAdd(ctx, rk, args...)
			cmds++
		}
		if now.Sub(t.ttlSet) >= u.expireEvery() {
			pipe.Expire(ctx, rk, u.opt.HLLTTL)
			expiring = append(expiring, k)
			cmds++
		}
		return cmds
	}
	sent := 0
	for sent < len(q) {
		pipe := u.rdb.Pipeline()
		cmds, hi := 0, sent
		expiring = expiring[:0]
		for hi < len(q) && cmds < pipelineChunk {
			// Runs compare the ids' first bytes, through the app or the
			// interface: the fields are length-prefixed, so equal bytes
			// are equal fields (and no field is decoded per add).
			app, appEnd := rowField(q[hi].id, 0)
			end := runEnd(q, hi, func(a, b *userAdd) bool {
				return a.group>>24 == b.group>>24 && a.day == b.day && hasPrefix(b.id, a.id[:appEnd])
			})
			if scope == scopeApp {
				// The app-day's users, repeats included (PFADD takes them).
				cmds += pfadd(pipe, hllKey{app: app, scope: scopeApp, day: q[hi].day}, q[hi:end], -1)
				hi = end
				continue
			}
			for lo := hi; lo < end; {
				iface, ifaceEnd := rowField(q[lo].id, appEnd)
				iend := runEnd(q[:end], lo, func(a, b *userAdd) bool { return a.group == b.group && hasPrefix(b.id, a.id[:ifaceEnd]) })
				cmds += pfadd(pipe, hllKey{app: app, iface: iface, scope: scopeIface, day: q[lo].day}, q[lo:iend], ifaceEnd)
				lo = iend
			}
			hi = end
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return sent, err
		}
		users.reset()
		for _, k := range expiring {
			t := u.touched[k] // through the pointer: assigning would store k's strings as the key
			t.ttlSet = now
		}
		sent = hi
		pace.rest(ctx)
	}
	return sent, nil
}

// stringArena holds strings for command arguments as *string, which go-redis
// writes as the string: an any holding a *string needs no allocation of its
// own, one holding a string does (one per user added, 16 bytes each). The
// uniques keep one for the sender, so that its array, grown to a
// pipeline's users once, serves every later pipeline rather than each
// call of the interface pass growing one from empty. Kept with ifaceAdds'
// buffer: see there (BenchmarkRecordAndFlush).
type stringArena struct{ buf []string }

// ref stores s and returns a pointer to it as an argument. A full array is
// left to the arguments that point into it, never grown (which would copy
// it away from them).
func (a *stringArena) ref(s string) any {
	if len(a.buf) == cap(a.buf) {
		a.buf = make([]string, 0, max(4096, 2*cap(a.buf)))
	}
	a.buf = append(a.buf, s)
	return &a.buf[len(a.buf)-1]
}

// reset lets the last array be written again: the commands whose arguments
// point into it have been sent.
func (a *stringArena) reset() {
	clear(a.buf)
	a.buf = a.buf[:0]
}

// touchedHLL is what the flusher keeps of a HyperLogLog added to since it
// was last persisted.
type touchedHLL struct {
	ttlSet time.Time // when its TTL was last set (zero: not yet)
	// name is its Redis key, kept rather than built again every flush the
	// key is added to (every flush, for most keys under uniform traffic).
	name string
}

// touchedKey returns k's entry in touched, made (TTL not yet set) if none.
// A new entry's key holds the canonical copies of app and iface (see
// rowset.ifaceDay).
func (u *uniques) touchedKey(k hllKey) *touchedHLL {
	t := u.touched[k]
	if t == nil {
		k.app, k.iface = intern(k.app), intern(k.iface)
		t = &touchedHLL{name: k.redisKey(u.opt.KeyPrefix)}
		u.touched[k] = t
	}
	return t
}

// expireEvery is how often a HyperLogLog's TTL is set again while it is
// being added to. Once per key would do while Redis keeps its data; again
// every hour (or quarter of the TTL) bounds how long a key that Redis lost
// and PFADD re-created lives without one. An EXPIRE with every flush
// doubled the commands: with uniform keys nearly every interface's key
// gets one PFADD a flush.
func (u *uniques) expireEvery() time.Duration { return min(time.Hour, u.opt.HLLTTL/4) }

// hasPrefix reports whether id begins with prefix.
func hasPrefix(id, prefix rowID) bool { return len(id) >= len(prefix) && id[:len(prefix)] == prefix }

// runEnd is the end of the run of q's elements from i that same says are
// alike.
func runEnd(q []userAdd, i int, same func(a, b *userAdd) bool) int {
	j := i + 1
	for j < len(q) && same(&q[i], &q[j]) {
		j++
	}
	return j
}

// dropQueued moves the first n queued adds, whose app-level add Redis has,
// to the interface-level queue.
func (u *uniques) dropQueued(n int) {
	if n == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var lost int
	for i := range u.queue[:n] {
		if len(u.ifaceQueue.adds) >= u.opt.MaxPendingRows || !u.ifaceQueue.add(&u.queue[i]) {
			lost++
		}
	}
	if lost > 0 {
		u.met.droppedAdds.Add(float64(lost))
	}
	rest := copy(u.queue, u.queue[n:])
	clear(u.queue[rest:]) // no strings kept alive past their use
	u.queue = u.queue[:rest]
}

// pending adds to extra the users not yet in Redis of the keys like k
// from k.day to last.
func (u *uniques) pending(k hllKey, last Day, extra map[hllKey][]string) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	for i := range u.queue {
		a := &u.queue[i]
		if a.id.app() != k.app || a.day < k.day || a.day > last || (k.scope == scopeIface && a.id.iface() != k.iface) {
			continue
		}
		dk := k
		dk.day = a.day
		extra[dk] = append(extra[dk], a.id.user())
	}
	if k.scope == scopeIface {
		u.pendingIfaceUsers(k, last, extra)
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

// persistChunk is how many HyperLogLogs one persisting step reads from
// MySQL (one SELECT), reads and merges in Redis (one pipeline) and saves
// (one multi-row upsert): a dense HLL is 12 KB, so a statement stays near
// 2.4 MB, under MySQL's default 16 MB max_allowed_packet.
const persistChunk = 200

// persistDue saves the registers when PersistEvery has passed since the
// last save, or when final (Close): see persist.
func (u *uniques) persistDue(ctx context.Context, final bool) error {
	u.sending.Lock()
	defer u.sending.Unlock()
	now := u.clk.Now()
	if !final && now.Sub(u.lastPersist) < u.opt.PersistEvery {
		return nil
	}
	if err := u.persistLocked(ctx, final); err != nil {
		return err
	}
	u.lastPersist = now
	return nil
}

// persist saves the registers of the touched HyperLogLogs to MySQL: the
// app-level keys of every day, interface-level keys once their day is over
// (all of them when final). The saved registers are first merged back into
// Redis, so a key that Redis lost (and that has been re-created since with
// fewer users) never overwrites a fuller saved copy. Keys go in chunks, a
// few round trips each, so that a shutdown persisting tens of thousands of
// keys fits its time budget; a shard that fails keeps its keys for the
// next run and does not stop the others.
func (u *uniques) persist(ctx context.Context, final bool) error {
	u.sending.Lock()
	defer u.sending.Unlock()
	return u.persistLocked(ctx, final)
}

func (u *uniques) persistLocked(ctx context.Context, final bool) error {
	today := DayOf(u.clk.Now())
	byShard := make([][]hllKey, len(u.dbs))
	for k := range u.touched {
		if final || k.scope == scopeApp || k.day < today {
			i := ShardIndex(k.app, len(u.dbs))
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
// value) into key rk: written under rk's name plus ":merge" (same {tag}:
// same cluster slot), merged, deleted. The TTL covers a DEL that never
// comes.
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
	rows, err := db.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k hllKey
		var day string
		var h savedHLL
		if err := rows.Scan(&k.app, &day, &k.scope, &k.iface, &h.regs, &h.users); err != nil {
			return err
		}
		if k.day, err = parseSQLDay(day); err != nil {
			return err
		}
		if h.regs, err = unpackRegisters(h.regs); err != nil {
			return fmt.Errorf("usage_uniques %s %s: %w", k.app, day, err)
		}
		out[k] = h
	}
	return rows.Err()
}

// parseSQLDay reads a DATE column as the driver returns it: "YYYY-MM-DD"
// without parseTime, an RFC 3339 time with it.
func parseSQLDay(s string) (Day, error) {
	if len(s) > len(time.DateOnly) {
		s = s[:len(time.DateOnly)]
	}
	return ParseDay(s)
}

// count is the number of distinct users over the union of keys (all of
// one app, so of one shard): Redis's live registers, the saved ones (for keys Redis no longer
// has) and extra users not yet added. Without Redis it falls back to the
// largest saved count.
func (u *uniques) count(ctx context.Context, keys []hllKey, extra map[hllKey][]string) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	found, err := loadRegistersOf(ctx, u.dbs.of(keys[0].app), keys)
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
			for lo := 0; lo < len(users); lo += pfaddChunk {
				args := make([]any, 0, min(pfaddChunk, len(users)-lo))
				for _, u := range users[lo:min(lo+pfaddChunk, len(users))] {
					args = append(args, u)
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
// + day + ":a" or ":i:" + hash of the interface. Hashes keep the key free of
// separators from the values, and the {…} tag keeps one app's keys in one
// cluster slot (needed by PFCOUNT and PFMERGE over several keys).
// It is built by hand, not with fmt: a flush names tens of thousands.
func (k hllKey) redisKey(prefix string) string {
	b := make([]byte, 0, len(prefix)+80)
	b = append(b, prefix...)
	b = append(b, "hll:{"...)
	b = appendHex16(b, FNV1a64(k.app))
	b = append(b, "}:"...)
	b = strconv.AppendInt(b, int64(k.day), 10)
	if k.scope == scopeApp {
		b = append(b, ":a"...)
	} else {
		b = append(b, ":i:"...)
		b = appendHex16(b, FNV1a64(k.iface))
		b = appendHex16(b, fnv1a64Continue(fnv1a64Continue(fnvOffset, "\x00"), k.iface))
	}
	return string(b)
}

// appendHex16 appends x as 16 lower-case hex digits (%016x).
func appendHex16(b []byte, x uint64) []byte {
	return hex.AppendEncode(b, binary.BigEndian.AppendUint64(make([]byte, 0, 8), x))
}

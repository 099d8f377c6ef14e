// Command quotabench-memory measures what one counter costs in each storage
// tier (DESIGN.md, "Storage tiers"): it stores N counter identities of the
// default rule app_user_iface_hourly in each tier and prints bytes per
// counter.
//
//   - hot and warm: a private redis-server started on a free port (so other
//     tenants of a shared Redis cannot disturb the figure), configured like
//     the shipped redis.conf (hash-max-listpack-entries 128,
//     hash-max-listpack-value 64); bytes = INFO memory used_memory after
//     minus before.
//   - cold: fresh shard databases quota_bench_<hex>_<i> on the MariaDB of
//     -mysql, dropped afterwards; bytes = information_schema data_length +
//     index_length after ANALYZE TABLE, over the rows.
//
// Hot and "warm, fresh" are filled through Store.Check (one call per
// identity: the smallest record); "warm, typical" and cold through the
// mover's Import of records with a plausible history (a count of 1-20 this
// hour, a mean call interval of 1 min-4 h, 1-31 intervals seen, first call
// 0-90 days ago), which is how identities reach those tiers.
//
// "hot, tiering on" checks the same cells through a tier router (new cells:
// no directory entry); "cold filter" switches them to cold as a move does
// and measures the filter (and its false positives).
//
//	go run ./cmd/quotabench-memory [-n 1000000] [-apps 100] [-tiers hot,warm,cold,filter]
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/rules"
	sqlschema "github.com/quota-platform/quota/sql"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tiers/warm"
)

type config struct {
	n, apps, shards int
	tiers           map[string]bool
	redisServer     string
	mysqlBase       string
	keep            bool
}

func main() {
	var c config
	var tierList string
	flag.IntVar(&c.n, "n", 1_000_000, "counter identities per tier")
	flag.IntVar(&c.apps, "apps", 100, "apps the identities belong to (one hash tag each)")
	flag.IntVar(&c.shards, "shards", 2, "cold shard databases")
	flag.StringVar(&tierList, "tiers", "hot,warm,cold,filter", "tiers to measure (filter: the cold filter, a cold cell's Redis)")
	flag.StringVar(&c.redisServer, "redis-server", "redis-server", "redis-server binary for the private instance")
	flag.StringVar(&c.mysqlBase, "mysql", "quota:quota@tcp(127.0.0.1:3306)/", "MariaDB account that may create databases quota%")
	flag.BoolVar(&c.keep, "keep", false, "keep the bench databases (for inspection)")
	flag.Parse()
	c.tiers = map[string]bool{}
	for _, t := range strings.Split(tierList, ",") {
		c.tiers[strings.TrimSpace(t)] = true
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "quotabench-memory:", err)
		os.Exit(1)
	}
}

const (
	rule   = "app_user_iface_hourly"
	window = time.Hour
)

// cell returns identity i: app i%apps, user i/apps, one of 50 interfaces.
func cell(c *config, i int) tiers.Cell {
	app := fmt.Sprintf("app-%05d", i%c.apps)
	user := fmt.Sprintf("user-%07d", i/c.apps)
	vals := []string{app, user, fmt.Sprintf("iface.%02d", (i*7)%50)}
	return tiers.Cell{
		Algorithm: rules.FixedWindow,
		Limit:     1000,
		Window:    window,
		Identity:  tiers.IdentityOf(rule, vals),
		Key:       tiers.CounterKeyOf(rule, vals, int64(window/time.Second), time.Now().UnixMilli()/window.Milliseconds()),
		Tag:       tiers.TagOf(app),
		ShardKey:  tiers.ShardKeyOf(app, user),
	}
}

// typical returns a record with a plausible warm/cold history for identity i.
func typical(c *config, rng *mrand.Rand, i int, now int64) tiers.Record {
	cl := cell(c, i)
	mean := int64(60 * math.Pow(240, rng.Float64())) // 1 min .. 4 h, log-uniform
	return tiers.Record{
		Ref:          tiers.RefOf(&cl),
		Count:        int64(1 + rng.IntN(20)),
		Last:         now - int64(rng.IntN(600)),
		First:        now - int64(rng.IntN(90*86400)),
		MeanInterval: mean,
		Samples:      uint8(1 + rng.IntN(31)),
	}
}

func run(ctx context.Context, c config) error {
	fmt.Printf("quotabench-memory: %d identities of %s (%d apps), %s\n", c.n, rule, c.apps, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("%-28s %14s %12s %10s  %s\n", "tier", "bytes", "per counter", "fill time", "notes")
	if c.tiers["hot"] || c.tiers["warm"] || c.tiers["filter"] {
		if err := redisTiers(ctx, &c); err != nil {
			return err
		}
	}
	if c.tiers["cold"] {
		if err := coldTier(ctx, &c); err != nil {
			return err
		}
	}
	return nil
}

func row(name string, bytes int64, n int, d time.Duration, notes string) {
	fmt.Printf("%-28s %14d %12.2f %10s  %s\n", name, bytes, float64(bytes)/float64(n), d.Round(time.Millisecond), notes)
}

// ---------------------------------------------------------------- Redis

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startRedis(ctx context.Context, bin string) (*exec.Cmd, *redis.Client, error) {
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--hash-max-listpack-entries", "128", "--hash-max-listpack-value", "64", "--loglevel", "warning",
		// The slow log keeps the arguments of up to 128 commands slower
		// than 10 ms: a fill's pipelined scripts are, more of them on a
		// busier machine, and a fill then measured the logged arguments
		// as if the counters held them.
		"--slowlog-log-slower-than", "-1")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", bin, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	for range 200 {
		if rdb.Ping(ctx).Err() == nil {
			return cmd, rdb, nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, nil, errors.New("private redis-server did not answer")
}

// usedMemory is INFO's used_memory less what clients' buffers hold, summed
// from CLIENT LIST's tot-mem: a pipeline's query buffer is freed only when
// the client has been idle a while, and is not the data's cost. (MEMORY
// STATS' clients.normal, used before, is a figure the server refreshes
// now and then: off by a query buffer, it moved a row by whole buffers
// from one run to the next.)
func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	var used int64 = -1
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			if used, err = strconv.ParseInt(v, 10, 64); err != nil {
				return 0, err
			}
		}
	}
	if used < 0 {
		return 0, errors.New("INFO memory has no used_memory")
	}
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("CLIENT LIST: %w", err)
	}
	var clients int64
	for _, l := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "tot-mem="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("CLIENT LIST tot-mem: %w", err)
				}
				clients += n
			}
		}
	}
	return used - clients, nil
}

// measure returns used_memory after fill minus before.
func measure(ctx context.Context, rdb *redis.Client, fill func() error) (int64, time.Duration, error) {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return 0, 0, err
	}
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := fill(); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	after, err := usedMemory(ctx, rdb)
	return after - before, d, err
}

const batch = 1000

// checkAll counts one call on every identity through s, batch ops per Check.
func checkAll(ctx context.Context, c *config, s tiers.Store, now time.Time) error {
	ops := make([]*tiers.Op, 0, batch)
	for i := range c.n {
		ops = append(ops, &tiers.Op{Cost: 1, Mode: tiers.Enforce, Cells: []tiers.Cell{cell(c, i)}})
		if len(ops) == batch || i == c.n-1 {
			if err := s.Check(ctx, now, ops); err != nil {
				return err
			}
			for _, op := range ops {
				if !op.Committed {
					return errors.New("a call was denied")
				}
			}
			ops = ops[:0]
		}
	}
	return nil
}

func importAll(ctx context.Context, c *config, m tiers.Mover, now int64) error {
	rng := mrand.New(mrand.NewPCG(1, 2))
	recs := make([]tiers.Record, 0, 5*batch)
	for i := range c.n {
		recs = append(recs, typical(c, rng, i, now))
		if len(recs) == cap(recs) || i == c.n-1 {
			if err := m.Import(ctx, recs); err != nil {
				return err
			}
			recs = recs[:0]
		}
	}
	return nil
}

func redisTiers(ctx context.Context, c *config) error {
	cmd, rdb, err := startRedis(ctx, c.redisServer)
	if err != nil {
		return err
	}
	defer func() {
		rdb.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// Scripts Redis caches count in used_memory: loaded before any
	// measurement, they are in none.
	hs := hot.NewStore(rdb, hot.Options{})
	if err := hs.Load(ctx); err != nil {
		return err
	}
	if err := warm.NewStore(rdb, warm.Options{}).Load(ctx, hs.MoveScripts()...); err != nil {
		return err
	}
	now := time.Now()
	if err := warmUp(ctx, c, rdb, now); err != nil {
		return err
	}
	if c.tiers["hot"] {
		hot := hot.NewStore(rdb, hot.Options{Prefix: "q:", Jitter: time.Minute})
		b, d, err := measure(ctx, rdb, func() error { return checkAll(ctx, c, hot, now) })
		if err != nil {
			return fmt.Errorf("hot: %w", err)
		}
		row("hot", b, c.n, d, "one key per counter with TTL, via Check")
		// The same cells checked through a tier router (QUOTA_TIERING=on):
		// new cells are counted hot with nothing beside their keys.
		ws := warm.NewStore(rdb, warm.Options{Prefix: "q:"})
		router := routing.NewRouter(hot, ws, nil)
		bt, d, err := measure(ctx, rdb, func() error { return checkAll(ctx, c, router, now) })
		if err != nil {
			return fmt.Errorf("hot, tiering on: %w", err)
		}
		row("hot, tiering on", bt, c.n, d, fmt.Sprintf("via the tier router's Check; %.3fx the hot row", float64(bt)/float64(b)))
	}
	if c.tiers["filter"] {
		if err := filterRows(ctx, c, rdb); err != nil {
			return err
		}
	}
	if c.tiers["warm"] {
		opts := warm.Options{Prefix: "q:"}
		ws := warm.NewStore(rdb, opts)
		b, d, err := measure(ctx, rdb, func() error { return checkAll(ctx, c, ws, now) })
		if err != nil {
			return fmt.Errorf("warm: %w", err)
		}
		notes, err := hashStats(ctx, rdb)
		if err != nil {
			return err
		}
		row("warm, fresh (1 call)", b, c.n, d, "via Check; "+notes)
		b, d, err = measure(ctx, rdb, func() error { return importAll(ctx, c, ws, now.Unix()) })
		if err != nil {
			return fmt.Errorf("warm: %w", err)
		}
		notes, err = hashStats(ctx, rdb)
		if err != nil {
			return err
		}
		row("warm, typical history", b, c.n, d, "via Import; "+notes)
		for _, f := range []int{8, 6} {
			if err := warmFieldRow(ctx, c, rdb, opts, f, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// warmUp fills the server once with a few thousand cells of each tier,
// unmeasured (measure's FLUSHALL then drops them): the first fill of a
// process measured more than the same fill again (the server's one-time
// allocations), a share of a row that grows as its counters are fewer.
func warmUp(ctx context.Context, c *config, rdb *redis.Client, now time.Time) error {
	small := *c
	small.n = min(c.n, 2000)
	hot := hot.NewStore(rdb, hot.Options{Prefix: "q:", Jitter: time.Minute})
	ws := warm.NewStore(rdb, warm.Options{Prefix: "q:"})
	_, _, err := measure(ctx, rdb, func() error {
		if err := checkAll(ctx, &small, routing.NewRouter(hot, ws, nil), now); err != nil {
			return err
		}
		if err := checkAll(ctx, &small, ws, now); err != nil {
			return err
		}
		return importAll(ctx, &small, ws, now.Unix())
	})
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	return nil
}

// filterRows measures the cold filter, the Redis a cold cell costs: every
// identity switched to cold (as a move's switch step, batches of 1,000)
// with the scheduled cycle's estimate of each tag's cold cells, then
// without it (the on-call moves' case); and the share of as many other
// identities of the same apps that the filter takes for "may be cold"
// (false positives: each costs a MySQL lookup on a window's first call).
func filterRows(ctx context.Context, c *config, rdb *redis.Client) error {
	ws := warm.NewStore(rdb, warm.Options{Prefix: "q:"})
	perTag := (c.n + c.apps - 1) / c.apps
	other := *c
	other.n = 2 * c.n // identities c.n..2n-1: same apps, not switched
	// The first fill of a process measures ~0.1 MB more than the same fill
	// again (one-time allocations in the server): a first, unreported fill
	// takes them.
	for i, est := range []bool{true, true, false} {
		var capacity func(tiers.Tag) int
		name := "cold filter, no estimate"
		if est {
			capacity = func(tiers.Tag) int { return perTag }
			name = "cold filter, cycle estimate"
		}
		b, d, err := measure(ctx, rdb, func() error {
			swaps := make([]warm.DirSwap, 0, batch)
			for i := range c.n {
				cl := cell(c, i)
				swaps = append(swaps, warm.DirSwap{Ref: tiers.RefOf(&cl)})
				if len(swaps) == batch || i == c.n-1 {
					if _, err := ws.SwitchToCold(ctx, swaps, capacity); err != nil {
						return err
					}
					swaps = swaps[:0]
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fp, n, err := falsePositives(ctx, c, &other, ws)
		if err != nil {
			return err
		}
		usage, keys, err := memoryUsage(ctx, rdb, "q:{*}d")
		if err != nil {
			return err
		}
		if i == 0 {
			continue
		}
		row(name, b, c.n, d, fmt.Sprintf("%d cells a tag; MEMORY USAGE of the %d headers %.2f B a cell; false positives %.2f %% of %d other cells",
			perTag, keys, float64(usage)/float64(c.n), 100*float64(fp)/float64(n), n))
	}
	return nil
}

// memoryUsage sums MEMORY USAGE over the keys matching pattern: with a
// small total, steadier than a used_memory difference, which the server's
// own tables (a keyspace resize) also move.
func memoryUsage(ctx context.Context, rdb *redis.Client, pattern string) (int64, int, error) {
	var keys []string
	iter := rdb.Scan(ctx, 0, pattern, 10000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return 0, 0, err
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.MemoryUsage(ctx, k, 0)
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, 0, err
		}
	}
	var sum int64
	for _, c := range cmds {
		sum += c.Val()
	}
	return sum, len(keys), nil
}

// falsePositives probes up to 100,000 identities from c.n on (same apps,
// never switched) and counts those the filter holds.
func falsePositives(ctx context.Context, c, other *config, warm *warm.Store) (int, int, error) {
	n := min(c.n, 100_000)
	fp := 0
	for start := c.n; start < c.n+n; start += batch {
		refs := make([]tiers.Ref, 0, batch)
		for i := start; i < min(start+batch, c.n+n); i++ {
			cl := cell(other, i)
			cl.Tag = tiers.TagOf(fmt.Sprintf("app-%05d", i%c.apps)) // the same apps
			refs = append(refs, tiers.RefOf(&cl))
		}
		in, err := warm.MayBeCold(ctx, refs)
		if err != nil {
			return 0, 0, err
		}
		for _, b := range in {
			if b {
				fp++
			}
		}
	}
	return fp, n, nil
}

// warmFieldRow measures the typical records again with another field width
// (the default's row is above).
func warmFieldRow(ctx context.Context, c *config, rdb *redis.Client, opts warm.Options, fieldBytes int, now time.Time) error {
	opts.FieldBytes = fieldBytes
	w := warm.NewStore(rdb, opts)
	b, d, err := measure(ctx, rdb, func() error { return importAll(ctx, c, w, now.Unix()) })
	if err != nil {
		return fmt.Errorf("warm, %d-byte field: %w", fieldBytes, err)
	}
	row(fmt.Sprintf("warm, typical, %d-byte field", fieldBytes), b, c.n, d, fmt.Sprintf("via Import; FieldBytes: %d", fieldBytes))
	return nil
}

// hashStats describes the warm hashes: how many, the largest, how many are
// not listpacks, and the mean value size.
func hashStats(ctx context.Context, rdb *redis.Client) (string, error) {
	var keys []string
	iter := rdb.Scan(ctx, 0, "q:{*}w*", 10000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return "", err
	}
	pipe := rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(keys))
	encs := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		lens[i] = pipe.HLen(ctx, k)
		encs[i] = pipe.ObjectEncoding(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return "", err
	}
	largest, other := int64(0), 0
	for i := range keys {
		largest = max(largest, lens[i].Val())
		if encs[i].Val() != "listpack" {
			other++
		}
	}
	var valueBytes, values int
	for _, k := range keys[:min(len(keys), 50)] {
		for _, v := range rdb.HGetAll(ctx, k).Val() {
			valueBytes += len(v)
			values++
		}
	}
	return fmt.Sprintf("%d hashes, largest %d fields, %d not listpack, mean value %.1f B",
		len(keys), largest, other, float64(valueBytes)/float64(max(values, 1))), nil
}

// ---------------------------------------------------------------- MySQL

func coldTier(ctx context.Context, c *config) error {
	base, err := mysql.ParseDSN(c.mysqlBase)
	if err != nil {
		return fmt.Errorf("-mysql: %w", err)
	}
	base.InterpolateParams = true
	base.MultiStatements = true // as cold.ShardDSN: the cold tier needs both
	srvCfg := *base
	srvCfg.DBName = ""
	server, err := sql.Open("mysql", srvCfg.FormatDSN())
	if err != nil {
		return err
	}
	defer server.Close()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	var names []string
	var dbs []*sql.DB
	defer func() {
		for _, db := range dbs {
			db.Close()
		}
		if !c.keep {
			for _, name := range names {
				_, _ = server.Exec("DROP DATABASE IF EXISTS `" + name + "`")
			}
		}
	}()
	for i := range c.shards {
		name := fmt.Sprintf("quota_bench_%s_%d", hex.EncodeToString(suffix[:]), i)
		if _, err := server.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
		names = append(names, name)
		cfg := *base
		cfg.DBName = name
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return err
		}
		dbs = append(dbs, db)
		if _, err := sqlschema.Apply(ctx, db); err != nil {
			return fmt.Errorf("schema on %s: %w", name, err)
		}
	}
	cold := cold.NewStore(dbs, cold.Options{})
	start := time.Now()
	if err := importAll(ctx, c, cold, time.Now().Unix()); err != nil {
		return fmt.Errorf("cold: %w", err)
	}
	d := time.Since(start)
	b, rows, err := tableBytes(ctx, dbs, "ANALYZE TABLE cold_cells")
	if err != nil {
		return err
	}
	row("cold", b, int(rows), d, fmt.Sprintf("via Import, %d shards, %d rows, random key order (page splits)", c.shards, rows))
	b, rows, err = tableBytes(ctx, dbs, "OPTIMIZE TABLE cold_cells")
	if err != nil {
		return err
	}
	row("cold, after OPTIMIZE TABLE", b, int(rows), 0, "rebuilt in key order: the floor")
	return nil
}

// tableBytes runs prep (ANALYZE or OPTIMIZE) and returns data_length +
// index_length and the exact row count of cold_cells over all shards.
func tableBytes(ctx context.Context, dbs []*sql.DB, prep string) (int64, int64, error) {
	var total, rows int64
	for _, db := range dbs {
		for _, q := range []string{prep, "ANALYZE TABLE cold_cells"} {
			if err := drain(ctx, db, q); err != nil {
				return 0, 0, fmt.Errorf("%s: %w", q, err)
			}
		}
		var data, index, n int64
		if err := db.QueryRowContext(ctx, `SELECT data_length, index_length FROM information_schema.TABLES
			WHERE table_schema = DATABASE() AND table_name = ?`, "cold_cells").Scan(&data, &index); err != nil {
			return 0, 0, err
		}
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM cold_cells").Scan(&n); err != nil {
			return 0, 0, err
		}
		total += data + index
		rows += n
	}
	return total, rows, nil
}

// drain runs a statement that answers rows (ANALYZE, OPTIMIZE) and reads them.
func drain(ctx context.Context, db *sql.DB, q string) error {
	rs, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	for rs.Next() {
	}
	if err := rs.Err(); err != nil {
		rs.Close()
		return err
	}
	return rs.Close()
}

package userdays

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// The tests' helpers; privateShard, ownCPU and uniformLoad are as
// analytics' tests have them.

// t0Day is the tests' day: 2026-11-23, a Monday.
var t0Day = usage.DayOf(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))

// newTestStore is a Store as analytics.New makes it with the defaults,
// but flat out (duty 1: merges and seals do not rest).
func newTestStore() *Store {
	vec := func(name string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, []string{"table"})
	}
	return NewStore(500, 1, vec("rows"), vec("statements"))
}

// makeRowID is the usage.RowID of (app, iface, user), as Record makes it.
func makeRowID(app, iface, user string) usage.RowID {
	return usage.RowID(usage.AppendRowID(nil, app, iface, user))
}

// groups are user rows grouped per (app, day), as a flush holds them.
type groups map[AppDay]*Group

// add adds row to its group.
func (gs groups) add(row Row) {
	k := AppDay{App: row.ID.App(), Day: row.Day}
	g := gs[k]
	if g == nil {
		g = &Group{AppDay: k}
		gs[k] = g
	}
	g.Rows = append(g.Rows, row)
}

// inOrder are the groups in write order, as the flush hands them to Write.
func (gs groups) inOrder() []*Group {
	var out []*Group
	for _, g := range gs {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *Group) int { return CompareAppDays(a.AppDay, b.AppDay) })
	return out
}

// sortGroup readies g's rows for Chunks, as the flush does.
func sortGroup(g *Group) { g.Rows = SortRows(g.Rows) }

// privateShard is database name on srv with the schema, opened as quotad
// opens a shard; it is closed when the benchmark ends.
func privateShard(b *testing.B, srv *testenv.MariaDBProcess, name string) *sql.DB {
	cfg, err := mysql.ParseDSN(srv.CreateDatabase(name))
	if err != nil {
		b.Fatal(err)
	}
	cfg.InterpolateParams = true // as quotad's shards (cold.ShardDSN)
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// ownCPU is the CPU time this process has used.
func ownCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// xorshift is Marsaglia's xorshift64 (shifts 13, 7, 17): the same
// sequence every run.
type xorshift uint64

func newXorshift() xorshift { return 88172645463325252 }

// Next is the sequence's next value.
func (x *xorshift) Next() uint64 {
	*x ^= *x << 13
	*x ^= *x >> 7
	*x ^= *x << 17
	return uint64(*x)
}

// uniformLoad is make bench's uniform keys: 1,000 apps, 50 interfaces and
// 100,000 users, a call's three picked from one xorshift value.
type uniformLoad struct {
	apps, ifaces, users []string
	x                   xorshift
}

func newUniformLoad() *uniformLoad {
	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = prefix + strconv.Itoa(i)
		}
		return out
	}
	return &uniformLoad{apps: names("app-", 1000), ifaces: names("iface.", 50), users: names("user-", 100_000), x: newXorshift()}
}

// Next is the next call's app, interface and user.
func (l *uniformLoad) Next() (app, iface, user string) {
	x := l.x.Next()
	return l.apps[x%1000], l.ifaces[(x>>10)%50], l.users[(x>>20)%100_000]
}

// userDay is user's stored figures in app on day over every interface, as
// the stats query reads them (Stored).
func userDay(t *testing.T, u *Store, db *sql.DB, app, user string, day usage.Day) usage.Counts {
	t.Helper()
	ifaces := map[string]*usage.Counts{}
	if err := u.Stored(context.Background(), db, app, user, day, ifaces); err != nil {
		t.Fatal(err)
	}
	var total usage.Counts
	for _, c := range ifaces {
		total.Add(*c)
	}
	return total
}

// Package usage is the vocabulary the analytics packages share: the
// figures (Counts) of a day (Day, Days), the rows' identity (RowID), the
// shard of an app (ShardIndex, Shards), and the way they write and read
// MySQL (InsertRows in multi-row statements, resting as a Pacer says;
// EachRow).
package usage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Counts are the figures of one aggregate.
type Counts struct {
	Calls, Allowed, Denied int64
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Calls += o.Calls
	c.Allowed += o.Allowed
	c.Denied += o.Denied
}

// Sub subtracts o from c.
func (c *Counts) Sub(o Counts) {
	c.Calls -= o.Calls
	c.Allowed -= o.Allowed
	c.Denied -= o.Denied
}

// AddTo adds c to the row at k.
func AddTo[K comparable](m map[K]*Counts, k K, c Counts) {
	if cur := m[k]; cur != nil {
		cur.Add(c)
		return
	}
	m[k] = &c
}

// FloorDiv is a/b rounded towards minus infinity.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Day is a civil date as days since 1970-01-01: which instants it holds
// depends on the time zone (Days).
type Day int64

// DayOf is the UTC day of t.
func DayOf(t time.Time) Day { return Day(FloorDiv(t.Unix(), 86400)) }

// Days tells the days of the analytics' time zone (QUOTA_TIMEZONE): a
// time's Day is its date there, so a day that springs forward holds 23
// hours of calls and one that falls back 25.
type Days struct {
	Loc *time.Location // nil: UTC
}

// Of is the Day of t.
func (z Days) Of(t time.Time) Day {
	if z.Loc == nil || z.Loc == time.UTC {
		return DayOf(t)
	}
	_, off := t.In(z.Loc).Zone()
	return Day(FloorDiv(t.Unix()+int64(off), 86400))
}

// OfUnix is the Day of the Unix second sec.
func (z Days) OfUnix(sec int64) Day { return z.Of(time.Unix(sec, 0)) }

// ParseDay reads YYYY-MM-DD.
func ParseDay(s string) (Day, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil || t.Format(time.DateOnly) != s {
		return 0, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	return DayOf(t), nil
}

// ParseSQLDay reads a DATE column as the driver returns it: "YYYY-MM-DD"
// without parseTime, an RFC 3339 time with it.
func ParseSQLDay(s string) (Day, error) {
	if len(s) > len(time.DateOnly) {
		s = s[:len(time.DateOnly)]
	}
	return ParseDay(s)
}

// Time is the day's first instant.
func (d Day) Time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

func (d Day) String() string { return d.Time().Format(time.DateOnly) }

// Shards are the MySQL shards, an app's on Of(app) = s[ShardIndex(app, len(s))].
type Shards []*sql.DB

// Of is app's shard.
func (s Shards) Of(app string) *sql.DB { return s[ShardIndex(app, len(s))] }

// Querier is a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// EachRow runs query on db and calls f with each row.
func EachRow(ctx context.Context, db Querier, query string, args []any, f func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

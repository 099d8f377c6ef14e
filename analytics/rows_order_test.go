package analytics

import (
	"context"
	"testing"

	"github.com/quota-platform/quota/analytics/usage"
	"github.com/quota-platform/quota/analytics/userdays"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// orderCases are keys whose order trips a careless prefix comparison: equal
// 8-byte heads, a prefix of another, a NUL after a prefix, bytes >= 0x80.
func orderCases() []userdays.Key {
	var ks []userdays.Key
	for _, day := range []Day{20415, 20416} {
		for _, app := range []string{"app-1", "app-10", "app-1\x00", "abcdefgh", "abcdefgh1", "abcdefgg\xff", "\xe4\xbd\xa0"} {
			for _, user := range []string{"user-1234", "user-123", "user-12345678", "u", "\xff\xfe", "user-1234\x00"} {
				for _, iface := range []string{"b.get", "a.get", "a.ge"} {
					ks = append(ks, userdays.Key{ID: makeRowID(app, iface, user), Day: day})
				}
			}
		}
	}
	return ks
}

// The write order of the per-user rows is the table's primary-key order,
// as MariaDB itself sorts it: writers that share it cannot deadlock, and a
// flush visits each B-tree page once.
func TestUserRowsAreWrittenInThePrimaryKeyOrderOfMySQL(t *testing.T) {
	t.Parallel()
	db := testenv.MySQLShards(t, 1)[0]
	ctx := context.Background()
	keys := orderCases()
	rows := make([]userdays.Row, len(keys))
	for i, k := range keys {
		// Inserted in an order unrelated to the key's.
		rows[(i*7919)%len(keys)] = userdays.NewRow(k, Counts{Calls: 1})
	}
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, "INSERT INTO usage_user_daily (app_id, user_id, day, interface_id, calls) VALUES (?, ?, ?, ?, 1)",
			r.ID.App(), r.ID.User(), r.Day.String(), r.ID.Iface()); err != nil {
			t.Fatal(err)
		}
	}
	// The order the flush writes them in (rowset.userGroups, rowset.sortGroup).
	rs := newRowset()
	for _, r := range rows {
		rs.addUser(rs.group(userdays.AppDay{App: r.ID.App(), Day: r.Day}), r)
	}
	rows = rows[:0]
	for _, g := range rs.userGroups() {
		rs.sortGroup(g)
		rows = append(rows, g.Rows...)
	}
	res, err := db.QueryContext(ctx, "SELECT app_id, user_id, day, interface_id FROM usage_user_daily ORDER BY day, app_id, user_id, interface_id")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	i := 0
	for ; res.Next(); i++ {
		var app, user, iface, day string
		if err := res.Scan(&app, &user, &day, &iface); err != nil {
			t.Fatal(err)
		}
		k := userdays.Key{ID: makeRowID(app, iface, user)}
		if k.Day, err = usage.ParseSQLDay(day); err != nil {
			t.Fatal(err)
		}
		if i < len(rows) && rows[i].Key != k {
			t.Fatalf("row %d: MySQL's order has %+q, the write order %+q", i, []string{app, user, k.Day.String(), iface}, []string{rows[i].ID.App(), rows[i].ID.User(), rows[i].Day.String(), rows[i].ID.Iface()})
		}
	}
	if err := res.Err(); err != nil || i != len(rows) {
		t.Fatalf("read %d rows of %d (%v)", i, len(rows), err)
	}
}

package coalesce

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/cold"
	"github.com/quota-platform/quota/tiers/hot"
	"github.com/quota-platform/quota/tiers/routing"
	"github.com/quota-platform/quota/tiers/warm"
)

// A caller whose check the hot tier decides alone is answered as soon as
// the hot script has run, while another check of the same batch still
// waits for its cold row (held by an open MySQL transaction).
// coldAndHot makes a limiter over a router, with users "a" and "b" made
// cold and "h" hot (one call each), and returns
// it, the shard, the cold rows' keys of a and b, a request maker and a
// row locker.
func coldAndHot(t *testing.T) (coldLim *limiter.Limiter, db *sql.DB, keyA, keyB string,
	req func(user string) *limiter.Request, lockRow func(key string) *sql.Tx) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	dbs := testenv.MySQLShards(t, 1)
	hot := hot.NewStore(rdb, hot.Options{Prefix: prefix})
	ws := warm.NewStore(rdb, warm.Options{Prefix: prefix})
	cold := cold.NewStore(dbs, cold.Options{})
	set, err := rules.NewSet([]rules.Rule{{
		Name: "per_user", Dimensions: []string{"user_id"}, Limit: 10,
		Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow,
	}})
	if err != nil {
		t.Fatal(err)
	}
	coldLim, err = limiter.New(routing.NewBreaker(routing.NewRouter(hot, ws, cold), clock.Real{}, 3, 100*time.Millisecond), clock.Real{}, set)
	if err != nil {
		t.Fatal(err)
	}
	// makeCold gives user's cell an empty cold row and
	// switches its directory to cold, as a move does.
	makeCold := func(user string) {
		t.Helper()
		id := tiers.IdentityOf("per_user", []string{user})
		ref := tiers.Ref{Identity: id, Window: time.Hour, Tag: tiers.TagOfIdentity(id), ShardKey: tiers.ShardKeyOfIdentity(id)}
		now := time.Now().Unix()
		if err := cold.Import(context.Background(), []tiers.Record{{Ref: ref, First: now, Last: now}}); err != nil {
			t.Fatal(err)
		}
		if ok, err := ws.SwitchToCold(context.Background(), []warm.DirSwap{{Ref: ref}}, nil); err != nil || !ok[0] {
			t.Fatalf("switch %s to cold: %v %v", user, ok, err)
		}
	}
	ctx := context.Background()
	req = func(user string) *limiter.Request {
		return &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "user_id", Value: user}}}
	}
	check := func(l *limiter.Limiter, user string) {
		t.Helper()
		if d, err := l.Check(ctx, req(user)); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", user, d, err)
		}
	}
	// rowKeys is the keys of the cold rows (one per user placed cold).
	rowKeys := func() map[string]bool {
		t.Helper()
		rows, err := dbs[0].QueryContext(ctx, "SELECT k FROM cold_cells")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		keys := map[string]bool{}
		for rows.Next() {
			var k []byte
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys[string(k)] = true
		}
		return keys
	}
	check(coldLim, "h")
	makeCold("a")
	check(coldLim, "a")
	before := rowKeys()
	makeCold("b")
	check(coldLim, "b")
	for k := range rowKeys() {
		if before[k] {
			keyA = k
		} else {
			keyB = k
		}
	}
	if len(before) != 1 || keyB == "" {
		t.Fatalf("cold rows %d then %q: users a and b not placed cold", len(before), keyB)
	}
	lockRow = func(key string) *sql.Tx {
		t.Helper()
		tx, err := dbs[0].BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		if _, err := tx.ExecContext(ctx, "SELECT r FROM cold_cells WHERE k = ? FOR UPDATE", []byte(key)); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	return coldLim, dbs[0], keyA, keyB, req, lockRow
}

func TestCoalescer_HotCheckIsAnsweredWhileAColdCheckOfItsBatchWaitsForItsRow(t *testing.T) {
	t.Parallel()
	coldLim, db, keyA, keyB, req, lockRow := coldAndHot(t)
	// Closed after the rows are released (cleanups run last first): its
	// worker may still wait for b's row when the test fails.
	// No hand-off: the worker stays with its batch, so b and h queue behind a.
	c := NewWithHandOff(coldLim, 1, 64, 0)
	t.Cleanup(c.Close)
	txA, txB := lockRow(keyA), lockRow(keyB)
	ask := asker(c, req)
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(c.queue) != n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d checks queued, want %d", len(c.queue), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The worker takes a's check alone and waits for a's row; b's cold
	// check and h's hot one queue behind it and go as the next batch, b
	// first, once a's row is free.
	gotA := ask("a")
	waitingForRow(t, db)
	gotB := ask("b")
	queued(1)
	gotH := ask("h")
	queued(2)
	if err := txA.Rollback(); err != nil {
		t.Fatal(err)
	}
	if a := <-gotA; a.err != nil || !a.d.Allowed {
		t.Fatalf("a: %+v %v", a.d, a.err)
	}
	select {
	case h := <-gotH:
		if h.err != nil || !h.d.Allowed || h.d.Entries[0].Remaining != 8 || h.d.Entries[0].Tier != tiers.Hot {
			t.Fatalf("h: %+v %v, want allowed from hot with 8 remaining", h.d, h.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hot check was not answered while the cold check of its batch waited for its row")
	}
	select {
	case b := <-gotB:
		t.Fatalf("b answered while its row was locked: %+v %v", b.d, b.err)
	default:
	}
	if err := txB.Rollback(); err != nil {
		t.Fatal(err)
	}
	if b := <-gotB; b.err != nil || !b.d.Allowed || b.d.Entries[0].Remaining != 8 || b.d.Entries[0].Tier != tiers.Cold {
		t.Fatalf("b: %+v %v, want allowed from cold with 8 remaining", b.d, b.err)
	}
}

// waitingForRow waits until a statement locking rows of db's cold cells is
// running (blocked: the test holds them).
func waitingForRow(t *testing.T, db *sql.DB) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST" +
			" WHERE DB = DATABASE() AND INFO LIKE '%cold_cells%FOR UPDATE%' AND INFO NOT LIKE '%PROCESSLIST%'").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no check waits for a locked cold row")
		}
	}
}

// A worker whose batch is left with only a cold check, waiting for its
// row, stays with it and a new worker serves the queue: a hot check sent
// after it is answered while the row is still locked (with one worker
// that stayed, it would wait for the row).
func TestCoalescer_HotCheckDoesNotQueueBehindAnotherBatchsColdRow(t *testing.T) {
	t.Parallel()
	coldLim, db, keyA, _, req, lockRow := coldAndHot(t)
	c := NewWithHandOff(coldLim, 1, 64, 4)
	t.Cleanup(c.Close)
	txA := lockRow(keyA)
	ask := asker(c, req)
	gotA := ask("a")
	waitingForRow(t, db)
	// The worker left the batch before its cold statement was sent, not
	// after a wait.
	if n := len(c.background); n != 1 {
		t.Fatalf("%d batches finishing on their own while a's waits for its row, want 1", n)
	}
	gotH := ask("h")
	select {
	case h := <-gotH:
		if h.err != nil || !h.d.Allowed || h.d.Entries[0].Tier != tiers.Hot {
			t.Fatalf("h: %+v %v, want allowed from hot", h.d, h.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hot check waited for another batch's locked cold row")
	}
	select {
	case a := <-gotA:
		t.Fatalf("a answered while its row was locked: %+v %v", a.d, a.err)
	default:
	}
	if err := txA.Rollback(); err != nil {
		t.Fatal(err)
	}
	if a := <-gotA; a.err != nil || !a.d.Allowed || a.d.Entries[0].Tier != tiers.Cold {
		t.Fatalf("a: %+v %v, want allowed from cold", a.d, a.err)
	}
	// The worker that stayed with a's batch gives its slot back when done.
	for deadline := time.Now().Add(5 * time.Second); len(c.background) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d background slots still taken after a's batch finished", len(c.background))
		}
	}
}

type answer struct {
	d   limiter.Decision
	err error
}

// asker returns a func that sends a user's check through c in a goroutine
// of its own and hands back the channel its answer will arrive on.
func asker(c *Coalescer, req func(user string) *limiter.Request) func(user string) chan answer {
	return func(user string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			d, err := c.Check(context.Background(), req(user))
			ch <- answer{d, err}
		}()
		return ch
	}
}

package analytics

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The key sorts must give what a comparison sort of the elements gives.
func TestAddSort_OrdersLikeAComparisonSortAndKeepsEveryAdd(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	groups := []func(i int) uint64{
		func(int) uint64 { return rng.Uint64() },                                        // all bytes vary
		func(int) uint64 { return 42 },                                                  // one group: every pass skipped
		func(int) uint64 { return uint64(rng.IntN(3)) << 56 },                           // only the top byte varies
		func(int) uint64 { return []uint64{0, 0xff, 1 << 63, ^uint64(0)}[rng.IntN(4)] }, // extremes
		func(i int) uint64 { return uint64(i) },                                         // already sorted
		func(i int) uint64 { return ^uint64(i) },                                        // reversed
	}
	var s addSort // reused across cases, as the flusher does
	for gi, group := range groups {
		for _, n := range []int{0, 1, 2, 3, 257, 5000} {
			q := make([]userAdd, n)
			for i := range q {
				q[i] = userAdd{group: group(i), id: rowID("id" + strconv.Itoa(i))}
			}
			want := slices.Clone(q)
			slices.SortStableFunc(want, func(a, b userAdd) int { return cmp.Compare(a.group, b.group) })
			var mu lockCount
			s.sort(q, &mu)
			if n >= 2 && mu.held != 1 {
				t.Fatalf("case %d, n=%d: the lock was taken %d times, want once (to move the adds)", gi, n, mu.held)
			}
			for i := range q {
				if q[i].group != want[i].group {
					t.Fatalf("case %d, n=%d: group at %d is %x, want %x", gi, n, i, q[i].group, want[i].group)
				}
			}
			ids := map[rowID]uint64{}
			for _, a := range q {
				ids[a.id] = a.group
			}
			for _, a := range want {
				if g, ok := ids[a.id]; !ok || g != a.group {
					t.Fatalf("case %d, n=%d: add %q (group %x) lost or changed: %x, %v", gi, n, a.id, a.group, g, ok)
				}
			}
			if len(ids) != n {
				t.Fatalf("case %d, n=%d: %d distinct adds after the sort", gi, n, len(ids))
			}
		}
	}
}

// A group is the rows of one (app, day), with repeats of a (user, interface)
// to sum.
func TestGroupSort_OrdersAndSumsLikeAComparisonSort(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	users := []string{"user-1", "user-10", "user-100", "user-1000", "user-12345678", "user-12345679", "u", "", "\xff", "user-1\x00"}
	ifaces := []string{"a.get", "a.ge", "b.get"}
	var s groupSort
	for _, n := range []int{0, 1, 2, 40, 600} {
		rows := make([]userRow, n)
		for i := range rows {
			id := makeRowID("app-1", ifaces[rng.IntN(len(ifaces))], users[rng.IntN(len(users))])
			rows[i] = newUserRow(userKey{id: id, day: 20415}, Counts{Calls: int64(i + 1), Allowed: int64(i)})
		}
		want := referenceSortGroupRows(slices.Clone(rows))
		got := s.sort(rows)
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: got %d rows %v, want %d rows %v", n, len(got), got, len(want), want)
		}
		for i, r := range s.rows[:cap(s.rows)] {
			if r.id != "" {
				t.Fatalf("n=%d: the sort's buffer keeps row id %q at %d", n, r.id, i)
			}
		}
	}
}

// referenceSortGroupRows is the comparison sort that groupSort replaced.
func referenceSortGroupRows(rows []userRow) []userRow {
	slices.SortFunc(rows, func(a, b userRow) int { return compareGroupRows(&a, &b) })
	var out []userRow
	for _, r := range rows {
		if n := len(out); n > 0 && out[n-1].userKey == r.userKey {
			out[n-1].Counts.add(r.Counts)
			continue
		}
		out = append(out, r)
	}
	return out
}

// The sorts index elements with 32 bits: New refuses a bound on the
// pending rows (and so on the distinct-user queue) past that.
func TestNew_RefusesAPendingBoundPastTheSortIndexes(t *testing.T) {
	t.Parallel()
	ok := newOfflineRecorder(t, Options{MaxPendingRows: math.MaxInt32})
	if _, err := New(Options{DBs: ok.opt.DBs, Redis: ok.rdb, MaxPendingRows: math.MaxInt32 + 1}); err == nil ||
		!strings.Contains(err.Error(), "MaxPendingRows") {
		t.Fatalf("New with MaxPendingRows past MaxInt32: %v, want an error naming it", err)
	}
}

// noLock is a sync.Locker for sorts no reader sees.
type noLock struct{}

func (noLock) Lock()   {}
func (noLock) Unlock() {}

// lockCount is a sync.Locker that counts how often it was taken.
type lockCount struct{ held int }

func (l *lockCount) Lock()   { l.held++ }
func (l *lockCount) Unlock() {}

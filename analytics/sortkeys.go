package analytics

import (
	"cmp"
	"slices"
	"sync"
)

// The flush sorts about one user row and one distinct-user add per call
// (with uniform traffic): each group's user rows into write order, and the
// queue of adds by HyperLogLog. Sorting the rows and adds themselves moved
// 56 and 32 bytes per swap and copied both elements into the comparison on
// every step, ~125 ns per row and per add (BenchmarkSortGroupRows,
// BenchmarkSortUserAdds). These sorts move small keys instead (an 8-byte
// prefix and the element's index) and then put the elements in the keys'
// order in one pass.

// rowSortKey is a user row's place in the sort of its group.
type rowSortKey struct {
	head uint64 // the row's userHead: most comparisons end here
	idx  int32  // the row's index in the group
}

// groupSort sorts groups of user rows, keeping its buffers from group to
// group (the flusher sorts hundreds of groups a flush).
type groupSort struct {
	keys []rowSortKey
	rows []userRow // a copy of the group being sorted
}

// sort sorts rows into write order (compareGroupRows) and sums rows of
// equal keys, in place, and returns them.
func (s *groupSort) sort(rows []userRow) []userRow {
	keys := s.keys[:0]
	for i := range rows {
		keys = append(keys, rowSortKey{head: rows[i].userHead, idx: int32(i)})
	}
	slices.SortFunc(keys, func(a, b rowSortKey) int {
		if a.head != b.head {
			return cmp.Compare(a.head, b.head)
		}
		return compareGroupRows(&rows[a.idx], &rows[b.idx])
	})
	src := append(s.rows[:0], rows...)
	n := 0
	for _, k := range keys {
		r := &src[k.idx]
		if n > 0 && rows[n-1].userKey == r.userKey {
			rows[n-1].Counts.add(r.Counts)
			continue
		}
		rows[n] = *r
		n++
	}
	clear(rows[n:]) // drop the merged rows' ids
	clear(src)      // the buffer keeps no ids alive
	s.keys, s.rows = keys[:0], src[:0]
	return rows[:n]
}

// addSortKey is a distinct-user add's place in the sort of the queue.
type addSortKey struct {
	group uint64
	idx   int32
}

// addSort sorts the distinct-user queue by group,
// keeping its buffers (pointer-free) from flush to flush.
type addSort struct {
	keys, spare []addSortKey
}

// sort sorts q by group (sortByGroup), holding mu while it moves q's
// elements.
func (s *addSort) sort(q []userAdd, mu sync.Locker) {
	sortByGroup(s, q, func(a *userAdd) uint64 { return a.group }, mu)
}

// sortByGroup sorts q by group: a radix sort of the keys (radixSort), then
// q put in their order in place. It holds mu only while
// it moves q's elements (readers of q take mu; q's writer calls this): the
// passes over the keys, most of the time, leave q as it is.
func sortByGroup[T any](s *addSort, q []T, group func(*T) uint64, mu sync.Locker) {
	if len(q) < 2 {
		return
	}
	keys := s.keys[:0]
	for i := range q {
		keys = append(keys, addSortKey{group: group(&q[i]), idx: int32(i)})
	}
	keys, spare := radixSort(keys, s.spare)
	mu.Lock()
	permute(q, keys)
	mu.Unlock()
	s.keys, s.spare = keys[:0], spare[:0]
}

// radixSort sorts keys by group, stably: a byte of the group a pass from
// the lowest, skipping the passes where every key has the same byte. It
// returns the keys sorted and spare, grown to len(keys): the two buffers
// swap places with each pass, so either may hold the result.
func radixSort(keys, spare []addSortKey) (sorted, spareOut []addSortKey) {
	spare = slices.Grow(spare[:0], len(keys))[:len(keys)]
	if len(keys) < 2 {
		return keys, spare
	}
	var counts [8][256]int
	for _, k := range keys {
		for b := range 8 {
			counts[b][byte(k.group>>(8*b))]++
		}
	}
	for b := range 8 {
		c := &counts[b]
		if c[byte(keys[0].group>>(8*b))] == len(keys) {
			continue // one bucket: the pass would not move a key
		}
		sum := 0
		for i, n := range c {
			c[i] = sum
			sum += n
		}
		for _, k := range keys {
			d := byte(k.group >> (8 * b))
			spare[c[d]] = k
			c[d]++
		}
		keys, spare = spare, keys
	}
	return keys, spare
}

// permute puts q[keys[i].idx] at q[i] for every i, in place, following
// each cycle of the permutation once (it marks keys it has placed with
// idx -1).
func permute[T any](q []T, keys []addSortKey) {
	for i := range keys {
		if keys[i].idx < 0 {
			continue
		}
		first := q[i]
		j := i
		for {
			k := int(keys[j].idx)
			keys[j].idx = -1
			if k == i {
				q[j] = first
				break
			}
			q[j] = q[k]
			j = k
		}
	}
}

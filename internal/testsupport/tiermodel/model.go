// Package tiermodel holds pure-Go reference models of the five algorithms,
// the semantics tiers/hot_check.lua implements in Redis. Only tests import
// it: the differential tests in package tiers run random call sequences
// through both and require every answer to agree.
package tiermodel

import (
	"fmt"
	"time"

	"github.com/quota-platform/quota/rules"
)

// The models are written for clarity rather than speed, in the script's
// integer milliseconds. The sliding window model keeps exact per-second
// counts, so it also checks the script's multi-level bucket arithmetic.
//
// Shared definitions (now in ms since the Unix epoch, W the window in ms,
// L the limit, c the cost):
//   - a cell allows a call when the call fits its state now;
//   - remaining, reset and retry describe the state after the call when it
//     is counted (or, in a dry run, would be), else the state now;
//   - reset is when the state is next "less used": fixed_window: the
//     window's end; sliding_window, sliding_log: when the oldest counted
//     call leaves the window; token_bucket: when the bucket is full again;
//     min_interval: when the next call may go;
//   - retry is when a call of cost c could pass (0 when the cell allows);
//     a cost over the limit never fits, and its retry is the time until the
//     state is empty/full.

// Model is the reference model of one cell (one limit of one rule for one
// identity).
type Model interface {
	// Peek reports whether a call of cost fits at now. It changes nothing.
	Peek(now, cost int64) bool
	// Metrics returns remaining, reset-after and retry-after (ms, retry for
	// a call of cost) of the state after a call of cost is counted when post
	// is set, else of the state now. It changes nothing.
	Metrics(now, cost int64, post bool) (remaining, reset, retry int64)
	// Commit counts a call of cost at now, whether or not it fits.
	Commit(now, cost int64)
}

// Mode is how a check counts, numbered as tiers.Mode and hot_check.lua's
// ARGV[3] (refunds are not modelled).
type Mode uint8

// The modes.
const (
	Enforce Mode = iota // count only if every non-shadow cell allows
	DryRun              // count nothing
	Report              // count unconditionally
)

// Outcome is one cell's answer as the script replies it: whether the cell
// allows, and remaining, reset and retry (ms) as Model.Metrics returns
// them (tiers turns them into a tiers.Outcome).
type Outcome struct {
	Allowed                 bool
	Remaining, Reset, Retry int64
}

// New returns the reference model of a cell.
func New(a rules.Algorithm, limit int64, window time.Duration) (Model, error) {
	w := window.Milliseconds()
	if limit < 1 || w < 1000 || w%1000 != 0 {
		return nil, fmt.Errorf("tiermodel: limit %d window %s", limit, window)
	}
	switch a {
	case rules.FixedWindow:
		return &FixedWindow{Limit: limit, Window: w, used: map[int64]int64{}}, nil
	case rules.SlidingWindow:
		return &SlidingWindow{Limit: limit, Window: w}, nil
	case rules.TokenBucket:
		return &TokenBucket{Limit: limit, Window: w}, nil
	case rules.SlidingLog:
		return &SlidingLog{Limit: limit, Window: w}, nil
	case rules.MinInterval:
		return &MinInterval{Limit: limit, Window: w}, nil
	}
	return nil, fmt.Errorf("tiermodel: unknown algorithm %q", a)
}

// Cell is a model with its cell's shadow flag.
type Cell struct {
	Model  Model
	Shadow bool
}

// CheckModels decides one op against cell models exactly as hot_check.lua
// decides it against Redis: every cell peeks; the op counts in every cell
// when mode is Report, or Enforce and every non-shadow cell allows; each
// cell answers its own decision with the state after the call when counted
// (or, in a dry run where every non-shadow cell allows, would be), else the
// state now. It returns one Outcome per cell and whether the
// cost was counted.
func CheckModels(now time.Time, cost int64, mode Mode, cells []Cell) ([]Outcome, bool) {
	ms := now.UnixMilli()
	allowed := make([]bool, len(cells))
	all := true
	for i, c := range cells {
		allowed[i] = c.Model.Peek(ms, cost)
		if !allowed[i] && !c.Shadow {
			all = false
		}
	}
	commit := mode == Report || (mode == Enforce && all)
	post := commit || (mode == DryRun && all)
	out := make([]Outcome, len(cells))
	for i, c := range cells {
		rem, reset, retry := c.Model.Metrics(ms, cost, post)
		out[i] = Outcome{Allowed: allowed[i], Remaining: rem, Reset: reset, Retry: retry}
	}
	if commit {
		for _, c := range cells {
			c.Model.Commit(ms, cost)
		}
	}
	return out, commit
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// FixedWindow: windows aligned to the Unix epoch (index = now / W); a
// call fits when the window's count plus c is at most L. Reset and retry:
// the window's end.
type FixedWindow struct {
	Limit, Window int64
	used          map[int64]int64 // window index -> count
}

// Peek implements Model.
func (m *FixedWindow) Peek(now, cost int64) bool {
	return m.used[now/m.Window]+cost <= m.Limit
}

// Metrics implements Model.
func (m *FixedWindow) Metrics(now, cost int64, post bool) (int64, int64, int64) {
	used := m.used[now/m.Window]
	if post {
		used += cost
	}
	reset := m.Window - now%m.Window
	return m.Limit - used, reset, reset
}

// Commit implements Model.
func (m *FixedWindow) Commit(now, cost int64) {
	idx := now / m.Window
	m.used[idx] += cost
	for k := range m.used {
		if k < idx-1 { // keep the previous window for a clock a little behind
			delete(m.used, k)
		}
	}
}

// SlidingWindow keeps the exact count of calls per second. The window
// at now is the W/1000 seconds ending with now's second; a call of second s
// leaves it at (s + W/1000) * 1000 ms. A call fits when the calls in the
// window plus c are at most L. Reset: when the oldest call in the window
// leaves; retry: when enough have left for c to fit (cost > L: when the
// newest leaves).
type SlidingWindow struct {
	Limit, Window int64
	secs          []secCount // ascending seconds with calls
}

type secCount struct{ sec, n int64 }

// inWindow returns the calls of the window at now, oldest first.
func (m *SlidingWindow) inWindow(now int64) []secCount {
	s0 := now/1000 - m.Window/1000 + 1
	i := 0
	for i < len(m.secs) && m.secs[i].sec < s0 {
		i++
	}
	return m.secs[i:]
}

func sumCounts(cs []secCount) int64 {
	var n int64
	for _, c := range cs {
		n += c.n
	}
	return n
}

// Peek implements Model.
func (m *SlidingWindow) Peek(now, cost int64) bool {
	return sumCounts(m.inWindow(now))+cost <= m.Limit
}

// Metrics implements Model.
func (m *SlidingWindow) Metrics(now, cost int64, post bool) (int64, int64, int64) {
	cs := append([]secCount(nil), m.inWindow(now)...)
	if post {
		cs = append(cs, secCount{now / 1000, cost})
	}
	cnt := sumCounts(cs)
	leave := func(sec int64) int64 { return (sec+m.Window/1000)*1000 - now }
	kth := func(x int64) int64 { // second of the x-th oldest call
		var cum int64
		for _, c := range cs {
			if cum += c.n; cum >= x {
				return c.sec
			}
		}
		panic("kth past the count")
	}
	var reset, retry int64
	if cnt > 0 {
		reset = leave(kth(1))
	}
	switch {
	case cost > m.Limit:
		if cnt > 0 {
			retry = leave(cs[len(cs)-1].sec)
		}
	case cnt+cost > m.Limit:
		retry = leave(kth(cnt + cost - m.Limit))
	}
	return m.Limit - cnt, reset, retry
}

// Commit implements Model.
func (m *SlidingWindow) Commit(now, cost int64) {
	m.secs = m.inWindow(now)
	sec := now / 1000
	if n := len(m.secs); n > 0 && m.secs[n-1].sec >= sec {
		if m.secs[n-1].sec > sec {
			panic("sliding window model: time went backwards")
		}
		m.secs[n-1].n += cost
		return
	}
	m.secs = append(m.secs, secCount{sec, cost})
}

// TokenBucket holds tokens in units of 1/W of a token: capacity L*W
// units, refilled by L units per ms since the last refill, a call of cost c
// takes c*W units and fits when c <= L and they are there. A count may
// leave debt down to -L*W units (one full bucket). Remaining: whole tokens;
// reset: ms to full; retry: ms until c tokens are there (cost > L: to full).
type TokenBucket struct {
	Limit, Window int64
	has           bool
	tokens, last  int64
}

func (m *TokenBucket) at(now int64) (tokens, last int64) {
	capacity := m.Limit * m.Window
	if !m.has {
		return capacity, now
	}
	tokens, last = min(m.tokens, capacity), m.last
	if now > last {
		// refill (now-last)*L units, capped at the capacity, without overflow
		if need := capacity - tokens; now-last >= ceilDiv(need, m.Limit) {
			tokens = capacity
		} else {
			tokens += (now - last) * m.Limit
		}
		last = now
	}
	return tokens, last
}

func (m *TokenBucket) charge(tokens, cost int64) int64 {
	capacity := m.Limit * m.Window
	if cost >= 2*m.Limit {
		return -capacity
	}
	return max(tokens-cost*m.Window, -capacity)
}

// Peek implements Model.
func (m *TokenBucket) Peek(now, cost int64) bool {
	t, _ := m.at(now)
	return cost <= m.Limit && t >= cost*m.Window
}

// Metrics implements Model.
func (m *TokenBucket) Metrics(now, cost int64, post bool) (int64, int64, int64) {
	t, _ := m.at(now)
	if post {
		t = m.charge(t, cost)
	}
	rem := max(t, 0) / m.Window
	reset := ceilDiv(m.Limit*m.Window-t, m.Limit)
	retry := reset
	if cost <= m.Limit {
		retry = ceilDiv(max(cost*m.Window-t, 0), m.Limit)
	}
	return rem, reset, retry
}

// Commit implements Model.
func (m *TokenBucket) Commit(now, cost int64) {
	t, last := m.at(now)
	m.tokens, m.last, m.has = m.charge(t, cost), last, true
}

// SlidingLog keeps the times of the last L counted calls (a call of
// cost c is c entries), each stamped max(now, newest) so they never
// decrease. A call fits when c <= L and the entries in (now-W, now] plus c
// are at most L. Reset: when the oldest entry in the window leaves; retry:
// when enough have left for c to fit (cost > L: when the newest leaves).
type SlidingLog struct {
	Limit, Window int64
	log           []int64
}

func (m *SlidingLog) stamp(now int64) int64 {
	if n := len(m.log); n > 0 && m.log[n-1] > now {
		return m.log[n-1]
	}
	return now
}

func (m *SlidingLog) after(now, cost int64) []int64 {
	log := append([]int64(nil), m.log...)
	ts := m.stamp(now)
	for range min(cost, m.Limit) {
		log = append(log, ts)
	}
	if len(log) > int(m.Limit) {
		log = log[len(log)-int(m.Limit):]
	}
	return log
}

func (m *SlidingLog) inWindow(log []int64, now int64) []int64 {
	i := 0
	for i < len(log) && log[i] <= now-m.Window {
		i++
	}
	return log[i:]
}

// Peek implements Model.
func (m *SlidingLog) Peek(now, cost int64) bool {
	return cost <= m.Limit && int64(len(m.inWindow(m.log, now)))+cost <= m.Limit
}

// Metrics implements Model.
func (m *SlidingLog) Metrics(now, cost int64, post bool) (int64, int64, int64) {
	log := m.log
	if post {
		log = m.after(now, cost)
	}
	in := m.inWindow(log, now)
	cnt := int64(len(in))
	var reset, retry int64
	if cnt > 0 {
		reset = in[0] + m.Window - now
	}
	switch {
	case cost > m.Limit:
		if cnt > 0 {
			retry = in[cnt-1] + m.Window - now
		}
	case cnt+cost > m.Limit:
		retry = in[cnt+cost-m.Limit-1] + m.Window - now
	}
	return m.Limit - cnt, reset, retry
}

// Commit implements Model.
func (m *SlidingLog) Commit(now, cost int64) { m.log = m.after(now, cost) }

// MinInterval spaces counted calls interval = ceil(W/L) ms apart: next
// is the earliest time the next call may be counted; a call fits when
// c <= L and now >= next; counting it sets next = max(next, now) +
// c*interval, at most now + L*interval. Remaining: 1 when a call may go
// now, else 0; reset and retry: until next.
type MinInterval struct {
	Limit, Window int64
	has           bool
	next          int64
}

func (m *MinInterval) interval() int64 { return ceilDiv(m.Window, m.Limit) }

func (m *MinInterval) charged(now, cost int64) int64 {
	i := m.interval()
	limit := now + m.Limit*i
	if cost >= m.Limit {
		return limit
	}
	base := now
	if m.has && m.next > now {
		base = m.next
	}
	return min(base+cost*i, limit)
}

// Peek implements Model.
func (m *MinInterval) Peek(now, cost int64) bool {
	return cost <= m.Limit && (!m.has || now >= m.next)
}

// Metrics implements Model.
func (m *MinInterval) Metrics(now, cost int64, post bool) (int64, int64, int64) {
	next, has := m.next, m.has
	if post {
		next, has = m.charged(now, cost), true
	}
	var wait int64
	if has && next > now {
		wait = next - now
	}
	rem := int64(0)
	if wait == 0 {
		rem = 1
	}
	return rem, wait, wait
}

// Commit implements Model.
func (m *MinInterval) Commit(now, cost int64) {
	m.next, m.has = m.charged(now, cost), true
}

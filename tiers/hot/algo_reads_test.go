package hot

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
)

// readsOf runs one op through the script and returns the number of stored
// values it read, as MONITOR saw them (the HMGET fields of its scripts).
func readsOf(t *testing.T, s *Store, mon *monitor, prefix string, now int64, op *tiers.Op) int64 {
	t.Helper()
	before := mon.sync(t, s, prefix)
	c := Call{Op: op}
	keys, args := s.args(&c, time.UnixMilli(now), op.Mode)
	res, err := s.script.Run(context.Background(), s.rdb, keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4*len(op.Cells)+1 {
		t.Fatalf("reply of %d values", len(res))
	}
	return int64(mon.sync(t, s, prefix) - before)
}

// monitor counts, from Redis' own MONITOR stream, the fields of the HMGETs
// that scripts send for keys under prefix: an account of the reads that
// does not rely on the script's word.
type monitor struct {
	conn   net.Conn
	mu     sync.Mutex
	fields int
	marks  map[string]bool
	done   chan struct{}
}

func startMonitor(t *testing.T, prefix string) *monitor {
	conn, err := net.Dial("tcp", testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	m := &monitor{conn: conn, marks: map[string]bool{}, done: make(chan struct{})}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(conn, 1<<20)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("monitor: %q %v", line, err)
	}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			// +1795415157.845771 [0 lua] "HMGET" "key" "f1" "f2"
			if !strings.Contains(line, prefix) {
				continue
			}
			m.mu.Lock()
			if i := strings.Index(strings.ToUpper(line), `"ECHO" "`); i >= 0 {
				m.marks[strings.TrimSpace(line[i+8:])] = true
			}
			if i := strings.Index(line, `[0 lua] "HMGET" "`); i >= 0 {
				m.fields += quotedArgs(line[i+8:]) - 2 // less HMGET and the key
			}
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-m.done })
	return m
}

// quotedArgs counts the quoted arguments of a MONITOR line ("a" "b\"c").
func quotedArgs(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		for i++; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' {
				i++
			}
		}
		n++
	}
	return n
}

// sync waits until the stream has shown every command sent before it.
func (m *monitor) sync(t *testing.T, s *Store, prefix string) int {
	mark := prefix + testenv.RandomHex(4)
	if err := s.rdb.Echo(context.Background(), mark).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		ok, n := m.marks[mark+`"`], m.fields
		m.mu.Unlock()
		if ok {
			return n
		}
	}
	t.Fatal("monitor stream did not catch up")
	return 0
}

// A 24 h sliding window is decided from at most 150 stored values per
// check, however its calls are spread and whatever the check needs (the
// count, reset from the oldest call, retry from the k-th oldest): counted
// from Redis' MONITOR stream, check by check.
func TestAlgoReads_SlidingWindow24hReadsAtMost150Buckets(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	s := NewStore(rdb, Options{Prefix: prefix})
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	mon := startMonitor(t, prefix)
	rng := rand.New(rand.NewPCG(1, 2))
	day := int64(24 * 3600 * 1000)
	var maxReads int64
	checks := 0
	for _, density := range []int{20, 300, 3000} {
		cell := algoCell(rules.SlidingWindow, 10, 24*time.Hour, fmt.Sprint("reads", density))
		start := t0 + rng.Int64N(day)
		// history: density calls at random times over the past day
		times := make([]int64, density)
		for i := range times {
			times[i] = start - day + rng.Int64N(day)
		}
		slices.Sort(times)
		pipe := rdb.Pipeline()
		var cmds []*redis.Cmd
		for _, at := range times {
			c := Call{Op: &tiers.Op{Cost: 1, Mode: tiers.Report, Cells: []tiers.Cell{cell}}}
			keys, args := s.args(&c, time.UnixMilli(at), tiers.Report)
			cmds = append(cmds, s.script.EvalSha(context.Background(), pipe, keys, args...))
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				t.Fatal(err)
			}
		}
		// then checks over the next day: mostly denied, so reset and retry descend
		now := start
		for range 150 {
			now += rng.Int64N(day / 100)
			op := &tiers.Op{Cost: 1 + rng.Int64N(12), Mode: tiers.Mode(rng.IntN(3)), Cells: []tiers.Cell{cell}}
			reads := readsOf(t, s, mon, prefix, now, op)
			maxReads = max(maxReads, reads)
			checks++
			if reads > 150 {
				t.Fatalf("density %d at %d: %d values read", density, now, reads)
			}
		}
	}
	if maxReads == 0 {
		t.Fatal("MONITOR saw no read: the count is not measuring the checks")
	}
	t.Logf("24 h sliding window: at most %d values read per check over %d checks", maxReads, checks)
}

package analytics

import "strconv"

// xorshift is the tests' and benchmarks' random source (Marsaglia's
// xorshift64, shifts 13, 7, 17): cheap beside what they measure, and the
// same sequence every run, so runs of one benchmark record the same calls.
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
// 100,000 users, a call's three picked from one xorshift value, so that
// nearly every call of a flush is a new per-user row.
type uniformLoad struct {
	apps, ifaces, users []string
	x                   xorshift
}

func newUniformLoad() *uniformLoad {
	return &uniformLoad{
		apps:   benchNames("app-", 1000),
		ifaces: benchNames("iface.", 50),
		users:  benchNames("user-", 100_000),
		x:      newXorshift(),
	}
}

// Next is the next call's app, interface and user.
func (l *uniformLoad) Next() (app, iface, user string) {
	x := l.x.Next()
	return l.apps[x%1000], l.ifaces[(x>>10)%50], l.users[(x>>20)%100_000]
}

// benchNames are n names prefix0, prefix1, … (make bench's apps, users
// and interfaces).
func benchNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

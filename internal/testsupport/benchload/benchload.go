// Package benchload is test support: make bench's keys for the analytics
// packages' tests and benchmarks (a uniform load of apps, interfaces and
// users, drawn from a fixed random sequence).
package benchload

import "strconv"

// Xorshift is the tests' and benchmarks' random source (Marsaglia's
// xorshift64, shifts 13, 7, 17): cheap beside what they measure, and the
// same sequence every run, so runs of one benchmark record the same calls.
type Xorshift uint64

// NewXorshift is the sequence at its start.
func NewXorshift() Xorshift { return 88172645463325252 }

// Next is the sequence's next value.
func (x *Xorshift) Next() uint64 {
	*x ^= *x << 13
	*x ^= *x >> 7
	*x ^= *x << 17
	return uint64(*x)
}

// Uniform is make bench's uniform keys: 1,000 apps, 50 interfaces and
// 100,000 users, a call's three picked from one Xorshift value, so that
// nearly every call of a flush is a new per-user row.
type Uniform struct {
	Apps, Ifaces, Users []string
	x                   Xorshift
}

// NewUniform is the load at its start.
func NewUniform() *Uniform {
	return &Uniform{
		Apps:   Names("app-", 1000),
		Ifaces: Names("iface.", 50),
		Users:  Names("user-", 100_000),
		x:      NewXorshift(),
	}
}

// Next is the next call's app, interface and user.
func (l *Uniform) Next() (app, iface, user string) {
	x := l.x.Next()
	return l.Apps[x%1000], l.Ifaces[(x>>10)%50], l.Users[(x>>20)%100_000]
}

// Names are n names prefix0, prefix1, … (make bench's apps, users and
// interfaces).
func Names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

package loadgen

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Distribution names accepted by -dist.
const (
	DistUniform = "uniform"
	DistZipf    = "zipf"
)

// Keyspace describes how check identities are drawn.
//
// Without Identities, each of the four dimensions is drawn independently
// from [0, n) with the chosen distribution (under zipf, index 0 is the
// hottest value of each dimension).
//
// With Identities > 0, a single identity index is drawn from
// [0, Identities) and the four dimensions are derived from it
// deterministically: (app, user, interface) is a bijective image of the
// index in [0, Apps*Users*Ifaces), so Identities distinct indexes give
// exactly Identities distinct (app, user, interface) tuples, and the hot
// indexes of a zipf draw are scattered over apps and users rather than
// piled onto app 0.
type Keyspace struct {
	Apps       uint64
	Users      uint64
	IPs        uint64
	Ifaces     uint64
	Identities uint64
	Dist       string
	ZipfS      float64
}

// Key is one check identity, as indexes into each dimension.
type Key struct {
	App, User, IP, Iface uint64
}

// maxIPs bounds the IP dimension: IP index i is rendered as the IPv4
// address 1.0.0.0 + i, which must stay below 255.255.255.255.
const maxIPs = 1<<32 - 1<<24 - 1

// Validate reports the first problem with the keyspace, phrased for a
// command-line user.
func (k Keyspace) Validate() error {
	switch {
	case k.Apps < 1:
		return errors.New("invalid -apps: must be at least 1")
	case k.Users < 1:
		return errors.New("invalid -users: must be at least 1")
	case k.IPs < 1:
		return errors.New("invalid -ips: must be at least 1")
	case k.IPs > maxIPs:
		return fmt.Errorf("invalid -ips %d: at most %d distinct IPv4 addresses", k.IPs, uint64(maxIPs))
	case k.Ifaces < 1:
		return errors.New("invalid -ifaces: must be at least 1")
	}
	switch k.Dist {
	case DistUniform:
	case DistZipf:
		// math/rand/v2's Zipf needs s > 1 (NaN fails this test too).
		if !(k.ZipfS > 1) {
			return fmt.Errorf("invalid -zipf-s %g: must be greater than 1 with -dist zipf", k.ZipfS)
		}
	default:
		return fmt.Errorf("invalid -dist %q: must be uniform or zipf", k.Dist)
	}
	if k.Identities > 0 {
		m, ok := k.tupleSpace()
		if !ok {
			return errors.New("invalid key space: -apps * -users * -ifaces overflows 64 bits")
		}
		if k.Identities > m {
			return fmt.Errorf("invalid -identities %d: more than the %d distinct (app, user, interface) tuples of -apps * -users * -ifaces", k.Identities, m)
		}
	}
	return nil
}

// tupleSpace is Apps*Users*Ifaces, and false if that overflows.
func (k Keyspace) tupleSpace() (uint64, bool) {
	hi, m := bits.Mul64(k.Apps, k.Users)
	if hi != 0 {
		return 0, false
	}
	hi, m = bits.Mul64(m, k.Ifaces)
	return m, hi == 0
}

// affine is the permutation x -> (a*x + b) mod m of [0, m); it is a
// bijection because gcd(a, m) == 1.
type affine struct{ a, b, m uint64 }

func newAffine(m, seedA, seedB uint64) affine {
	if m <= 1 {
		return affine{a: 0, b: 0, m: 1}
	}
	a := seedA % m
	for a == 0 || gcd(a, m) != 1 {
		a++
		if a >= m {
			a = 1
		}
	}
	return affine{a: a, b: seedB % m, m: m}
}

func (p affine) apply(x uint64) uint64 {
	if p.m <= 1 {
		return 0
	}
	hi, lo := bits.Mul64(p.a, x%p.m)
	lo, carry := bits.Add64(lo, p.b, 0)
	hi += carry
	return bits.Rem64(hi, lo, p.m)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Fixed multipliers for the identity permutations: the permutation is part
// of the workload's definition, so it does not depend on -seed (which only
// drives the draws). Identity i names the same tuple in every run.
const (
	tupleMulSeed = 0x9E3779B97F4A7C15 // golden ratio
	tupleAddSeed = 0x632BE59BD9B4E019
	ipMulSeed    = 0xBF58476D1CE4E5B9
	ipAddSeed    = 0x94D049BB133111EB
)

// Identity derives the key of identity index id. It is a pure function of
// the keyspace and id. For id < Apps*Users*Ifaces, distinct ids give
// distinct (App, User, Iface).
func (k Keyspace) Identity(id uint64) Key {
	m, _ := k.tupleSpace()
	return k.identity(newAffine(m, tupleMulSeed, tupleAddSeed), newAffine(k.IPs, ipMulSeed, ipAddSeed), id)
}

func (k Keyspace) identity(tuple, ip affine, id uint64) Key {
	p := tuple.apply(id)
	var key Key
	key.App = p % k.Apps
	p /= k.Apps
	key.Iface = p % k.Ifaces
	p /= k.Ifaces
	key.User = p % k.Users
	key.IP = ip.apply(id)
	return key
}

// sampler draws from [0, n) uniformly or from a Zipf law.
type sampler struct {
	n uint64
	r *rand.Rand
	z *rand.Zipf
}

func newSampler(r *rand.Rand, n uint64, dist string, s float64) sampler {
	sm := sampler{n: n, r: r}
	if dist == DistZipf && n > 1 {
		sm.z = rand.NewZipf(r, s, 1, n-1)
	}
	return sm
}

func (s *sampler) next() uint64 {
	if s.z != nil {
		return s.z.Uint64()
	}
	if s.n <= 1 {
		return 0
	}
	return s.r.Uint64N(s.n)
}

// KeySource draws keys. It is not safe for concurrent use: each worker
// owns one. Two sources built from the same keyspace, seed and stream
// draw the same sequence.
type KeySource struct {
	ks                     Keyspace
	ident                  bool
	id, app, user, ip, ifc sampler
	tuple, ipPerm          affine
}

// NewKeySource returns a source for the given seed and stream (the worker
// index). The keyspace must be valid.
func NewKeySource(ks Keyspace, seed, stream uint64) *KeySource {
	r := rand.New(rand.NewPCG(seed, stream^0xDA3E39CB94B95BDB))
	src := &KeySource{ks: ks}
	if ks.Identities > 0 {
		src.ident = true
		src.id = newSampler(r, ks.Identities, ks.Dist, ks.ZipfS)
		m, _ := ks.tupleSpace()
		src.tuple = newAffine(m, tupleMulSeed, tupleAddSeed)
		src.ipPerm = newAffine(ks.IPs, ipMulSeed, ipAddSeed)
		return src
	}
	src.app = newSampler(r, ks.Apps, ks.Dist, ks.ZipfS)
	src.user = newSampler(r, ks.Users, ks.Dist, ks.ZipfS)
	src.ip = newSampler(r, ks.IPs, ks.Dist, ks.ZipfS)
	src.ifc = newSampler(r, ks.Ifaces, ks.Dist, ks.ZipfS)
	return src
}

// Next draws the next key.
func (s *KeySource) Next() Key {
	if s.ident {
		return s.ks.identity(s.tuple, s.ipPerm, s.id.next())
	}
	return Key{App: s.app.next(), User: s.user.next(), IP: s.ip.next(), Iface: s.ifc.next()}
}

// Package denialrig is test support for a batch's reads of cached denials:
// a limiter with a denial cache on a real Redis whose round trips are
// counted, and a flooder whose denial is cached with its IP cell still
// open (packages limiter and tracing).
package denialrig

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/limiter"
	"github.com/quota-platform/quota/rules"
	"github.com/quota-platform/quota/tiers"
	"github.com/quota-platform/quota/tiers/hot"
)

// Rig is a limiter under two hourly fixed-window rules, per_user (1) and
// per_ip (100), whose Flooder (user f behind IP x) has called twice: the
// second call was denied and cached, its IP cell open, 99 left.
type Rig struct {
	Limiter *limiter.Limiter
	Denials *limiter.Denials
	Calls   *testenv.RedisCalls // the limiter's Redis round trips
	Flooder *limiter.Request
}

// New returns a Rig whose hot store is wrapped by wrap (nil: none).
func New(t testing.TB, wrap func(tiers.Store) tiers.Store) *Rig {
	t.Helper()
	set, err := rules.NewSet([]rules.Rule{
		{Name: "per_user", Dimensions: []string{"user_id"}, Limit: 1, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
		{Name: "per_ip", Dimensions: []string{"ip"}, Limit: 100, Window: rules.Duration(time.Hour), Algorithm: rules.FixedWindow},
	})
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	r := &Rig{Denials: limiter.NewDenials(1000), Calls: &testenv.RedisCalls{}, Flooder: User("x", "f")}
	rdb.AddHook(r.Calls)
	var store tiers.Store = hot.NewStore(rdb, hot.Options{Prefix: prefix})
	if wrap != nil {
		store = wrap(store)
	}
	if r.Limiter, err = limiter.New(store, clock.NewFake(time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)), set); err != nil {
		t.Fatal(err)
	}
	r.Limiter.UseDenials(r.Denials)
	for range 2 {
		if _, err := r.Limiter.Check(context.Background(), r.Flooder); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// User is a check of user u behind ip.
func User(ip, u string) *limiter.Request {
	return &limiter.Request{Cost: 1, Dims: []limiter.Dim{{Name: "ip", Value: ip}, {Name: "user_id", Value: u}}}
}

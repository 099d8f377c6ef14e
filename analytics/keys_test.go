package analytics_test

import (
	"context"
	"testing"
	"time"
)

// Each quotad keeps the apps of the keys it verified for a minute (on its
// clock): a key rotated on another instance stops working here within
// that minute, and at once on the instance that rotated it.
func TestAppForKey_RotationElsewhereTakesEffectWithinAMinute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, nil)
	ctx := context.Background()
	other := e.open(nil) // a second quotad on the same shards and clock
	old, err := e.rec.CreateAppKey(ctx, "app-rot", false)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(when, key string, wantOK bool) {
		t.Helper()
		app, ok, err := e.rec.AppForKey(ctx, key)
		if err != nil || ok != wantOK || (ok && app != "app-rot") {
			t.Fatalf("%s: AppForKey = %q, %v, %v; want ok=%v", when, app, ok, err, wantOK)
		}
	}
	verify("before rotation", old, true)
	if _, ok, _ := other.AppForKey(ctx, old); !ok { // now cached there too
		t.Fatal("the other instance does not accept the key")
	}
	fresh, err := other.CreateAppKey(ctx, "app-rot", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := other.AppForKey(ctx, old); ok {
		t.Fatal("the instance that rotated the key still accepts the old one")
	}
	e.clk.Advance(59 * time.Second)
	verify("59 s after rotation elsewhere (cached)", old, true)
	verify("the new key", fresh, true)
	e.clk.Advance(2 * time.Second)
	verify("61 s after rotation elsewhere", old, false)
	verify("the new key, later", fresh, true)
}

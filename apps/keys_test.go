package apps_test

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/apps"
	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// Each quotad keeps the apps of the keys it verified for a minute (on its
// clock): a key rotated on another instance stops working here within
// that minute, and at once on the instance that rotated it.
func TestAppForKey_RotationElsewhereTakesEffectWithinAMinute(t *testing.T) {
	t.Parallel()
	dbs := testenv.MySQLShards(t, 2)
	clk := clock.NewFake(time.Date(2026, 11, 23, 10, 0, 30, 0, time.UTC))
	keys := apps.New(dbs, clk)
	ctx := context.Background()
	other := apps.New(dbs, clk) // a second quotad on the same shards and clock
	old, err := keys.Create(ctx, "app-rot", false)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(when, key string, wantOK bool) {
		t.Helper()
		app, ok, err := keys.App(ctx, key)
		if err != nil || ok != wantOK || (ok && app != "app-rot") {
			t.Fatalf("%s: AppForKey = %q, %v, %v; want ok=%v", when, app, ok, err, wantOK)
		}
	}
	verify("before rotation", old, true)
	if _, ok, _ := other.App(ctx, old); !ok { // now cached there too
		t.Fatal("the other instance does not accept the key")
	}
	fresh, err := other.Create(ctx, "app-rot", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := other.App(ctx, old); ok {
		t.Fatal("the instance that rotated the key still accepts the old one")
	}
	clk.Advance(59 * time.Second)
	verify("59 s after rotation elsewhere (cached)", old, true)
	verify("the new key", fresh, true)
	clk.Advance(2 * time.Second)
	verify("61 s after rotation elsewhere", old, false)
	verify("the new key, later", fresh, true)
}

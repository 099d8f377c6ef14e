package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// slot is Redis Cluster's: the reference value of its specification.
func TestSlot_IsRedisClustersCRC16(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want uint16
	}{{"123456789", 0x31C3 % 16384}, {"", 0}, {"foo", 12182}} {
		if got := slot(tc.key); got != tc.want {
			t.Errorf("slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// The heartbeat's keys fall one in each sixteenth of the slots, so that
// every master of a cluster of up to 16 holds one.
func TestRegistryTags_SpreadOverEverySixteenthOfTheSlots(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for _, tag := range registryTags {
		if tag == "" {
			t.Fatal("a sixteenth of the slots has no tag")
		}
		seen[int(slot(tag))*16/16384] = true
	}
	if len(seen) != 16 {
		t.Fatalf("tags cover %d sixteenths, want 16", len(seen))
	}
}

// Heartbeats are listed once per instance, the newest; a draining one
// says so; one that left is gone; one not seen for a day is forgotten.
func TestRegistry_ListsEachInstanceOnceWithItsNewestHeartbeat(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	member := func(url, state string) *Registry {
		return &Registry{RDB: rdb, Prefix: prefix, Now: clock, Self: func() Entry {
			return Entry{URL: url, Version: "v1", RulesVersion: "r1", State: state}
		}}
	}
	ctx := context.Background()
	a, b, c := member("http://a:8080", "serving"), member("http://b:8080", "serving"), member("http://c:8080", "serving")
	for _, r := range []*Registry{a, b, c} {
		if err := r.Beat(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(5 * time.Second)
	if err := b.Beat(ctx, "draining"); err != nil {
		t.Fatal(err)
	}
	c.Leave(ctx)
	list, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].URL != "http://a:8080" || list[1].URL != "http://b:8080" || list[1].State != "draining" || !list[1].SeenAt.Equal(now) {
		t.Fatalf("list %+v: want a serving, b draining as of its last beat, c gone", list)
	}
	now = now.Add(Forget + time.Second)
	if err := b.Beat(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if list, _ := a.List(ctx); len(list) != 1 || list[0].URL != "http://b:8080" {
		t.Fatalf("list %+v: want a forgotten after a day without a heartbeat", list)
	}
}

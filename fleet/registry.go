// Package fleet is what an operator sees of a fleet of quotad instances:
// each instance's heartbeat in Redis (Registry: its advertised URL,
// version, start, rules version, serving or draining), and the status
// one instance answers (GET /v1/admin/status) and quotactl status shows
// for the whole fleet.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Entry is one instance's heartbeat.
type Entry struct {
	URL          string    `json:"url"` // advertised: where the others and quotactl reach it
	Name         string    `json:"name"`
	Version      string    `json:"version"`
	StartedAt    time.Time `json:"started_at"`
	RulesVersion string    `json:"rules_version"`
	State        string    `json:"state"` // serving | draining
	SeenAt       time.Time `json:"seen_at"`
}

// Registry keeps an instance's heartbeat in Redis and reads the fleet's.
//
// The heartbeat is written to registryKeys hashes (field: the URL) whose
// hash tags fall in slots spread evenly over a Redis Cluster's 16,384, so
// that with one master down the instances are still found in the keys of
// the others (a single Redis holds them all). A heartbeat is written every
// Every and kept a day; a reader drops entries not seen for Stale.
type Registry struct {
	RDB    redis.UniversalClient
	Prefix string
	Self   func() Entry // this instance, as of now (nil: it only reads)
	Every  time.Duration
	Now    func() time.Time
}

const (
	registryKeys = 16
	// Stale is how long after its last heartbeat an instance is shown as
	// not seen (it died or lost Redis), and Forget when it is left out.
	Stale  = 15 * time.Second
	Forget = 24 * time.Hour
)

// registryTags are hash tags whose slots are spread over the cluster's
// slots, one in each sixteenth.
var registryTags = func() []string {
	tags := make([]string, registryKeys)
	found := 0
	for i := 0; found < registryKeys && i < 1_000_000; i++ {
		t := "fleet" + strconv.Itoa(i)
		b := int(slot(t)) * registryKeys / 16384
		if tags[b] == "" {
			tags[b] = t
			found++
		}
	}
	return tags
}()

// slot is Redis Cluster's hash slot of a key without braces: CRC16
// (XMODEM) mod 16384.
func slot(key string) uint16 {
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func (r *Registry) keys() []string {
	out := make([]string, len(registryTags))
	for i, t := range registryTags {
		out[i] = r.Prefix + "fleet:instances:{" + t + "}"
	}
	return out
}

func (r *Registry) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Registry) every() time.Duration {
	if r.Every > 0 {
		return r.Every
	}
	return 5 * time.Second
}

// Beat writes this instance's heartbeat (state overrides Self's when not
// ""). It fails only when no key could be written.
func (r *Registry) Beat(ctx context.Context, state string) error {
	e := r.Self()
	if state != "" {
		e.State = state
	}
	e.SeenAt = r.now().UTC()
	js, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("fleet heartbeat: %w", err)
	}
	var errs []error
	for _, k := range r.keys() {
		pipe := r.RDB.Pipeline()
		pipe.HSet(ctx, k, e.URL, js)
		pipe.Expire(ctx, k, Forget)
		if _, err := pipe.Exec(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == registryKeys {
		return fmt.Errorf("fleet heartbeat: %w", errors.Join(errs...))
	}
	return nil
}

// Run beats every Every until ctx ends.
func (r *Registry) Run(ctx context.Context, onErr func(error)) {
	t := time.NewTicker(r.every())
	defer t.Stop()
	for {
		if err := r.Beat(ctx, ""); err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Leave removes this instance's heartbeat (it stops).
func (r *Registry) Leave(ctx context.Context) {
	url := r.Self().URL
	for _, k := range r.keys() {
		r.RDB.HDel(ctx, k, url)
	}
}

// List is every instance seen within Forget, by URL, the newest heartbeat
// of each; it fails only when no key could be read.
func (r *Registry) List(ctx context.Context) ([]Entry, error) {
	newest := map[string]Entry{}
	var errs []error
	for _, k := range r.keys() {
		all, err := r.RDB.HGetAll(ctx, k).Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for url, js := range all {
			var e Entry
			if json.Unmarshal([]byte(js), &e) != nil {
				continue
			}
			if old, ok := newest[url]; !ok || e.SeenAt.After(old.SeenAt) {
				newest[url] = e
			}
		}
	}
	if len(errs) == registryKeys {
		return nil, fmt.Errorf("fleet registry: %w", errors.Join(errs...))
	}
	now := r.now()
	out := make([]Entry, 0, len(newest))
	for _, e := range newest {
		if now.Sub(e.SeenAt) <= Forget {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].URL < out[j].URL })
	return out, nil
}

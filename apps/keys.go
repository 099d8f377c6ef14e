// Package apps keeps the apps' keys for the stats API: a key is minted once,
// shown once, and only its SHA-256 is stored (table app_keys, on the shard
// analytics.ShardIndex picks for the app; sql/002_analytics.sql).
package apps

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quota-platform/quota/analytics"
	"github.com/quota-platform/quota/clock"
)

// ErrAppExists is returned by Create for an app that has a key already
// (and rotate was not asked).
var ErrAppExists = errors.New("the app already has a key")

// cacheTTL is how long a verified key is trusted without asking MySQL
// again: a key rotated on another instance stops working here within this
// time, on the instance that rotated it at once.
const cacheTTL = time.Minute

// Keys mints and verifies app keys. It is safe for concurrent use.
type Keys struct {
	dbs []*sql.DB
	clk clock.Clock
	// cache remembers the apps of keys verified in the last cacheTTL, by
	// the key's SHA-256 (never the key): a dashboard that refreshes itself
	// would otherwise cost a query per shard per request.
	cache sync.Map // string(sha256) → cached
}

type cached struct {
	app     string
	expires time.Time
}

// New returns the keys kept on dbs (the analytics shards); clk nil is the
// real clock.
func New(dbs []*sql.DB, clk clock.Clock) *Keys {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Keys{dbs: dbs, clk: clk}
}

// shard is the database of app's key: the shard of its analytics rows.
func (k *Keys) shard(app string) *sql.DB { return k.dbs[analytics.ShardIndex(app, len(k.dbs))] }

// Create mints a new random key for app and stores its SHA-256. The key is
// returned once and stored nowhere. Without rotate an app that has a key
// gets ErrAppExists; with rotate its old key stops working.
func (k *Keys) Create(ctx context.Context, app string, rotate bool) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	key := "qk_" + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(key))
	q := "INSERT INTO app_keys (app_id, key_hash) VALUES (?, ?)"
	if rotate {
		q += " ON DUPLICATE KEY UPDATE key_hash = VALUES(key_hash), created_at = CURRENT_TIMESTAMP"
	}
	if _, err := k.shard(app).ExecContext(ctx, q, app, sum[:]); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1062 {
			return "", ErrAppExists
		}
		return "", fmt.Errorf("app key of %q: %w", app, err)
	}
	if rotate {
		k.cache.Range(func(sum, v any) bool {
			if v.(cached).app == app {
				k.cache.Delete(sum)
			}
			return true
		})
	}
	return key, nil
}

// App is the app a key was minted for; ok is false for a key that no app
// has. Only the key's SHA-256 is looked up, and the stored hash is
// compared in constant time.
func (k *Keys) App(ctx context.Context, key string) (app string, ok bool, err error) {
	if key == "" {
		return "", false, nil
	}
	sum := sha256.Sum256([]byte(key))
	ck := string(sum[:])
	now := k.clk.Now()
	if v, hit := k.cache.Load(ck); hit {
		if c := v.(cached); now.Before(c.expires) {
			return c.app, true, nil
		}
		k.cache.Delete(ck)
	}
	for _, db := range k.dbs {
		var stored []byte
		err := db.QueryRowContext(ctx, "SELECT app_id, key_hash FROM app_keys WHERE key_hash = ?", sum[:]).Scan(&app, &stored)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", false, fmt.Errorf("app key lookup: %w", err)
		}
		if subtle.ConstantTimeCompare(stored, sum[:]) == 1 {
			k.cache.Store(ck, cached{app: app, expires: now.Add(cacheTTL)})
			return app, true, nil
		}
	}
	return "", false, nil
}

// List is every app that has a key, in no order.
func (k *Keys) List(ctx context.Context) ([]string, error) {
	var out []string
	for _, db := range k.dbs {
		rows, err := db.QueryContext(ctx, "SELECT app_id FROM app_keys")
		if err != nil {
			return nil, fmt.Errorf("list app keys: %w", err)
		}
		for rows.Next() {
			var a string
			if err := rows.Scan(&a); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list app keys: %w", err)
			}
			out = append(out, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("list app keys: %w", err)
		}
	}
	return out, nil
}

package analytics

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrAppExists is returned by CreateAppKey for an app that has a key
// already (and rotate was not asked).
var ErrAppExists = errors.New("the app already has a key")

// keyCacheTTL is how long a verified key is trusted without asking MySQL
// again (a key rotated on another instance stops working here within this
// time; on this one at once).
const keyCacheTTL = time.Minute

// keyCache remembers the apps of keys verified in the last keyCacheTTL: a
// dashboard that refreshes itself would otherwise cost a MySQL query per
// shard per request. Entries are keyed by the key's SHA-256, never the key.
type keyCache struct {
	m sync.Map // string(sha256) → keyCacheEntry
}

type keyCacheEntry struct {
	app     string
	expires time.Time
}

// app is the app of a key hash verified less than keyCacheTTL before now.
func (c *keyCache) app(sum string, now time.Time) (string, bool) {
	v, ok := c.m.Load(sum)
	if !ok {
		return "", false
	}
	e := v.(keyCacheEntry)
	if !now.Before(e.expires) {
		c.m.Delete(sum)
		return "", false
	}
	return e.app, true
}

func (c *keyCache) add(sum, app string, now time.Time) {
	c.m.Store(sum, keyCacheEntry{app: app, expires: now.Add(keyCacheTTL)})
}

// forget drops app's entries (its key was rotated).
func (c *keyCache) forget(app string) {
	c.m.Range(func(k, v any) bool {
		if v.(keyCacheEntry).app == app {
			c.m.Delete(k)
		}
		return true
	})
}

// CreateAppKey mints a new random key for app and stores its SHA-256 on
// the app's shard. The key itself is returned once and stored nowhere.
// Without rotate an app that has a key gets ErrAppExists; with rotate its
// old key stops working.
func (r *Recorder) CreateAppKey(ctx context.Context, app string, rotate bool) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	key := "qk_" + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(key))
	db := r.db(app).db
	q := "INSERT INTO app_keys (app_id, key_hash) VALUES (?, ?)"
	if rotate {
		q += " ON DUPLICATE KEY UPDATE key_hash = VALUES(key_hash), created_at = CURRENT_TIMESTAMP"
	}
	if _, err := db.ExecContext(ctx, q, app, sum[:]); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1062 {
			return "", ErrAppExists
		}
		return "", err
	}
	if rotate {
		r.appKeys.forget(app)
	}
	return key, nil
}

// AppForKey is the app a key was minted for; ok is false for a key that no
// app has. Only the key's SHA-256 is looked up, and the stored hash is
// compared in constant time.
func (r *Recorder) AppForKey(ctx context.Context, key string) (app string, ok bool, err error) {
	if key == "" {
		return "", false, nil
	}
	sum := sha256.Sum256([]byte(key))
	ck := string(sum[:])
	if app, hit := r.appKeys.app(ck, r.clk.Now()); hit {
		return app, true, nil
	}
	for _, sh := range r.shards {
		var stored []byte
		err := sh.db.QueryRowContext(ctx, "SELECT app_id, key_hash FROM app_keys WHERE key_hash = ?", sum[:]).Scan(&app, &stored)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", false, err
		}
		if subtle.ConstantTimeCompare(stored, sum[:]) == 1 {
			r.appKeys.add(ck, app, r.clk.Now())
			return app, true, nil
		}
	}
	return "", false, nil
}

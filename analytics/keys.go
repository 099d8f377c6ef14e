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
// again (a rotated key stops working on other instances within this time).
const keyCacheTTL = time.Minute

type keyCacheEntry struct {
	app     string
	expires time.Time
}

var keyCache sync.Map // hex sha256 → keyCacheEntry (process-wide; keys are random, so no clash across recorders)

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
		keyCache.Range(func(k, v any) bool {
			if v.(keyCacheEntry).app == app {
				keyCache.Delete(k)
			}
			return true
		})
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
	if v, hit := keyCache.Load(ck); hit {
		e := v.(keyCacheEntry)
		if time.Now().Before(e.expires) {
			return e.app, true, nil
		}
		keyCache.Delete(ck)
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
			keyCache.Store(ck, keyCacheEntry{app: app, expires: time.Now().Add(keyCacheTTL)})
			return app, true, nil
		}
	}
	return "", false, nil
}

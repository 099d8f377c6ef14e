// Package nearquota keeps, for each app and calendar quota counted per
// identity (a user's day, an IP's month), the identities past half of it in
// the current period, so the dashboard can list those nearest their limits.
//
// Only crossings are written (limiter.WithIdentityQuotaWatcher: 50 %, 80 %
// and 100 %, each told once per identity and period by the check that
// crossed it), so an identity costs at most three writes a period whatever
// its traffic, and the check path only hands a crossing over. The exact
// figures are read from the counters when asked (GET
// /v1/apps/{app}/usage/closest); this record only picks whom to ask about.
package nearquota

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/limiter"
)

// DefaultPerQuota bounds the identities kept per app, quota and period:
// past it the lowest shares are dropped, so Redis holds at most
// DefaultPerQuota members a quota whatever the number of identities.
const DefaultPerQuota = 1000

// queueSize bounds the crossings waiting to be written; beyond it they are
// dropped and counted, never waited for.
const queueSize = 4096

// Options configure a Record.
type Options struct {
	Redis      redis.UniversalClient
	Prefix     string // QUOTA_REDIS_KEY_PREFIX
	PerQuota   int    // default DefaultPerQuota
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

// Record is a limiter.QuotaWatcher of identities' crossings, and the
// reader of what it wrote.
type Record struct {
	o       Options
	queue   chan limiter.Crossing
	written *prometheus.CounterVec
}

// New returns a Record; Run writes what it is told.
func New(o Options) *Record {
	if o.PerQuota <= 0 {
		o.PerQuota = DefaultPerQuota
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	r := &Record{o: o, queue: make(chan limiter.Crossing, queueSize),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_near_quota_writes_total",
			Help: "Identities' calendar-quota crossings (50, 80, 100 %) recorded for the dashboard's nearest list, by result: written, failed, dropped (queue full).",
		}, []string{"result"})}
	for _, res := range []string{"written", "failed", "dropped"} {
		r.written.WithLabelValues(res)
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(r.written)
	}
	return r
}

// Crossed hands c to Run without blocking.
func (r *Record) Crossed(c limiter.Crossing) {
	if c.Identity == nil {
		return
	}
	select {
	case r.queue <- c:
	default:
		r.written.WithLabelValues("dropped").Inc()
	}
}

// Run writes the crossings it is handed until ctx ends.
func (r *Record) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-r.queue:
			if err := r.write(ctx, c); err != nil {
				r.written.WithLabelValues("failed").Inc()
				r.o.Log.Warn("near-quota record not written", "app_id", c.App, "rule", c.Rule, "err", err)
				continue
			}
			r.written.WithLabelValues("written").Inc()
		}
	}
}

// key is the sorted set of one app's identities near one quota in the
// period ending at end: members are the identities (as a query string),
// scores the highest share crossed.
func (r *Record) key(app, rule string, end time.Time) string {
	return r.o.Prefix + "near:" + strconv.Quote(app) + ":" + rule + ":" + strconv.FormatInt(end.Unix(), 10)
}

// write records c: the identity's share rises to c.Threshold (never
// falls), the set keeps its PerQuota highest, and it lives until an hour
// after its period.
func (r *Record) write(ctx context.Context, c limiter.Crossing) error {
	key := r.key(c.App, c.Rule, c.PeriodEnd)
	member := url.Values{}
	for k, v := range c.Identity {
		member.Set(k, v)
	}
	_, err := r.o.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAddGT(ctx, key, redis.Z{Score: c.Threshold, Member: member.Encode()})
		p.ZRemRangeByRank(ctx, key, 0, int64(-r.o.PerQuota-1))
		p.ExpireAt(ctx, key, c.PeriodEnd.Add(time.Hour))
		return nil
	})
	if err != nil {
		return fmt.Errorf("near quota %s/%s: %w", c.App, c.Rule, err)
	}
	return nil
}

// Near is one identity near a quota: its dimensions but app_id, and the
// highest share of the quota it crossed (0.5, 0.8 or 1).
type Near struct {
	Identity map[string]string
	Share    float64
}

// Nearest are at most n identities of app past half of quota q in its
// current period, the highest shares first.
func (r *Record) Nearest(ctx context.Context, app string, q limiter.IdentityQuota, n int) ([]Near, error) {
	zs, err := r.o.Redis.ZRevRangeWithScores(ctx, r.key(app, q.Rule, q.PeriodEnd), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("near quota %s/%s: %w", app, q.Rule, err)
	}
	out := make([]Near, 0, len(zs))
	for _, z := range zs {
		vals, err := url.ParseQuery(z.Member.(string))
		if err != nil {
			return nil, fmt.Errorf("near quota %s/%s: member %q: %w", app, q.Rule, z.Member, err)
		}
		id := make(map[string]string, len(vals))
		for k, v := range vals {
			id[k] = v[0]
		}
		out = append(out, Near{Identity: id, Share: z.Score})
	}
	return out, nil
}

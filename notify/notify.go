// Package notify tells the platform when an app's calendar quota crosses
// 80 % and 100 %: a Prometheus series an alert can use, and, when a URL is
// set, a signed webhook delivered at most once per threshold, app and
// period across the fleet. Nothing here runs on the check path but a
// non-blocking hand-off: a webhook that is down never slows or fails a
// check.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/clock"
	"github.com/quota-platform/quota/limiter"
)

// Options configure a Notifier.
type Options struct {
	// URL receives the webhook (QUOTA_WEBHOOK_URL); empty: metrics only.
	URL string
	// Secret signs each body: X-Quota-Signature: sha256=<hex HMAC-SHA256>.
	Secret string
	// Redis and Prefix keep the fleet's record of what was sent, so a
	// threshold crossed again in one period (after a refund or a reset)
	// is not sent twice.
	Redis  redis.UniversalClient
	Prefix string
	// Backoff is the wait before the first retry, doubled each time up to
	// MaxAttempts (defaults: 1s, 8 attempts, about 4 minutes in all).
	Backoff     time.Duration
	MaxAttempts int
	Client      *http.Client // default: a client with a 5 s timeout
	Registerer  prometheus.Registerer
	Clock       clock.Clock
	Log         *slog.Logger
}

// Notifier is a limiter.QuotaWatcher.
type Notifier struct {
	o        Options
	queue    chan limiter.Crossing
	crossed  *prometheus.CounterVec
	above    *prometheus.GaugeVec
	webhooks *prometheus.CounterVec

	mu      sync.Mutex
	periods map[[4]string]time.Time // above's series -> when its period ends
}

// queueSize bounds the crossings waiting for delivery; beyond it they are
// dropped and counted (result "dropped"), never waited for.
const queueSize = 4096

// New returns a Notifier; Run delivers what it is told.
func New(o Options) *Notifier {
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	n := &Notifier{
		o:     o,
		queue: make(chan limiter.Crossing, queueSize),
		crossed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_quota_crossings_total",
			Help: "Apps' calendar quotas crossing a threshold (0.8, 1) by a check of this instance.",
		}, []string{"rule", "window", "threshold"}),
		above: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "quota_app_quota_crossed",
			Help: "1 while an app's calendar quota is past the threshold in the current period (on the instance whose check crossed it: alert on max by app_id).",
		}, []string{"app_id", "rule", "window", "threshold"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_webhook_deliveries_total",
			Help: "Near-quota webhooks by result: sent, failed (after every retry), duplicate (already sent by the fleet), dropped (queue full).",
		}, []string{"result"}),
		periods: map[[4]string]time.Time{},
	}
	for _, r := range []string{"sent", "failed", "duplicate", "dropped"} {
		n.webhooks.WithLabelValues(r)
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(n.crossed, n.above, n.webhooks)
	}
	return n
}

// Crossed records a crossing and hands it to Run without blocking.
func (n *Notifier) Crossed(c limiter.Crossing) {
	th := strconv.FormatFloat(c.Threshold, 'f', -1, 64)
	n.crossed.WithLabelValues(c.Rule, c.Window.String(), th).Inc()
	series := [4]string{c.App, c.Rule, c.Window.String(), th}
	n.above.WithLabelValues(series[:]...).Set(1)
	n.mu.Lock()
	n.periods[series] = c.PeriodEnd
	n.mu.Unlock()
	if n.o.URL == "" {
		return
	}
	select {
	case n.queue <- c:
	default:
		n.webhooks.WithLabelValues("dropped").Inc()
	}
}

// Run delivers webhooks and ends the series of past periods until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	sweep := time.NewTicker(30 * time.Second)
	defer sweep.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, 8) // deliveries retrying at once
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			n.sweep()
		case c := <-n.queue:
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done() }()
				n.webhooks.WithLabelValues(n.deliver(ctx, c)).Inc()
			}()
		}
	}
}

// sweep deletes the series of periods that have ended.
func (n *Notifier) sweep() {
	now := n.o.Clock.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	for s, end := range n.periods {
		if !now.Before(end) {
			n.above.DeleteLabelValues(s[:]...)
			delete(n.periods, s)
		}
	}
}

// Event is the webhook's body.
type Event struct {
	Event     string    `json:"event"` // "quota.threshold"
	ID        string    `json:"id"`    // the same for every retry
	AppID     string    `json:"app_id"`
	Rule      string    `json:"rule"`
	Window    string    `json:"window"`
	Limit     int64     `json:"limit"`
	Used      int64     `json:"used"`
	Threshold float64   `json:"threshold"`
	PeriodEnd time.Time `json:"period_end"`
}

// deliver claims the crossing for the fleet and posts it, retrying with
// backoff; it returns the result label.
func (n *Notifier) deliver(ctx context.Context, c limiter.Crossing) string {
	ev := Event{Event: "quota.threshold", AppID: c.App, Rule: c.Rule, Window: c.Window.String(),
		Limit: c.Limit, Used: c.Used, Threshold: c.Threshold, PeriodEnd: c.PeriodEnd.UTC()}
	ev.ID = eventID(&ev)
	body, err := json.Marshal(ev)
	if err != nil {
		return "failed"
	}
	wait := n.o.Backoff
	claimed := false
	for attempt := 1; ; attempt++ {
		if !claimed {
			first, err := n.claim(ctx, &ev)
			switch {
			case err == nil && !first:
				return "duplicate"
			case err == nil:
				claimed = true
			default:
				n.log().Warn("near-quota webhook: cannot record it as sent", "id", ev.ID, "err", err)
			}
		}
		if claimed {
			if err = n.post(ctx, body, ev.ID); err == nil {
				return "sent"
			}
			n.log().Warn("near-quota webhook not delivered", "id", ev.ID, "attempt", attempt, "err", err)
		}
		if attempt == n.o.MaxAttempts || clock.Sleep(ctx, wait) != nil {
			return "failed"
		}
		wait *= 2
	}
}

// claim records ev as sent by this instance, unless another did: SET NX
// of its id until a day after its period ends.
func (n *Notifier) claim(ctx context.Context, ev *Event) (bool, error) {
	if n.o.Redis == nil {
		return true, nil
	}
	ttl := max(time.Until(ev.PeriodEnd), 0) + 24*time.Hour
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return n.o.Redis.SetNX(ctx, n.o.Prefix+"webhook:"+ev.ID, "1", ttl).Result()
}

func (n *Notifier) post(ctx context.Context, body []byte, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.o.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Quota-Event-Id", id)
	req.Header.Set("X-Quota-Signature", Sign(n.o.Secret, body))
	resp, err := n.o.Client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// Sign is the X-Quota-Signature of body under secret; a receiver compares
// it with hmac.Equal.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// eventID names a threshold of an app's quota in one period.
func eventID(ev *Event) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%q %q %s %d %g", ev.AppID, ev.Rule, ev.Window, ev.PeriodEnd.Unix(), ev.Threshold)))
	return hex.EncodeToString(h[:12])
}

func (n *Notifier) log() *slog.Logger {
	if n.o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return n.o.Log
}

var _ limiter.QuotaWatcher = (*Notifier)(nil)

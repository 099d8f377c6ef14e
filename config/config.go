// Package config reads quotad's settings from the environment into one
// struct, with a working local default for each, and rejects invalid ones
// with a single clear error.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// FailMode says what a check answers when its store cannot be reached.
type FailMode string

// The fail modes.
const (
	FailOpen   FailMode = "open"   // allow, with Quota-Enforced: false
	FailClosed FailMode = "closed" // 503
)

// SchemaOnStart says what quotad serve does, at start-up, about the MySQL
// schema of each shard it reaches (with analytics or tiering on: without
// either it writes nothing to MySQL).
type SchemaOnStart string

// The schema start-up modes.
const (
	SchemaCheck SchemaOnStart = "check" // stop start-up when a shard lacks one of the binary's schema files
	SchemaApply SchemaOnStart = "apply" // apply the missing files, as quotad migrate-schema does
	SchemaOff   SchemaOnStart = "off"   // neither: a missing table shows as failed writes
)

// Settings is everything quotad is configured with. Each field's tags are its
// whole declaration: env (the variable), envDefault (the working local
// default), validate (bounds, applied by Validate: bounds.go) and help (a
// line for the docs). Rules between fields are written out in Validate.
// Values are trimmed; an empty one means unset.
type Settings struct {
	Listen         string        `env:"QUOTA_LISTEN" envDefault:"127.0.0.1:8080" help:"HTTP address; a non-loopback one needs QUOTA_ADMIN_TOKEN"`
	RedisAddrs     []string      `env:"QUOTA_REDIS_ADDRS" envDefault:"127.0.0.1:6379" help:"Redis host:port list; several mean Redis Cluster"`
	RedisPassword  string        `env:"QUOTA_REDIS_PASSWORD" help:"Redis AUTH password"`
	RedisDB        int           `env:"QUOTA_REDIS_DB" validate:"min=0,max=15" help:"logical database of a single Redis; 0 on a cluster"`
	RedisKeyPrefix string        `env:"QUOTA_REDIS_KEY_PREFIX" envDefault:"q:" help:"prefix of every key; keeps deployments (and tests) apart on one Redis"`
	RedisTimeout   time.Duration `env:"QUOTA_REDIS_TIMEOUT" envDefault:"250ms" validate:"gt=0s,max=1m" help:"dial, read and write timeout of one Redis call"`
	RedisPoolSize  int           `env:"QUOTA_REDIS_POOL_SIZE" envDefault:"128" validate:"min=1" help:"Redis connections"`
	MySQLShards    []string      `env:"QUOTA_MYSQL_SHARDS" envDefault:"quota:quota@tcp(127.0.0.1:3306)/quota_0,quota:quota@tcp(127.0.0.1:3306)/quota_1" help:"comma-separated DSNs"`
	RulesPath      string        `env:"QUOTA_RULES" envDefault:"deploy/rules.yaml" help:"rules file"`
	AdminToken     string        `env:"QUOTA_ADMIN_TOKEN" help:"bearer token of the admin endpoints"`
	CheckToken     string        `env:"QUOTA_CHECK_TOKEN" help:"when set, checks must carry it"`
	FailMode       FailMode      `env:"QUOTA_FAIL_MODE" envDefault:"open" validate:"oneof=open closed" help:"what a check answers when its store is down"`
	MaxInFlight    int           `env:"QUOTA_MAX_IN_FLIGHT" envDefault:"4096" validate:"min=1" help:"concurrent requests before a fast 503"`
	TTLJitter      time.Duration `env:"QUOTA_TTL_JITTER" envDefault:"60s" validate:"min=0s,max=1h" help:"random extra TTL so keys of a window do not expire together"`
	Coalesce       int           `env:"QUOTA_COALESCE" envDefault:"4" validate:"min=0,max=256" help:"senders batching checks into one Redis pipeline; 0 = off"`
	DenyCacheSize  int           `env:"QUOTA_DENY_CACHE_SIZE" envDefault:"65536" validate:"min=0,max=16777216" help:"denials answered without Redis (limiter.Denials), entries; 0 = off"`
	PprofListen    string        `env:"QUOTA_PPROF_LISTEN" help:"loopback host:port of net/http/pprof; empty = off"`
	AdvertiseURL   string        `env:"QUOTA_ADVERTISE_URL" help:"where the fleet and quotactl status reach this instance; empty = http://QUOTA_LISTEN (an unspecified host: the hostname)"`
	GCHeapFloorMB  int           `env:"QUOTA_GC_HEAP_FLOOR_MB" envDefault:"256" validate:"min=0,max=1048576" help:"MiB the Go heap may grow to before a collection (internal/gcfloor); 0 = GOGC alone"`
	SchemaOnStart  SchemaOnStart `env:"QUOTA_SCHEMA_ON_START" envDefault:"check" validate:"oneof=check apply off" help:"what serve does about a shard's schema before answering checks"`

	// A check's count is final only once this many replicas hold it (WAIT
	// after each pipeline); a write no replica acknowledges within the
	// timeout (below QUOTA_REDIS_TIMEOUT) is answered by the fail mode.
	RedisWaitReplicas int           `env:"QUOTA_REDIS_WAIT_REPLICAS" validate:"min=0,max=16" help:"replicas that must hold a check's count; 0 = off"`
	RedisWaitTimeout  time.Duration `env:"QUOTA_REDIS_WAIT_TIMEOUT" envDefault:"100ms" help:"how long a check waits for them"`

	// Envoy's rate limit service (api/ratelimit.go).
	GRPCListen  string `env:"QUOTA_GRPC_LISTEN" envDefault:"127.0.0.1:8081" help:"host:port of the gRPC server; off = none"`
	EnvoyConfig string `env:"QUOTA_ENVOY_CONFIG" help:"envoy ratelimit YAML, a file or a directory; empty = no domains"`
	EnvoyAppKey string `env:"QUOTA_ENVOY_APP_KEY" envDefault:"app_id" help:"descriptor key whose value is the app for analytics"`

	// Analytics (package analytics); the defaults of the flush duty and the
	// HLL threshold are analytics.DefaultFlushDuty and DefaultHLLDenseAt.
	Analytics                 bool          `env:"QUOTA_ANALYTICS" envDefault:"on" help:"analytics on or off"`
	AnalyticsFlush            time.Duration `env:"QUOTA_ANALYTICS_FLUSH" envDefault:"15s" validate:"min=100ms,max=10m" help:"period of the MySQL flush"`
	AnalyticsBufferMax        int           `env:"QUOTA_ANALYTICS_BUFFER_MAX" envDefault:"2000000" validate:"min=1000,max=1000000000" help:"rows held while MySQL is unreachable"`
	AnalyticsRowsPerStatement int           `env:"QUOTA_ANALYTICS_ROWS_PER_STATEMENT" envDefault:"500" validate:"min=1,max=5000" help:"rows of one multi-row upsert"`
	AnalyticsFlushDuty        float64       `env:"QUOTA_ANALYTICS_FLUSH_DUTY" envDefault:"0.25" validate:"min=0.01,max=1" help:"share of wall time a flush works, resting in between; 1 = flat out"`
	AnalyticsHoldMinute       bool          `env:"QUOTA_ANALYTICS_HOLD_MINUTE" envDefault:"on" help:"day and curve rows of the minute in progress wait until it is over"`
	AnalyticsIfaceUsersEvery  time.Duration `env:"QUOTA_ANALYTICS_IFACE_USERS_EVERY" envDefault:"1m" validate:"min=1s,max=10m" help:"how often the (app, interface) distinct users go to Redis"`
	AnalyticsHLLDenseAt       int           `env:"QUOTA_ANALYTICS_HLL_DENSE_AT" envDefault:"1000" validate:"orzero,min=256,max=16384" help:"Redis' hll-sparse-max-bytes, set by the first flush; 0 = left as Redis has it"`
	RollupSchedule            string        `env:"QUOTA_ROLLUP_SCHEDULE" envDefault:"*/10 * * * *" help:"cron spec of the curve rollup job"`

	// Storage tiers and migration (package migrate). On (the default), a
	// new cell costs what a hot check costs (the cold filter tells it from
	// a cold one inside the hot script).
	Tiering         bool          `env:"QUOTA_TIERING" envDefault:"on" help:"route fixed-window cells over hot/warm/cold; off: hot only"`
	MigrateSchedule string        `env:"QUOTA_MIGRATE_SCHEDULE" envDefault:"@daily" help:"cron spec of the scheduled migration cycle"`
	HotThreshold    float64       `env:"QUOTA_HOT_THRESHOLD" envDefault:"60" validate:"gt=0,max=1e9" help:"mean calls per hour at or above which a cell is hot"`
	ColdThreshold   float64       `env:"QUOTA_COLD_THRESHOLD" envDefault:"1" validate:"min=0" help:"mean calls per hour below which a cell is cold"`
	PromoteInterval time.Duration `env:"QUOTA_PROMOTE_INTERVAL" envDefault:"1m" help:"on call, a mean interval at most this promotes; 0 = off"`
	DemoteInterval  time.Duration `env:"QUOTA_DEMOTE_INTERVAL" envDefault:"1h" help:"on call, a mean interval at least this demotes warm to cold; 0 = off"`
	// The scheduled cycle keeps the history of cells whose window is at
	// least this long, and only those. A hot cell of a shorter window costs
	// Redis only until its key expires, at most one window after its last
	// call, so a daily cycle has little to save by moving it, and recording
	// the history of every such cell would cost MySQL a row write per new cell.
	MigrateMinWindow time.Duration `env:"QUOTA_MIGRATE_MIN_WINDOW" envDefault:"2h" validate:"min=0s" help:"shortest window whose cells' history the cycle keeps; 0 = all"`
	// Between cycles, a part of the activity log (cell_activity_log, up to
	// 2,000 cells a row) holding more rows is folded into cell_activity at
	// once, so that a long schedule does not let the log grow with every flush.
	MigrateLogMaxRows int `env:"QUOTA_MIGRATE_LOG_MAX_ROWS" envDefault:"1000" validate:"min=0" help:"activity-log rows of a part before it is folded; 0 = by the cycles only"`
	// More part workers finish a cycle sooner (the steps of one part wait on
	// Redis and MySQL in turn) and take more of their CPU from the checks.
	MigratePartWorkers int `env:"QUOTA_MIGRATE_PART_WORKERS" envDefault:"4" validate:"min=1,max=64" help:"parts of a cycle an instance moves at once"`
	// A fleet scans up to this times its instances. A bound keeps the
	// cycle's share of the CPU and of Redis, and the checks' latency
	// meanwhile, in hand, at the cost of a longer cycle.
	MigrateCellsPerSec float64 `env:"QUOTA_MIGRATE_CELLS_PER_SEC" validate:"orzero,min=1" help:"cells a second an instance's part workers scan at most; 0 = no bound"`
	NewTier            string  `env:"QUOTA_NEW_TIER" envDefault:"hot" validate:"oneof=hot" help:"where a new cell starts; only hot (warm and cold are no longer offered)"`
	ColdHints          int     `env:"QUOTA_COLD_HINTS" envDefault:"1048576" validate:"min=0,max=1073741824" help:"slots (8 B each) remembering cells found cold; 0 = off"`

	// Redis connection options (docs/operations.md). Every Redis client quotad
	// makes uses all of them (package redisconn).
	RedisUsername         string      `env:"QUOTA_REDIS_USERNAME" help:"ACL user; empty = the default user"`
	RedisPasswordFile     string      `env:"QUOTA_REDIS_PASSWORD_FILE" help:"file read at start into RedisPassword"`
	RedisTLS              bool        `env:"QUOTA_REDIS_TLS" envDefault:"off" help:"TLS to Redis on or off"`
	RedisTLSCA            string      `env:"QUOTA_REDIS_TLS_CA" help:"PEM file of the CA(s) to trust; empty = the system's"`
	RedisTLSCert          string      `env:"QUOTA_REDIS_TLS_CERT" help:"PEM client certificate (with QUOTA_REDIS_TLS_KEY)"`
	RedisTLSKey           string      `env:"QUOTA_REDIS_TLS_KEY" help:"PEM key of the client certificate"`
	RedisTLSServerName    string      `env:"QUOTA_REDIS_TLS_SERVER_NAME" help:"name the server certificate must carry; empty = the address' host"`
	RedisTLSConfig        *tls.Config `env:"-"` // built by Load from the QUOTA_REDIS_TLS_* files; nil when TLS is off
	RedisSentinelMaster   string      `env:"QUOTA_REDIS_SENTINEL_MASTER" help:"master name; with it QUOTA_REDIS_ADDRS are sentinels"`
	RedisSentinelPassword string      `env:"QUOTA_REDIS_SENTINEL_PASSWORD" help:"the sentinels' own password, if any"`
	RedisCluster          bool        `env:"QUOTA_REDIS_CLUSTER" help:"on = Redis Cluster even with one (configuration endpoint) address; several addresses imply it"`

	RulesStore string        `env:"QUOTA_RULES_STORE" envDefault:"redis" validate:"oneof=redis file" help:"redis: the rules in force are shared through Redis; file: each instance its own"`
	RulesPoll  time.Duration `env:"QUOTA_RULES_POLL" envDefault:"1s" validate:"min=100ms,max=1m" help:"how often an instance looks for a new version in the shared store"`
	RulesState string        `env:"QUOTA_RULES_STATE" help:"absolute path of the file keeping the rules last in force here (outside the project's tree)"`
	// TimeZone is where calendar windows (day, week, month), the analytics
	// day and the cron schedules start at midnight. Location is it, loaded.
	TimeZone string         `env:"QUOTA_TIMEZONE" envDefault:"UTC" help:"IANA time zone name"`
	Location *time.Location `env:"-"`
	// The webhook is posted a signed event when an app's calendar quota
	// crosses 80 % and 100 %; the secret (required with it) signs each body.
	WebhookURL    string        `env:"QUOTA_WEBHOOK_URL" help:"near-quota webhook"`
	WebhookSecret string        `env:"QUOTA_WEBHOOK_SECRET" help:"signs the webhook's bodies; at least 16 characters"`
	Drain         time.Duration `env:"QUOTA_DRAIN" envDefault:"5s" validate:"min=0s,max=5m" help:"on SIGTERM, /readyz answers 503 this long before the servers drain"`

	Gateway // forward auth and rate-limit headers (gateway.go)
	// Operations.
	LogLevel slog.Level `env:"QUOTA_LOG_LEVEL" envDefault:"info" validate:"oneof=debug info warn error" help:"level of the JSON log"`
	// Where check traces go (OTLP over HTTP): QUOTA_OTEL_ENDPOINT, else
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
	// (Load); empty = tracing off.
	OTelEndpoint string `env:"QUOTA_OTEL_ENDPOINT" help:"OTLP/HTTP collector of a span per check; empty = tracing off"`
}

// Defaults are the settings of a local development machine: every
// envDefault tag.
func Defaults() Settings {
	var s Settings
	if err := parse(&s, nil); err != nil {
		panic("config: a default does not parse: " + err.Error()) // constant tags: TestDefaults catches it
	}
	s.Location = time.UTC
	return s
}

// Load reads the settings from getenv (os.Getenv in production), starting
// from Defaults.
func Load(getenv func(string) string) (Settings, error) {
	raw := readEnv(getenv)
	// The standard OTLP variables are read, in order, when
	// QUOTA_OTEL_ENDPOINT is unset.
	otelName := "QUOTA_OTEL_ENDPOINT"
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := strings.TrimSpace(getenv(name)); raw["QUOTA_OTEL_ENDPOINT"] == "" && v != "" {
			raw["QUOTA_OTEL_ENDPOINT"], otelName = v, name
		}
	}
	var s Settings
	if err := parse(&s, raw); err != nil {
		return Settings{}, err
	}
	if u, err := url.Parse(s.OTelEndpoint); s.OTelEndpoint != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return Settings{}, fmt.Errorf("%s %q: want an http:// or https:// URL of an OTLP collector, e.g. http://otel-collector:4318", otelName, s.OTelEndpoint)
	}
	// Warm buckets now follow each app's population (tiers/directory.go).
	if v := strings.TrimSpace(getenv("QUOTA_WARM_BUCKETS_PER_TAG")); v != "" {
		return Settings{}, fmt.Errorf("QUOTA_WARM_BUCKETS_PER_TAG %q: no longer a setting (each app's warm buckets grow with its cells); unset it", v)
	}
	_, clusterSet := raw["QUOTA_REDIS_CLUSTER"]
	if !clusterSet && len(s.RedisAddrs) > 1 && s.RedisSentinelMaster == "" {
		s.RedisCluster = true // several addresses have always meant a cluster
	}
	if clusterSet && !s.RedisCluster && len(s.RedisAddrs) > 1 && s.RedisSentinelMaster == "" {
		return Settings{}, fmt.Errorf("QUOTA_REDIS_CLUSTER=off with %d QUOTA_REDIS_ADDRS: give one address, or several sentinels with QUOTA_REDIS_SENTINEL_MASTER", len(s.RedisAddrs))
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil || s.TimeZone == "" || s.TimeZone == "Local" {
		return Settings{}, fmt.Errorf("QUOTA_TIMEZONE %q: want an IANA time zone name such as UTC, Asia/Shanghai or America/New_York", s.TimeZone)
	}
	s.Location = loc
	if err := s.validateWebhook(); err != nil {
		return Settings{}, err
	}
	if err := s.validate(raw); err != nil {
		return Settings{}, err
	}
	if err := s.loadRedisSecrets(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// loadRedisSecrets reads the password file and builds the TLS
// configuration, so that a missing or unreadable file stops start-up.
func (s *Settings) loadRedisSecrets() error {
	if s.RedisPasswordFile != "" {
		b, err := os.ReadFile(s.RedisPasswordFile)
		if err != nil {
			return fmt.Errorf("QUOTA_REDIS_PASSWORD_FILE: %v", err)
		}
		s.RedisPassword = strings.TrimRight(string(b), "\r\n")
		if s.RedisPassword == "" {
			return fmt.Errorf("QUOTA_REDIS_PASSWORD_FILE %s is empty", s.RedisPasswordFile)
		}
	}
	if !s.RedisTLS {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.RedisTLSServerName}
	if s.RedisTLSCA != "" {
		pem, err := os.ReadFile(s.RedisTLSCA)
		if err != nil {
			return fmt.Errorf("QUOTA_REDIS_TLS_CA: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("QUOTA_REDIS_TLS_CA %s: no PEM certificate in it", s.RedisTLSCA)
		}
		cfg.RootCAs = pool
	}
	if s.RedisTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(s.RedisTLSCert, s.RedisTLSKey)
		if err != nil {
			return fmt.Errorf("QUOTA_REDIS_TLS_CERT/QUOTA_REDIS_TLS_KEY: %s", strings.ReplaceAll(err.Error(), "\n", " "))
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	s.RedisTLSConfig = cfg
	return nil
}

// Validate checks the settings: each field's bounds (its validate tag), then
// the rules between fields and the formats the tags do not express.
func (s Settings) Validate() error { return s.validate(nil) }

// validate is Validate, with the variables as given (raw) when Load calls it.
func (s Settings) validate(raw map[string]string) error {
	if err := checkBounds(reflect.ValueOf(s), raw); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(s.Listen)
	if err != nil {
		return fmt.Errorf("QUOTA_LISTEN %q: want host:port", s.Listen)
	}
	if len(s.RedisAddrs) == 0 {
		return errors.New("QUOTA_REDIS_ADDRS is empty: give at least one host:port")
	}
	for _, a := range s.RedisAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("QUOTA_REDIS_ADDRS: %q is not host:port", a)
		}
	}
	if s.RedisDB != 0 && (s.RedisCluster || len(s.RedisAddrs) > 1 && s.RedisSentinelMaster == "") {
		return fmt.Errorf("QUOTA_REDIS_DB %d: want 0 on a Redis Cluster (several QUOTA_REDIS_ADDRS or QUOTA_REDIS_CLUSTER=on)", s.RedisDB)
	}
	if err := s.validateRedisOptions(); err != nil {
		return err
	}
	if s.RulesState != "" && !filepath.IsAbs(s.RulesState) {
		return fmt.Errorf("QUOTA_RULES_STATE %q: want an absolute path outside the project's tree (e.g. /var/lib/quotad/rules-state.yaml), or unset", s.RulesState)
	}
	if len(s.MySQLShards) == 0 {
		return errors.New("QUOTA_MYSQL_SHARDS is empty: give at least one DSN")
	}
	if strings.ContainsAny(s.RedisKeyPrefix, "{}") {
		return errors.New("QUOTA_REDIS_KEY_PREFIX must not contain { or }: they would break the cluster hash tag")
	}
	if s.RedisWaitReplicas > 0 && (s.RedisWaitTimeout < time.Millisecond || s.RedisWaitTimeout >= s.RedisTimeout) {
		return fmt.Errorf("QUOTA_REDIS_WAIT_TIMEOUT %s: want at least 1ms and below QUOTA_REDIS_TIMEOUT (%s)", s.RedisWaitTimeout, s.RedisTimeout)
	}
	for _, c := range []struct{ name, spec, example string }{
		{"QUOTA_ROLLUP_SCHEDULE", s.RollupSchedule, `"*/10 * * * *" or "@every 10m"`},
		{"QUOTA_MIGRATE_SCHEDULE", s.MigrateSchedule, `"@daily" or "0 3 * * *"`},
	} {
		if _, err := cron.ParseStandard(c.spec); err != nil {
			return fmt.Errorf("%s %q: not a cron spec (e.g. %s): %v", c.name, c.spec, c.example, err)
		}
	}
	if s.ColdThreshold > s.HotThreshold {
		return fmt.Errorf("QUOTA_COLD_THRESHOLD %g: want calls per hour between 0 and QUOTA_HOT_THRESHOLD (%g)", s.ColdThreshold, s.HotThreshold)
	}
	if s.PromoteInterval < 0 || s.DemoteInterval < 0 || (s.PromoteInterval > 0 && s.DemoteInterval > 0 && s.PromoteInterval >= s.DemoteInterval) {
		return fmt.Errorf("QUOTA_PROMOTE_INTERVAL %s and QUOTA_DEMOTE_INTERVAL %s: want 0 (off) or promote < demote", s.PromoteInterval, s.DemoteInterval)
	}
	if s.AdvertiseURL != "" {
		if u, err := url.Parse(s.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("QUOTA_ADVERTISE_URL %q: want an http(s) URL with a host, e.g. http://10.0.0.5:8080", s.AdvertiseURL)
		}
	}
	if s.PprofListen != "" {
		// Profiles expose internals and cost CPU, and the endpoint has no
		// authentication: loopback only (reach it over SSH).
		h, _, err := net.SplitHostPort(s.PprofListen)
		if err != nil || !isLoopback(h) {
			return fmt.Errorf("QUOTA_PPROF_LISTEN %q: want a loopback host:port, e.g. 127.0.0.1:6060", s.PprofListen)
		}
	}
	if s.GRPCListen != "off" {
		if _, _, err := net.SplitHostPort(s.GRPCListen); err != nil {
			return fmt.Errorf("QUOTA_GRPC_LISTEN %q: want host:port, or off", s.GRPCListen)
		}
	}
	if s.AdminToken == "" && !isLoopback(host) {
		return fmt.Errorf("QUOTA_LISTEN %s is not a loopback address: set QUOTA_ADMIN_TOKEN before exposing quotad", s.Listen)
	}
	if s.AdminToken != "" && len(s.AdminToken) < 16 {
		return errors.New("QUOTA_ADMIN_TOKEN is shorter than 16 characters")
	}
	return nil
}

// validateRedisOptions rejects combinations of Redis options that cannot
// work together.
func (s Settings) validateRedisOptions() error {
	if s.RedisSentinelMaster != "" && s.RedisCluster {
		return errors.New("QUOTA_REDIS_SENTINEL_MASTER and QUOTA_REDIS_CLUSTER=on: a Redis Cluster has no sentinels; choose one")
	}
	if s.RedisSentinelMaster == "" && s.RedisSentinelPassword != "" {
		return errors.New("QUOTA_REDIS_SENTINEL_PASSWORD without QUOTA_REDIS_SENTINEL_MASTER")
	}
	if s.RedisPassword != "" && s.RedisPasswordFile != "" {
		return errors.New("QUOTA_REDIS_PASSWORD and QUOTA_REDIS_PASSWORD_FILE are both set: give one")
	}
	if s.RedisUsername != "" && s.RedisPassword == "" && s.RedisPasswordFile == "" {
		return fmt.Errorf("QUOTA_REDIS_USERNAME %q without QUOTA_REDIS_PASSWORD or QUOTA_REDIS_PASSWORD_FILE", s.RedisUsername)
	}
	if !s.RedisTLS && (s.RedisTLSCA != "" || s.RedisTLSCert != "" || s.RedisTLSKey != "" || s.RedisTLSServerName != "") {
		return errors.New("QUOTA_REDIS_TLS_* given but QUOTA_REDIS_TLS is not on")
	}
	if (s.RedisTLSCert == "") != (s.RedisTLSKey == "") {
		return errors.New("QUOTA_REDIS_TLS_CERT and QUOTA_REDIS_TLS_KEY go together: give both or neither")
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateWebhook checks the near-quota webhook's URL and secret.
func (s *Settings) validateWebhook() error {
	if s.WebhookURL == "" {
		if s.WebhookSecret != "" {
			return errors.New("QUOTA_WEBHOOK_SECRET is set without QUOTA_WEBHOOK_URL")
		}
		return nil
	}
	u, err := url.Parse(s.WebhookURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("QUOTA_WEBHOOK_URL %q: want an http:// or https:// URL", s.WebhookURL)
	}
	if len(s.WebhookSecret) < 16 {
		return errors.New("QUOTA_WEBHOOK_SECRET: at least 16 characters are needed to sign the webhook QUOTA_WEBHOOK_URL receives")
	}
	return nil
}

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
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
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

// Settings is everything quotad is configured with.
type Settings struct {
	Listen         string        // QUOTA_LISTEN
	RedisAddrs     []string      // QUOTA_REDIS_ADDRS; several mean Redis Cluster
	RedisPassword  string        // QUOTA_REDIS_PASSWORD
	RedisDB        int           // QUOTA_REDIS_DB: logical database of a single Redis (0..15); must be 0 on a cluster
	RedisKeyPrefix string        // QUOTA_REDIS_KEY_PREFIX; keeps deployments (and tests) apart on one Redis
	RedisTimeout   time.Duration // QUOTA_REDIS_TIMEOUT: dial, read and write timeout of one Redis call
	RedisPoolSize  int           // QUOTA_REDIS_POOL_SIZE
	MySQLShards    []string      // QUOTA_MYSQL_SHARDS: comma-separated DSNs
	RulesPath      string        // QUOTA_RULES
	AdminToken     string        // QUOTA_ADMIN_TOKEN
	CheckToken     string        // QUOTA_CHECK_TOKEN: when set, checks must carry it
	FailMode       FailMode      // QUOTA_FAIL_MODE
	MaxInFlight    int           // QUOTA_MAX_IN_FLIGHT: concurrent requests before a fast 503
	TTLJitter      time.Duration // QUOTA_TTL_JITTER: random extra TTL so keys of a window do not expire together
	Coalesce       int           // QUOTA_COALESCE: checks batched into one Redis pipeline by this many senders; 0 = off
	DenyCacheSize  int           // QUOTA_DENY_CACHE_SIZE: denials answered without Redis (limiter.Denials), at most this many entries; 0 = off
	PprofListen    string        // QUOTA_PPROF_LISTEN: loopback host:port of net/http/pprof; "" (default) = off
	AdvertiseURL   string        // QUOTA_ADVERTISE_URL: where the fleet and quotactl status reach this instance; "" (default) = http://QUOTA_LISTEN (an unspecified host: the hostname)
	GCHeapFloorMB  int           // QUOTA_GC_HEAP_FLOOR_MB: the Go heap may grow to this many MiB before a collection (internal/gcfloor); 0 = GOGC alone
	SchemaOnStart  SchemaOnStart // QUOTA_SCHEMA_ON_START: what serve does about a shard's schema before answering checks

	// QUOTA_REDIS_WAIT_REPLICAS: when > 0, a check's count is final only
	// once that many replicas hold it (WAIT after each pipeline); a write
	// no replica acknowledges within QUOTA_REDIS_WAIT_TIMEOUT (default
	// 100ms, below QUOTA_REDIS_TIMEOUT) is answered by the fail mode.
	// 0 (default): off.
	RedisWaitReplicas int
	RedisWaitTimeout  time.Duration

	// Envoy's rate limit service (api/ratelimit.go).
	GRPCListen  string // QUOTA_GRPC_LISTEN: host:port of the gRPC server; "off" = none
	EnvoyConfig string // QUOTA_ENVOY_CONFIG: envoy ratelimit YAML, a file or a directory; "" = no domains
	EnvoyAppKey string // QUOTA_ENVOY_APP_KEY: descriptor key whose value is the app for analytics

	// Analytics (package analytics).
	Analytics                 bool          // QUOTA_ANALYTICS: on (default) or off
	AnalyticsFlush            time.Duration // QUOTA_ANALYTICS_FLUSH: period of the MySQL flush (15s)
	AnalyticsBufferMax        int           // QUOTA_ANALYTICS_BUFFER_MAX: rows held while MySQL is unreachable
	AnalyticsRowsPerStatement int           // QUOTA_ANALYTICS_ROWS_PER_STATEMENT: rows of one multi-row upsert
	AnalyticsFlushDuty        float64       // QUOTA_ANALYTICS_FLUSH_DUTY: share of wall time a flush works, resting in between (0.25; 1 = flat out)
	AnalyticsHoldMinute       bool          // QUOTA_ANALYTICS_HOLD_MINUTE: on (default): day and curve rows of the minute in progress wait until it is over
	AnalyticsIfaceUsersEvery  time.Duration // QUOTA_ANALYTICS_IFACE_USERS_EVERY: how often the (app, interface) distinct users go to Redis (1m; app-level ones go with every flush)
	AnalyticsHLLDenseAt       int           // QUOTA_ANALYTICS_HLL_DENSE_AT: Redis' hll-sparse-max-bytes, set by the first flush (1000); 0 = left as Redis has it
	RollupSchedule            string        // QUOTA_ROLLUP_SCHEDULE: cron spec of the curve rollup job (UTC)

	// Storage tiers and migration (package migrate).
	Tiering         bool          // QUOTA_TIERING: on (default) routes fixed-window cells over hot/warm/cold; off: hot only
	MigrateSchedule string        // QUOTA_MIGRATE_SCHEDULE: cron spec of the scheduled migration cycle (UTC), default @daily
	HotThreshold    float64       // QUOTA_HOT_THRESHOLD: mean calls per hour at or above which a cell is hot
	ColdThreshold   float64       // QUOTA_COLD_THRESHOLD: mean calls per hour below which a cell is cold
	PromoteInterval time.Duration // QUOTA_PROMOTE_INTERVAL: on call, a mean interval at most this promotes (0: off)
	DemoteInterval  time.Duration // QUOTA_DEMOTE_INTERVAL: on call, a mean interval at least this demotes warm to cold (0: off)
	// QUOTA_MIGRATE_MIN_WINDOW (2h): the scheduled cycle keeps the
	// history of cells whose window is at least this long, and only those
	// (0: all). A hot cell of a shorter window costs Redis only until its
	// key expires, at most one window after its last call, so a daily
	// cycle has little to save by moving it, and recording the history of
	// every such cell would cost MySQL a row write per new cell.
	MigrateMinWindow time.Duration
	// QUOTA_MIGRATE_LOG_MAX_ROWS (1000): between cycles, a part of the
	// activity log (cell_activity_log, up to 2,000 cells a row) holding
	// more rows is folded into cell_activity at once, so that a long
	// schedule does not let the log grow with every flush; 0: folded by
	// the cycles only.
	MigrateLogMaxRows int
	// QUOTA_MIGRATE_PART_WORKERS (4): how many parts of a cycle an
	// instance moves at once. More finish a cycle sooner (the steps of one
	// part wait on Redis and MySQL in turn) and take more of their CPU
	// from the checks meanwhile.
	MigratePartWorkers int
	// QUOTA_MIGRATE_CELLS_PER_SEC (0: no bound): how many cells a second
	// an instance's part workers scan at most, together; a fleet scans up
	// to this times its instances. A bound keeps the cycle's share of the
	// CPU and of Redis, and the checks' latency meanwhile, in hand, at the
	// cost of a longer cycle.
	MigrateCellsPerSec float64
	NewTier            string // QUOTA_NEW_TIER: where a cell never seen before starts; only hot (the hot script counts it with no lookup)
	ColdHints          int    // QUOTA_COLD_HINTS: slots (8 B each) remembering cells found cold, so their checks skip the row lookup; 0 = off

	// Redis connection options (docs/operations.md). Every Redis client quotad
	// makes uses all of them.
	RedisUsername         string      // QUOTA_REDIS_USERNAME: ACL user ("" = default user)
	RedisPasswordFile     string      // QUOTA_REDIS_PASSWORD_FILE: read at start into RedisPassword
	RedisTLS              bool        // QUOTA_REDIS_TLS: on/off (off)
	RedisTLSCA            string      // QUOTA_REDIS_TLS_CA: PEM file of the CA(s) to trust ("" = the system's)
	RedisTLSCert          string      // QUOTA_REDIS_TLS_CERT: PEM client certificate (with QUOTA_REDIS_TLS_KEY)
	RedisTLSKey           string      // QUOTA_REDIS_TLS_KEY
	RedisTLSServerName    string      // QUOTA_REDIS_TLS_SERVER_NAME: name the server certificate must carry ("" = the address' host)
	RedisTLSConfig        *tls.Config // built by Load from the QUOTA_REDIS_TLS_* files; nil when TLS is off
	RedisSentinelMaster   string      // QUOTA_REDIS_SENTINEL_MASTER: with it, QUOTA_REDIS_ADDRS are sentinels
	RedisSentinelPassword string      // QUOTA_REDIS_SENTINEL_PASSWORD: the sentinels' own password, if any
	RedisCluster          bool        // QUOTA_REDIS_CLUSTER: on = Redis Cluster even with one (configuration endpoint) address; several addresses imply it

	RulesStore string        // QUOTA_RULES_STORE: redis (default: the rules in force are shared through Redis) or file (each instance its own)
	RulesPoll  time.Duration // QUOTA_RULES_POLL: how often an instance looks for a new version in the shared store (1s)
	RulesState string        // QUOTA_RULES_STATE: absolute path of the file keeping the rules last in force here (outside the project's tree); empty: none
	// TimeZone (QUOTA_TIMEZONE, an IANA name, default UTC) is where
	// calendar windows (day, week, month), the analytics day and the cron
	// schedules start at midnight. Location is it, loaded.
	TimeZone string
	Location *time.Location
	// WebhookURL (QUOTA_WEBHOOK_URL) is posted a signed event when an
	// app's calendar quota crosses 80 % and 100 %; WebhookSecret
	// (QUOTA_WEBHOOK_SECRET, required with it) signs each body.
	WebhookURL    string
	WebhookSecret string
	Drain         time.Duration // QUOTA_DRAIN: on SIGTERM, /readyz answers 503 this long before the servers drain (5s)

	Gateway // forward auth and rate-limit headers (gateway.go)
	// Operations.
	LogLevel slog.Level // QUOTA_LOG_LEVEL: debug, info (default), warn or error
	// OTelEndpoint is where check traces go (OTLP over HTTP): QUOTA_OTEL_ENDPOINT,
	// else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT;
	// "" (default) = tracing off.
	OTelEndpoint string
}

// Defaults are the settings of a local development machine.
func Defaults() Settings {
	return Settings{
		Listen:         "127.0.0.1:8080",
		RedisAddrs:     []string{"127.0.0.1:6379"},
		RedisKeyPrefix: "q:",
		RedisTimeout:   250 * time.Millisecond,
		RedisPoolSize:  128,
		MySQLShards: []string{
			"quota:quota@tcp(127.0.0.1:3306)/quota_0",
			"quota:quota@tcp(127.0.0.1:3306)/quota_1",
		},
		RulesPath:     "deploy/rules.yaml",
		RulesStore:    "redis",
		RulesPoll:     time.Second,
		TimeZone:      "UTC",
		Location:      time.UTC,
		Drain:         5 * time.Second,
		FailMode:      FailOpen,
		MaxInFlight:   4096,
		TTLJitter:     60 * time.Second,
		Coalesce:      4,
		DenyCacheSize: 65536,
		GCHeapFloorMB: 256,
		SchemaOnStart: SchemaCheck,
		GRPCListen:    "127.0.0.1:8081",
		EnvoyAppKey:   "app_id",

		Analytics:                 true,
		AnalyticsFlush:            15 * time.Second,
		AnalyticsBufferMax:        2_000_000,
		AnalyticsFlushDuty:        0.25, // analytics.DefaultFlushDuty
		AnalyticsHoldMinute:       true,
		AnalyticsHLLDenseAt:       1000, // analytics.DefaultHLLDenseAt
		AnalyticsIfaceUsersEvery:  time.Minute,
		AnalyticsRowsPerStatement: 500,
		RollupSchedule:            "*/10 * * * *",

		// On: a new cell costs what a hot check costs (the cold filter tells
		// it from a cold one inside the hot script).
		Tiering:            true,
		MigrateSchedule:    "@daily",
		HotThreshold:       60,
		ColdThreshold:      1,
		PromoteInterval:    time.Minute,
		DemoteInterval:     time.Hour,
		MigrateMinWindow:   2 * time.Hour,
		MigrateLogMaxRows:  1000,
		MigratePartWorkers: 4,
		NewTier:            "hot",
		ColdHints:          1 << 20, // 8 MiB

		Gateway: defaultGateway(),

		RedisWaitTimeout: 100 * time.Millisecond,
	}
}

// Load reads the settings from getenv (os.Getenv in production), starting
// from Defaults.
func Load(getenv func(string) string) (Settings, error) {
	s := Defaults()
	r := reader{getenv: getenv}
	r.str("QUOTA_LISTEN", &s.Listen)
	r.list("QUOTA_REDIS_ADDRS", &s.RedisAddrs)
	r.str("QUOTA_REDIS_PASSWORD", &s.RedisPassword)
	r.integer("QUOTA_REDIS_DB", &s.RedisDB)
	r.str("QUOTA_REDIS_KEY_PREFIX", &s.RedisKeyPrefix)
	r.duration("QUOTA_REDIS_TIMEOUT", &s.RedisTimeout)
	r.integer("QUOTA_REDIS_POOL_SIZE", &s.RedisPoolSize)
	r.integer("QUOTA_REDIS_WAIT_REPLICAS", &s.RedisWaitReplicas)
	r.duration("QUOTA_REDIS_WAIT_TIMEOUT", &s.RedisWaitTimeout)
	r.str("QUOTA_REDIS_USERNAME", &s.RedisUsername)
	r.str("QUOTA_REDIS_PASSWORD_FILE", &s.RedisPasswordFile)
	r.onOff("QUOTA_REDIS_TLS", &s.RedisTLS)
	r.str("QUOTA_REDIS_TLS_CA", &s.RedisTLSCA)
	r.str("QUOTA_REDIS_TLS_CERT", &s.RedisTLSCert)
	r.str("QUOTA_REDIS_TLS_KEY", &s.RedisTLSKey)
	r.str("QUOTA_REDIS_TLS_SERVER_NAME", &s.RedisTLSServerName)
	r.str("QUOTA_REDIS_SENTINEL_MASTER", &s.RedisSentinelMaster)
	r.str("QUOTA_REDIS_SENTINEL_PASSWORD", &s.RedisSentinelPassword)
	clusterSet := false
	if r.getenv("QUOTA_REDIS_CLUSTER") != "" {
		clusterSet = true
		r.onOff("QUOTA_REDIS_CLUSTER", &s.RedisCluster)
	}
	r.str("QUOTA_RULES_STORE", &s.RulesStore)
	r.duration("QUOTA_RULES_POLL", &s.RulesPoll)
	r.str("QUOTA_RULES_STATE", &s.RulesState)
	r.str("QUOTA_TIMEZONE", &s.TimeZone)
	r.str("QUOTA_WEBHOOK_URL", &s.WebhookURL)
	r.str("QUOTA_WEBHOOK_SECRET", &s.WebhookSecret)
	r.duration("QUOTA_DRAIN", &s.Drain)
	r.list("QUOTA_MYSQL_SHARDS", &s.MySQLShards)
	r.str("QUOTA_RULES", &s.RulesPath)
	r.str("QUOTA_ADMIN_TOKEN", &s.AdminToken)
	r.str("QUOTA_CHECK_TOKEN", &s.CheckToken)
	var fm string
	if r.str("QUOTA_FAIL_MODE", &fm) {
		s.FailMode = FailMode(fm)
	}
	r.integer("QUOTA_MAX_IN_FLIGHT", &s.MaxInFlight)
	r.duration("QUOTA_TTL_JITTER", &s.TTLJitter)
	r.integer("QUOTA_COALESCE", &s.Coalesce)
	r.integer("QUOTA_DENY_CACHE_SIZE", &s.DenyCacheSize)
	r.str("QUOTA_PPROF_LISTEN", &s.PprofListen)
	r.str("QUOTA_ADVERTISE_URL", &s.AdvertiseURL)
	r.integer("QUOTA_GC_HEAP_FLOOR_MB", &s.GCHeapFloorMB)
	var so string
	if r.str("QUOTA_SCHEMA_ON_START", &so) {
		s.SchemaOnStart = SchemaOnStart(so)
	}
	r.str("QUOTA_GRPC_LISTEN", &s.GRPCListen)
	r.str("QUOTA_ENVOY_CONFIG", &s.EnvoyConfig)
	r.str("QUOTA_ENVOY_APP_KEY", &s.EnvoyAppKey)
	r.onOff("QUOTA_ANALYTICS", &s.Analytics)
	r.duration("QUOTA_ANALYTICS_FLUSH", &s.AnalyticsFlush)
	r.integer("QUOTA_ANALYTICS_BUFFER_MAX", &s.AnalyticsBufferMax)
	r.integer("QUOTA_ANALYTICS_ROWS_PER_STATEMENT", &s.AnalyticsRowsPerStatement)
	r.float("QUOTA_ANALYTICS_FLUSH_DUTY", &s.AnalyticsFlushDuty)
	r.onOff("QUOTA_ANALYTICS_HOLD_MINUTE", &s.AnalyticsHoldMinute)
	r.integer("QUOTA_ANALYTICS_HLL_DENSE_AT", &s.AnalyticsHLLDenseAt)
	r.duration("QUOTA_ANALYTICS_IFACE_USERS_EVERY", &s.AnalyticsIfaceUsersEvery)
	r.str("QUOTA_ROLLUP_SCHEDULE", &s.RollupSchedule)
	r.onOff("QUOTA_TIERING", &s.Tiering)
	r.str("QUOTA_MIGRATE_SCHEDULE", &s.MigrateSchedule)
	r.float("QUOTA_HOT_THRESHOLD", &s.HotThreshold)
	r.float("QUOTA_COLD_THRESHOLD", &s.ColdThreshold)
	r.duration("QUOTA_PROMOTE_INTERVAL", &s.PromoteInterval)
	r.duration("QUOTA_DEMOTE_INTERVAL", &s.DemoteInterval)
	r.duration("QUOTA_MIGRATE_MIN_WINDOW", &s.MigrateMinWindow)
	r.integer("QUOTA_MIGRATE_LOG_MAX_ROWS", &s.MigrateLogMaxRows)
	r.integer("QUOTA_MIGRATE_PART_WORKERS", &s.MigratePartWorkers)
	r.float("QUOTA_MIGRATE_CELLS_PER_SEC", &s.MigrateCellsPerSec)
	r.str("QUOTA_NEW_TIER", &s.NewTier)
	r.integer("QUOTA_COLD_HINTS", &s.ColdHints)
	r.loadGateway(&s.Gateway)
	r.logLevel("QUOTA_LOG_LEVEL", &s.LogLevel)
	for _, name := range []string{"QUOTA_OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if r.str(name, &s.OTelEndpoint) {
			if u, err := url.Parse(s.OTelEndpoint); r.err == nil && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
				r.err = fmt.Errorf("%s %q: want an http:// or https:// URL of an OTLP collector, e.g. http://otel-collector:4318", name, s.OTelEndpoint)
			}
			break
		}
	}
	var buckets string
	if r.str("QUOTA_WARM_BUCKETS_PER_TAG", &buckets) && r.err == nil {
		// Warm buckets now follow each app's population (tiers/directory.go).
		r.err = fmt.Errorf("QUOTA_WARM_BUCKETS_PER_TAG %q: no longer a setting (each app's warm buckets grow with its cells); unset it", buckets)
	}
	if r.err != nil {
		return Settings{}, r.err
	}
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
	if err := s.Validate(); err != nil {
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

// Validate checks settings that Load cannot check field by field.
func (s Settings) Validate() error {
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
	if s.RedisDB < 0 || s.RedisDB > 15 || (s.RedisDB != 0 && (s.RedisCluster || len(s.RedisAddrs) > 1 && s.RedisSentinelMaster == "")) {
		return fmt.Errorf("QUOTA_REDIS_DB %d: want 0 to 15, and 0 on a Redis Cluster (several QUOTA_REDIS_ADDRS or QUOTA_REDIS_CLUSTER=on)", s.RedisDB)
	}
	if err := s.validateRedisOptions(); err != nil {
		return err
	}
	switch s.RulesStore {
	case "redis", "file":
	default:
		return fmt.Errorf("QUOTA_RULES_STORE %q: want redis (shared by every instance) or file", s.RulesStore)
	}
	if s.RulesState != "" && !filepath.IsAbs(s.RulesState) {
		return fmt.Errorf("QUOTA_RULES_STATE %q: want an absolute path outside the project's tree (e.g. /var/lib/quotad/rules-state.yaml), or unset", s.RulesState)
	}
	if s.RulesPoll < 100*time.Millisecond || s.RulesPoll > time.Minute {
		return fmt.Errorf("QUOTA_RULES_POLL %s: want between 100ms and 1m", s.RulesPoll)
	}
	if s.Drain < 0 || s.Drain > 5*time.Minute {
		return fmt.Errorf("QUOTA_DRAIN %s: want between 0 and 5m", s.Drain)
	}
	if len(s.MySQLShards) == 0 {
		return errors.New("QUOTA_MYSQL_SHARDS is empty: give at least one DSN")
	}
	if strings.ContainsAny(s.RedisKeyPrefix, "{}") {
		return errors.New("QUOTA_REDIS_KEY_PREFIX must not contain { or }: they would break the cluster hash tag")
	}
	switch s.FailMode {
	case FailOpen, FailClosed:
	default:
		return fmt.Errorf("QUOTA_FAIL_MODE %q: want open or closed", s.FailMode)
	}
	switch s.SchemaOnStart {
	case SchemaCheck, SchemaApply, SchemaOff:
	default:
		return fmt.Errorf("QUOTA_SCHEMA_ON_START %q: want check, apply or off", s.SchemaOnStart)
	}
	if s.RedisTimeout <= 0 || s.RedisTimeout > time.Minute {
		return fmt.Errorf("QUOTA_REDIS_TIMEOUT %s: want between 1ms and 1m", s.RedisTimeout)
	}
	if s.RedisWaitReplicas < 0 || s.RedisWaitReplicas > 16 {
		return fmt.Errorf("QUOTA_REDIS_WAIT_REPLICAS %d: want 0 (off) to 16 replicas", s.RedisWaitReplicas)
	}
	if s.RedisWaitReplicas > 0 && (s.RedisWaitTimeout < time.Millisecond || s.RedisWaitTimeout >= s.RedisTimeout) {
		return fmt.Errorf("QUOTA_REDIS_WAIT_TIMEOUT %s: want at least 1ms and below QUOTA_REDIS_TIMEOUT (%s)", s.RedisWaitTimeout, s.RedisTimeout)
	}
	if s.RedisPoolSize < 1 || s.MaxInFlight < 1 {
		return errors.New("QUOTA_REDIS_POOL_SIZE and QUOTA_MAX_IN_FLIGHT must be at least 1")
	}
	if s.DenyCacheSize < 0 || s.DenyCacheSize > 1<<24 {
		return fmt.Errorf("QUOTA_DENY_CACHE_SIZE %d: want 0 (off) to %d entries", s.DenyCacheSize, 1<<24)
	}
	if s.Coalesce < 0 || s.Coalesce > 256 {
		return fmt.Errorf("QUOTA_COALESCE %d: want 0 (off) to 256 senders", s.Coalesce)
	}
	if s.GCHeapFloorMB < 0 || s.GCHeapFloorMB > 1<<20 {
		return fmt.Errorf("QUOTA_GC_HEAP_FLOOR_MB %d: want 0 (off) to 1048576 MiB", s.GCHeapFloorMB)
	}
	if s.TTLJitter < 0 || s.TTLJitter > time.Hour {
		return fmt.Errorf("QUOTA_TTL_JITTER %s: want between 0 and 1h", s.TTLJitter)
	}
	if s.AnalyticsFlush < 100*time.Millisecond || s.AnalyticsFlush > 10*time.Minute {
		return fmt.Errorf("QUOTA_ANALYTICS_FLUSH %s: want between 100ms and 10m", s.AnalyticsFlush)
	}
	if s.AnalyticsBufferMax < 1000 || s.AnalyticsBufferMax > 1_000_000_000 {
		return fmt.Errorf("QUOTA_ANALYTICS_BUFFER_MAX %d: want between 1000 and 1000000000 rows", s.AnalyticsBufferMax)
	}
	if s.AnalyticsRowsPerStatement < 1 || s.AnalyticsRowsPerStatement > 5000 {
		return fmt.Errorf("QUOTA_ANALYTICS_ROWS_PER_STATEMENT %d: want between 1 and 5000", s.AnalyticsRowsPerStatement)
	}
	if !(s.AnalyticsFlushDuty >= 0.01 && s.AnalyticsFlushDuty <= 1) {
		return fmt.Errorf("QUOTA_ANALYTICS_FLUSH_DUTY %g: want between 0.01 and 1", s.AnalyticsFlushDuty)
	}
	if s.AnalyticsHLLDenseAt != 0 && (s.AnalyticsHLLDenseAt < 256 || s.AnalyticsHLLDenseAt > 16384) {
		return fmt.Errorf("QUOTA_ANALYTICS_HLL_DENSE_AT %d: want 0 (left to Redis) or between 256 and 16384 bytes", s.AnalyticsHLLDenseAt)
	}
	if s.AnalyticsIfaceUsersEvery < time.Second || s.AnalyticsIfaceUsersEvery > 10*time.Minute {
		return fmt.Errorf("QUOTA_ANALYTICS_IFACE_USERS_EVERY %s: want between 1s and 10m", s.AnalyticsIfaceUsersEvery)
	}
	if _, err := cron.ParseStandard(s.RollupSchedule); err != nil {
		return fmt.Errorf("QUOTA_ROLLUP_SCHEDULE %q: not a cron spec (e.g. \"*/10 * * * *\" or \"@every 10m\"): %v", s.RollupSchedule, err)
	}
	if _, err := cron.ParseStandard(s.MigrateSchedule); err != nil {
		return fmt.Errorf("QUOTA_MIGRATE_SCHEDULE %q: not a cron spec (e.g. \"@daily\" or \"0 3 * * *\"): %v", s.MigrateSchedule, err)
	}
	if !(s.HotThreshold > 0) || s.HotThreshold > 1e9 {
		return fmt.Errorf("QUOTA_HOT_THRESHOLD %g: want calls per hour above 0", s.HotThreshold)
	}
	if !(s.ColdThreshold >= 0) || s.ColdThreshold > s.HotThreshold {
		return fmt.Errorf("QUOTA_COLD_THRESHOLD %g: want calls per hour between 0 and QUOTA_HOT_THRESHOLD (%g)", s.ColdThreshold, s.HotThreshold)
	}
	if s.PromoteInterval < 0 || s.DemoteInterval < 0 || (s.PromoteInterval > 0 && s.DemoteInterval > 0 && s.PromoteInterval >= s.DemoteInterval) {
		return fmt.Errorf("QUOTA_PROMOTE_INTERVAL %s and QUOTA_DEMOTE_INTERVAL %s: want 0 (off) or promote < demote", s.PromoteInterval, s.DemoteInterval)
	}
	if s.MigrateMinWindow < 0 {
		return fmt.Errorf("QUOTA_MIGRATE_MIN_WINDOW %s: want 0 (every window) or more", s.MigrateMinWindow)
	}
	if s.MigrateLogMaxRows < 0 {
		return fmt.Errorf("QUOTA_MIGRATE_LOG_MAX_ROWS %d: want 0 (fold at cycles only) or more rows", s.MigrateLogMaxRows)
	}
	if s.MigratePartWorkers < 1 || s.MigratePartWorkers > 64 {
		return fmt.Errorf("QUOTA_MIGRATE_PART_WORKERS %d: want 1 to 64 parts at once", s.MigratePartWorkers)
	}
	if c := s.MigrateCellsPerSec; c != 0 && !(c >= 1 && !math.IsInf(c, 0)) {
		return fmt.Errorf("QUOTA_MIGRATE_CELLS_PER_SEC %v: want 0 (no bound) or at least 1 cell a second", c)
	}
	if s.ColdHints < 0 || s.ColdHints > 1<<30 {
		return fmt.Errorf("QUOTA_COLD_HINTS %d: want 0 (off) to 1073741824 slots of 8 bytes", s.ColdHints)
	}
	if s.NewTier != "hot" {
		return fmt.Errorf("QUOTA_NEW_TIER %q: want hot (new cells start hot; warm and cold are no longer offered: unset it)", s.NewTier)
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

// reader collects the first parse error so Load reads like a list.
type reader struct {
	getenv func(string) string
	err    error
}

func (r *reader) str(name string, dst *string) bool {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return false
	}
	*dst = v
	return true
}

func (r *reader) list(name string, dst *[]string) {
	var v string
	if !r.str(name, &v) {
		return
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	*dst = out
}

func (r *reader) logLevel(name string, dst *slog.Level) {
	var v string
	if !r.str(name, &v) || r.err != nil {
		return
	}
	switch strings.ToLower(v) {
	case "debug":
		*dst = slog.LevelDebug
	case "info":
		*dst = slog.LevelInfo
	case "warn":
		*dst = slog.LevelWarn
	case "error":
		*dst = slog.LevelError
	default:
		r.err = fmt.Errorf("%s %q: want debug, info, warn or error", name, v)
	}
}

func (r *reader) float(name string, dst *float64) {
	var v string
	if !r.str(name, &v) || r.err != nil {
		return
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		r.err = fmt.Errorf("%s %q: want a number", name, v)
		return
	}
	*dst = f
}

func (r *reader) onOff(name string, dst *bool) {
	var v string
	if !r.str(name, &v) || r.err != nil {
		return
	}
	switch strings.ToLower(v) {
	case "on", "true", "1":
		*dst = true
	case "off", "false", "0":
		*dst = false
	default:
		r.err = fmt.Errorf("%s %q: want on or off", name, v)
	}
}

func (r *reader) integer(name string, dst *int) {
	var v string
	if !r.str(name, &v) || r.err != nil {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.err = fmt.Errorf("%s %q: want an integer", name, v)
		return
	}
	*dst = n
}

func (r *reader) duration(name string, dst *time.Duration) {
	var v string
	if !r.str(name, &v) || r.err != nil {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.err = fmt.Errorf("%s %q: want a duration like 250ms", name, v)
		return
	}
	*dst = d
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

package loadgen

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"
	"time"
)

// MaxBatch is the most checks /v1/check/batch takes in one request.
const MaxBatch = 1000

// Config is one load run.
type Config struct {
	URL         string        // base URL of quotad, e.g. http://127.0.0.1:8080
	Token       string        // sent as "Authorization: Bearer <token>" when set
	Connections int           // workers, each with its own keep-alive connection
	Duration    time.Duration // how long to send
	Rate        float64       // total req/s for open-loop mode; 0: closed loop
	Keys        Keyspace
	Batch       int           // >0: send /v1/check/batch with Batch checks per request
	Seed        uint64        // seeds the key draws
	Timeout     time.Duration // per-request timeout
	Client      string        // ClientRaw (default) or ClientNetHTTP
	JSONPath    string        // where the JSON summary goes ("-": stdout); empty: none
	Progress    io.Writer     // where the live progress line goes; nil: none
}

// DefaultConfig is the configuration with every flag at its default.
func DefaultConfig() Config {
	return Config{
		URL:         "http://127.0.0.1:8080",
		Connections: 64,
		Duration:    20 * time.Second,
		Keys: Keyspace{
			Apps:   1000,
			Users:  100000,
			IPs:    100000,
			Ifaces: 50,
			Dist:   DistUniform,
			ZipfS:  1.1,
		},
		Seed:    1,
		Timeout: 10 * time.Second,
		Client:  ClientRaw,
	}
}

// The HTTP clients a run can use (-client).
const (
	// ClientRaw is loadgen's own HTTP/1.1 keep-alive client (rawclient.go):
	// one connection per worker, request bytes built once, no allocation
	// per request. Plain http:// only.
	ClientRaw = "raw"
	// ClientNetHTTP is net/http's Client, which costs more CPU per request
	// (the client earlier figures in BENCHMARKS.md were taken with).
	ClientNetHTTP = "nethttp"
)

// clientKind is c.Client, with "" meaning the default.
func (c *Config) clientKind() string {
	if c.Client == "" {
		return ClientRaw
	}
	return c.Client
}

// Mode is "closed" (a fixed number of connections, each sending as fast as
// it gets answers) or "open" (a fixed send rate).
func (c *Config) Mode() string {
	if c.Rate > 0 {
		return "open"
	}
	return "closed"
}

// ChecksPerRequest is how many checks one request carries.
func (c *Config) ChecksPerRequest() int {
	if c.Batch > 0 {
		return c.Batch
	}
	return 1
}

// endpoint is the full URL requests go to.
func (c *Config) endpoint() string {
	base := strings.TrimRight(c.URL, "/")
	if c.Batch > 0 {
		return base + "/v1/check/batch"
	}
	return base + "/v1/check"
}

// Validate reports the first invalid setting, as one line naming the flag.
func (c *Config) Validate() error {
	switch {
	case c.Connections < 1:
		return fmt.Errorf("invalid -c %d: need at least 1 connection", c.Connections)
	case c.Duration <= 0:
		return fmt.Errorf("invalid -d %s: must be positive", c.Duration)
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return fmt.Errorf("invalid -rate %g: must be 0 (closed loop) or a positive number of requests per second", c.Rate)
	case c.Rate > 1e9:
		return fmt.Errorf("invalid -rate %g: at most 1e9 requests per second", c.Rate)
	case c.Batch < 0 || c.Batch > MaxBatch:
		return fmt.Errorf("invalid -batch %d: must be 0 (single checks) or 1..%d", c.Batch, MaxBatch)
	case c.Timeout <= 0:
		return fmt.Errorf("invalid -timeout %s: must be positive", c.Timeout)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid -url %q: want http://host:port", c.URL)
	}
	switch c.clientKind() {
	case ClientRaw:
		if u.Scheme != "http" {
			return fmt.Errorf("invalid -url %q: -client %s speaks plain http only (use -client %s for https)", c.URL, ClientRaw, ClientNetHTTP)
		}
	case ClientNetHTTP:
	default:
		return fmt.Errorf("invalid -client %q: want %s or %s", c.Client, ClientRaw, ClientNetHTTP)
	}
	return c.Keys.Validate()
}

// ErrHelp is returned by ParseFlags for -h / -help; usage has been printed.
var ErrHelp = flag.ErrHelp

// ParseFlags parses the quotabench command line into a validated Config.
// Usage goes to stderr on -h (the error is then ErrHelp), and so does the
// progress line unless -progress=false. Other errors are one line, without
// usage, for the caller to print before exiting 2.
func ParseFlags(args []string, stderr io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("quotabench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		apps, users, ips, ifaces, identities int64
		seed                                 int64
		progress                             bool
	)
	fs.StringVar(&cfg.URL, "url", cfg.URL, "base URL of quotad")
	fs.StringVar(&cfg.Token, "token", "", "bearer token sent as Authorization: Bearer `TOKEN`")
	fs.IntVar(&cfg.Connections, "c", cfg.Connections, "connections (workers, one keep-alive connection each)")
	fs.DurationVar(&cfg.Duration, "d", cfg.Duration, "duration of the run")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: total requests per second, latency measured from the intended send time (0: closed loop)")
	fs.Int64Var(&apps, "apps", int64(cfg.Keys.Apps), "distinct app_id values")
	fs.Int64Var(&users, "users", int64(cfg.Keys.Users), "distinct user_id values")
	fs.Int64Var(&ips, "ips", int64(cfg.Keys.IPs), "distinct ip values")
	fs.Int64Var(&ifaces, "ifaces", int64(cfg.Keys.Ifaces), "distinct interface_id values")
	fs.Int64Var(&identities, "identities", 0, "draw one identity index from [0,N) and derive app/user/ip/interface from it (0: draw each dimension independently)")
	fs.StringVar(&cfg.Keys.Dist, "dist", cfg.Keys.Dist, "key distribution: uniform or zipf")
	fs.Float64Var(&cfg.Keys.ZipfS, "zipf-s", cfg.Keys.ZipfS, "zipf exponent s (> 1)")
	fs.IntVar(&cfg.Batch, "batch", 0, "send /v1/check/batch with K checks per request (0: /v1/check)")
	fs.Int64Var(&seed, "seed", int64(cfg.Seed), "random seed of the key draws")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-request timeout")
	fs.StringVar(&cfg.Client, "client", cfg.Client, "HTTP client: "+ClientRaw+" (loadgen's minimal HTTP/1.1 keep-alive client, plain http only) or "+ClientNetHTTP+" (net/http, costs the machine more CPU per request)")
	fs.StringVar(&cfg.JSONPath, "json", "", "also write the summary as JSON to `FILE` (\"-\": stdout, the text summary then goes to stderr)")
	fs.BoolVar(&progress, "progress", true, "print a live progress line on stderr every second")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "usage: quotabench [flags]  (load generator for quotad's POST /v1/check)")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return cfg, ErrHelp
		}
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"apps", apps}, {"users", users}, {"ips", ips}, {"ifaces", ifaces}, {"identities", identities}} {
		if f.v < 0 {
			return cfg, fmt.Errorf("invalid -%s %d: must not be negative", f.name, f.v)
		}
	}
	cfg.Keys.Apps, cfg.Keys.Users, cfg.Keys.IPs, cfg.Keys.Ifaces = uint64(apps), uint64(users), uint64(ips), uint64(ifaces)
	cfg.Keys.Identities = uint64(identities)
	cfg.Seed = uint64(seed)
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if progress {
		cfg.Progress = stderr
	}
	return cfg, nil
}

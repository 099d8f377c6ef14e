package api

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/envoyconf"
	"github.com/quota-platform/quota/limiter"
)

// EnvoyConfig holds the envoy ratelimit configuration in force; SIGHUP
// replaces it with Store.
type EnvoyConfig struct {
	p atomic.Pointer[envoyState]
}

// envoyState is a configuration and what calls under it read of it.
type envoyState struct {
	conf *envoyconf.Config
	// scopes is each configured domain's limiter.Request Scope, made once
	// rather than per call.
	scopes map[string]string
}

// NewEnvoyConfig holds c (nil: no domains).
func NewEnvoyConfig(c *envoyconf.Config) *EnvoyConfig {
	e := &EnvoyConfig{}
	e.Store(c)
	return e
}

// Load is the configuration in force.
func (e *EnvoyConfig) Load() *envoyconf.Config { return e.p.Load().conf }

// Store puts c in force; requests already running finish under the old one.
func (e *EnvoyConfig) Store(c *envoyconf.Config) {
	if c == nil {
		c = envoyconf.Empty()
	}
	st := &envoyState{conf: c, scopes: map[string]string{}}
	for _, d := range c.Domains() {
		st.scopes[d] = scopePrefix + d
	}
	e.p.Store(st)
}

// scope is domain's Scope: counters are only made in configured domains.
func (st *envoyState) scope(domain string) string {
	if sc, ok := st.scopes[domain]; ok {
		return sc
	}
	return scopePrefix + domain
}

// rateLimitService is envoy.service.ratelimit.v3.RateLimitService over the
// limiter: the same counters store, metrics and analytics as /v1/check.
type rateLimitService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s    *Server
	conf *EnvoyConfig
	// latency times each call in quota_check_duration_seconds under the
	// method's name, beside the HTTP routes (nil without metrics).
	latency prometheus.Observer
}

// NewGRPC returns quotad's gRPC server: the Envoy rate limit service under
// conf, gRPC health checking (SERVING until the returned health server is
// shut down) and reflection. opts come after (and so win over) its own
// transport options, grpcTransport.
func (s *Server) NewGRPC(conf *EnvoyConfig, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	gs := grpc.NewServer(append(grpcTransport(), opts...)...)
	rls := &rateLimitService{s: s, conf: conf}
	if s.deps.Metrics != nil {
		rls.latency = s.deps.Metrics.CheckLatency.WithLabelValues(rateLimitMethod)
	}
	rlsv3.RegisterRateLimitServiceServer(gs, rls)
	hs := health.NewServer()
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// Flow-control windows of quotad's gRPC connections. Static windows turn
// off grpc-go's BDP estimation, which on a connection carrying one small
// call at a time sends a PING (and a WINDOW_UPDATE) for nearly every
// request and reads the client's PING ACK: several frames, a write and
// reads of the server's per call, there to grow windows for bulk
// transfers that rate limit calls never make. A stream's window holds
// any request Envoy's rate limit actions produce; the connection's lets
// many calls multiplexed on one Envoy connection arrive without waiting
// for window updates.
const (
	grpcStreamWindow = 64 << 10
	grpcConnWindow   = 1 << 20
)

// grpcTransport is quotad's gRPC transport configuration: the windows
// above and the codec that decodes Envoy's requests by hand (rlsCodec).
func grpcTransport() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StaticStreamWindowSize(grpcStreamWindow),
		grpc.StaticConnWindowSize(grpcConnWindow),
		grpc.ForceServerCodecV2(newRLSCodec()),
	}
}

// rateLimitMethod is the route label of Envoy's checks in
// quota_check_duration_seconds.
const rateLimitMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

func (r *rateLimitService) observe(start time.Time) {
	r.latency.Observe(time.Since(start).Seconds())
}

// Bounds on one request, far above what Envoy's rate limit actions produce:
// every descriptor with a limit is a counter of one Redis script call.
const (
	maxDescriptors = 64
	maxEntries     = 32
	maxEntryBytes  = 4096
)

// scopePrefix keeps envoy counters apart from the rules' (limiter.CounterRequest).
const scopePrefix = "envoy/"

// ShouldRateLimit decides the request's descriptors as envoy ratelimit
// would, except that they are decided together: a request denied by one
// descriptor is counted in none.
func (r *rateLimitService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if r.latency != nil {
		defer r.observe(time.Now())
	}
	if err := r.authorize(ctx); err != nil {
		return nil, err
	}
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(descs) > maxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors, at most %d", len(descs), maxDescriptors)
	}
	st := r.conf.p.Load()
	conf := st.conf
	call := new(rlsCall)
	// Working memory that outlives no step of the call stays on the stack.
	var limitsBuf [inlineDescriptors]*envoyconf.Limit
	var costsBuf [inlineDescriptors]int64
	var entriesBuf [8]envoyconf.Entry
	limits, costs, entries := limitsBuf[:0], costsBuf[:0], entriesBuf[:0]
	var replaced map[string]bool
	for i, d := range descs {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has no entries", i)
		}
		if len(d.GetEntries()) > maxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries, at most %d", i, len(d.GetEntries()), maxEntries)
		}
		entries = entries[:0]
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" || e.GetValue() == "" {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d entry %d: key and value must not be empty", i, j)
			}
			if len(e.GetKey()) > maxEntryBytes || len(e.GetValue()) > maxEntryBytes {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d entry %d: key and value must be at most %d bytes", i, j, maxEntryBytes)
			}
			entries = append(entries, envoyconf.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		cost, err := hitsAddend(req, d)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
		}
		costs = append(costs, cost)
		if o := d.GetLimit(); o != nil && conf.HasDomain(req.GetDomain()) {
			// A limit sent by Envoy itself (its limit override) wins over the
			// file, in a configured domain (as envoy ratelimit has it).
			u := envoyconf.Unit(o.GetUnit())
			if envoyconf.Window(u) == 0 {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override has no valid unit", i)
			}
			limits = append(limits, &envoyconf.Limit{FullKey: req.GetDomain() + ".override", RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u})
			continue
		}
		l := conf.Lookup(req.GetDomain(), entries)
		limits = append(limits, l)
		if l != nil {
			for _, name := range l.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
	}
	// A named limit that another matched descriptor replaces is not applied.
	for i, l := range limits {
		if l != nil && l.Name != "" && replaced[l.Name] {
			limits[i] = nil
		}
	}
	return r.decide(ctx, st, call, req, limits, costs)
}

// inlineDescriptors is how many descriptors a call decides in the one
// allocation of its rlsCall (Envoy sends one per rate limit action: a
// few); more take allocations of their own, as they would without it.
const inlineDescriptors = 4

// rlsCall is what of a call outlives its steps, in one allocation rather
// than one per object: its limiter request and counters with their
// identities (handed to the coalescer's goroutine), and the
// response with its statuses (grpc-go marshals it after the handler
// returns).
type rlsCall struct {
	ids      [4 * inlineDescriptors]string
	req      limiter.Request
	counters [inlineDescriptors]limiter.Counter
	reqs     [1]*limiter.Request
	ds       [1]limiter.Decision

	resp     rlsv3.RateLimitResponse
	statuses [inlineDescriptors]*rlsv3.RateLimitResponse_DescriptorStatus
	status   [inlineDescriptors]rlsv3.RateLimitResponse_DescriptorStatus
	current  [inlineDescriptors]rlsv3.RateLimitResponse_RateLimit
	reset    [inlineDescriptors]durationpb.Duration
}

// counterSlot is where a descriptor's counter is: the limiter request
// (one per cost) and its place among that request's counters; -1: none.
type counterSlot struct{ req, counter int }

// answer is the response with n statuses, OK, each cut from the call's
// memory while it has room.
func (c *rlsCall) answer(n int) *rlsv3.RateLimitResponse {
	c.resp.OverallCode = rlsv3.RateLimitResponse_OK
	c.resp.Statuses = c.statuses[:0]
	for i := range n {
		var st *rlsv3.RateLimitResponse_DescriptorStatus
		if i < inlineDescriptors {
			st = &c.status[i]
		} else {
			st = new(rlsv3.RateLimitResponse_DescriptorStatus)
		}
		st.Code = rlsv3.RateLimitResponse_OK
		c.resp.Statuses = append(c.resp.Statuses, st)
	}
	return &c.resp
}

// limitOf is status i's current_limit and duration_until_reset.
func (c *rlsCall) limitOf(i int) (*rlsv3.RateLimitResponse_RateLimit, *durationpb.Duration) {
	if i < inlineDescriptors {
		return &c.current[i], &c.reset[i]
	}
	return new(rlsv3.RateLimitResponse_RateLimit), new(durationpb.Duration)
}

// authorize asks for QUOTA_CHECK_TOKEN, when set, as "authorization:
// Bearer <token>" metadata (Envoy's grpc_service initial_metadata).
func (r *rateLimitService) authorize(ctx context.Context) error {
	want := r.s.deps.Settings.CheckToken
	if want == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && sameToken(tok, want) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "checks need the check token as authorization: Bearer metadata")
}

// hitsAddend is a descriptor's cost as envoy ratelimit reads it: the
// descriptor's own hits_addend if set, else the request's (0: 1).
func hitsAddend(req *rlsv3.RateLimitRequest, d *rlcommon.RateLimitDescriptor) (int64, error) {
	if d.GetIsNegativeHits() {
		return 0, errNegativeHits
	}
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() == 0 {
			return 0, errZeroHits
		}
		if h.GetValue() > math.MaxUint32 {
			return 0, errHugeHits
		}
		return int64(h.GetValue()), nil
	}
	return max(1, int64(req.GetHitsAddend())), nil
}

type rlsError string

func (e rlsError) Error() string { return string(e) }

const (
	errNegativeHits = rlsError("is_negative_hits (giving hits back) is not supported by quota")
	errZeroHits     = rlsError("a hits_addend of 0 (check without counting) is not supported by quota")
	errHugeHits     = rlsError("hits_addend is over 4294967295")
)

// decide counts the descriptors with a limit. Descriptors of one cost are
// one all-or-nothing check, on the path of POST /v1/check (the common
// case: every descriptor has the request's hits_addend); a request whose
// descriptors carry different per-descriptor costs is one check per cost,
// all in one store trip, and the all-or-nothing then holds within each
// cost.
func (r *rateLimitService) decide(ctx context.Context, st *envoyState, call *rlsCall, req *rlsv3.RateLimitRequest, limits []*envoyconf.Limit, costs []int64) (*rlsv3.RateLimitResponse, error) {
	appKey := r.s.deps.Settings.EnvoyAppKey
	reqs := call.reqs[:0]
	var whereBuf [inlineDescriptors]counterSlot
	where := whereBuf[:0]
	ids := call.ids[:0]
	app, iface, user := "", "", ""
	for i, d := range req.GetDescriptors() {
		where = append(where, counterSlot{-1, -1})
		for _, e := range d.GetEntries() {
			switch e.GetKey() {
			case appKey:
				app = e.GetValue()
			case "interface_id":
				iface = e.GetValue()
			case "user_id":
				user = e.GetValue()
			}
		}
		l := limits[i]
		if l == nil || l.Unlimited {
			continue
		}
		k := -1
		for j, cr := range reqs {
			if cr.Cost == costs[i] {
				k = j
				break
			}
		}
		if k < 0 {
			var cr *limiter.Request
			if len(reqs) == 0 { // the common case: one cost
				cr = &call.req
				cr.Counters = call.counters[:0]
			} else {
				cr = new(limiter.Request)
			}
			cr.Scope, cr.Cost = st.scope(req.GetDomain()), costs[i]
			k = len(reqs)
			reqs = append(reqs, cr)
		}
		// The identity is cut from one array shared by the call's counters;
		// once cut, it is never appended to.
		start := len(ids)
		dApp, dUser := "", ""
		for _, e := range d.GetEntries() {
			ids = append(ids, e.GetKey(), e.GetValue())
			switch e.GetKey() {
			case appKey:
				dApp = e.GetValue()
			case "user_id":
				dUser = e.GetValue()
			}
		}
		where[i] = counterSlot{k, len(reqs[k].Counters)}
		reqs[k].Counters = append(reqs[k].Counters, limiter.Counter{
			Name: l.FullKey, Identity: ids[start:len(ids):len(ids)], Limit: int64(l.RequestsPerUnit), Window: l.Window(),
			Shadow: l.Shadow, App: dApp, User: dUser,
		})
	}
	var ds []limiter.Decision
	var err error
	switch len(reqs) {
	case 0:
	case 1:
		// The path of POST /v1/check: the coalescer shares Redis pipelines.
		call.ds[0], err = r.s.deps.Checks.Check(ctx, reqs[0])
		ds = call.ds[:]
	default:
		ds, err = r.s.deps.Limiter.CheckBatch(ctx, reqs)
	}
	if err != nil {
		return r.storeFailure(err, call, len(limits))
	}
	allowed := true
	for i := range ds {
		r.s.count(&ds[i])
		allowed = allowed && ds[i].Allowed
	}
	if app != "" && r.s.deps.Usage != nil {
		r.s.deps.Usage.Record(app, iface, user, allowed)
	}
	resp := call.answer(len(limits))
	for i, l := range limits {
		st := resp.Statuses[i]
		switch {
		case l == nil:
			continue
		case l.Unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		e := &ds[where[i].req].Entries[where[i].counter]
		current, reset := call.limitOf(i)
		current.Name, current.RequestsPerUnit, current.Unit = l.Name, l.RequestsPerUnit, l.Unit
		reset.Seconds = ceilSeconds(e.ResetAfter)
		st.CurrentLimit, st.DurationUntilReset = current, reset
		st.LimitRemaining = uint32(min(max(e.Remaining, 0), math.MaxUint32))
		if !e.Allowed && !e.Shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			st.LimitRemaining = 0
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			r.s.recordDeniedDescriptor(app, l.FullKey, req.GetDescriptors()[i].GetEntries())
		}
	}
	return resp, nil
}

// storeFailure applies QUOTA_FAIL_MODE as /v1/check does: open answers OK
// (nothing was counted), closed answers UNAVAILABLE, which Envoy's
// rate_limit filter turns into its own failure_mode_deny choice, as it does
// when envoy ratelimit loses its Redis.
func (r *rateLimitService) storeFailure(err error, call *rlsCall, n int) (*rlsv3.RateLimitResponse, error) {
	s := r.s
	s.deps.Metrics.StoreErrors.WithLabelValues("hot").Inc()
	if ok, suppressed := s.undecidedLog.allow(time.Now()); ok {
		s.deps.Log.Warn("check undecided", "err", err, "fail_mode", string(s.deps.Settings.FailMode), "not_logged_since_last", suppressed, "entry", "grpc")
	}
	if s.deps.Settings.FailMode == config.FailClosed {
		return nil, status.Error(codes.Unavailable, "the counter store is unreachable; no decision could be made")
	}
	s.deps.Metrics.Unenforced.Inc()
	return call.answer(n), nil
}

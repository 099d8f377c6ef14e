// Package rlsgrpc is quotad's gRPC edge: Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) with gRPC health checking
// and reflection, beside the HTTP edge (package api) and apart from it, as
// envoyproxy/ratelimit keeps its server apart from its service. It decodes
// and checks Envoy's descriptors, looks up their limits in the envoy
// ratelimit configuration (package envoyconf) and answers in Envoy's
// terms; the decision itself (the limiter call, metrics, analytics, the
// fail mode) is package api/decide's, shared with the HTTP edge.
package rlsgrpc

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

	"github.com/quota-platform/quota/api/decide"
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
	core *decide.Core
	conf *EnvoyConfig
	// checkToken is QUOTA_CHECK_TOKEN ("": calls need none); appKey is
	// QUOTA_ENVOY_APP_KEY, the descriptor entry that names the app.
	checkToken, appKey string
	// latency times each call in quota_check_duration_seconds under the
	// method's name, beside the HTTP routes (nil without metrics).
	latency prometheus.Observer
}

// NewServer returns quotad's gRPC server: the Envoy rate limit service
// deciding through core under conf, gRPC health checking (SERVING until
// the returned health server is shut down) and reflection. opts come after
// (and so win over) its own transport options, grpcTransport.
func NewServer(core *decide.Core, conf *EnvoyConfig, opts ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	gs := grpc.NewServer(append(grpcTransport(), opts...)...)
	rlsv3.RegisterRateLimitServiceServer(gs, New(core, conf))
	hs := health.NewServer()
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// New is the Envoy rate limit service NewServer serves, deciding through
// core under conf and timed as there, without the transport.
func New(core *decide.Core, conf *EnvoyConfig) rlsv3.RateLimitServiceServer {
	set := core.Settings()
	rls := &rateLimitService{core: core, conf: conf, checkToken: set.CheckToken, appKey: set.EnvoyAppKey}
	if m := core.Metrics(); m != nil {
		rls.latency = m.CheckLatency.WithLabelValues(rateLimitMethod)
	}
	return rls
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
	want := r.checkToken
	if want == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && decide.SameToken(tok, want) {
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
	app, iface, user := r.identify(req)
	var whereBuf [inlineDescriptors]counterSlot
	reqs, where := r.counters(st, call, req, limits, costs, whereBuf[:0])
	ds, err := r.check(ctx, call, reqs)
	if err != nil {
		return r.storeFailure(err, call, len(limits))
	}
	allowed := true
	for i := range ds {
		r.core.Count(&ds[i])
		allowed = allowed && ds[i].Allowed
	}
	if app != "" {
		r.core.RecordCall(app, iface, user, allowed)
	}
	return r.respond(call, req, limits, ds, where, app), nil
}

// identify is the call's app (QUOTA_ENVOY_APP_KEY), interface and user for
// analytics: the last of each among all the descriptors' entries.
func (r *rateLimitService) identify(req *rlsv3.RateLimitRequest) (app, iface, user string) {
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			switch e.GetKey() {
			case r.appKey:
				app = e.GetValue()
			case "interface_id":
				iface = e.GetValue()
			case "user_id":
				user = e.GetValue()
			}
		}
	}
	return app, iface, user
}

// counters turns each descriptor with a limit into a counter of the
// limiter request of its cost, appending to where (one per descriptor)
// that counter's place, counterSlot{-1, -1} for a descriptor without one.
func (r *rateLimitService) counters(st *envoyState, call *rlsCall, req *rlsv3.RateLimitRequest, limits []*envoyconf.Limit, costs []int64, where []counterSlot) ([]*limiter.Request, []counterSlot) {
	reqs := call.reqs[:0]
	ids := call.ids[:0]
	for i, d := range req.GetDescriptors() {
		where = append(where, counterSlot{-1, -1})
		l := limits[i]
		if l == nil || l.Unlimited {
			continue
		}
		var k int
		reqs, k = requestOf(st, call, req.GetDomain(), reqs, costs[i])
		// The identity is cut from one array shared by the call's counters;
		// once cut, it is never appended to.
		start := len(ids)
		dApp, dUser := "", ""
		for _, e := range d.GetEntries() {
			ids = append(ids, e.GetKey(), e.GetValue())
			switch e.GetKey() {
			case r.appKey:
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
	return reqs, where
}

// requestOf is the place in reqs of the limiter request of cost, added
// when there is none yet: the first one is the call's own.
func requestOf(st *envoyState, call *rlsCall, domain string, reqs []*limiter.Request, cost int64) ([]*limiter.Request, int) {
	for j, cr := range reqs {
		if cr.Cost == cost {
			return reqs, j
		}
	}
	var cr *limiter.Request
	if len(reqs) == 0 { // the common case: one cost
		cr = &call.req
		cr.Counters = call.counters[:0]
	} else {
		cr = new(limiter.Request)
	}
	cr.Scope, cr.Cost = st.scope(domain), cost
	k := len(reqs)
	return append(reqs, cr), k
}

// check decides the limiter requests: one on the path of POST /v1/check,
// where the coalescer shares Redis pipelines; more in one store trip.
func (r *rateLimitService) check(ctx context.Context, call *rlsCall, reqs []*limiter.Request) ([]limiter.Decision, error) {
	switch len(reqs) {
	case 0:
		return nil, nil
	case 1:
		var err error
		call.ds[0], err = r.core.Check(ctx, reqs[0])
		return call.ds[:], err
	}
	return r.core.CheckBatch(ctx, reqs)
}

// respond is the answer to the call: each descriptor's status with its
// limit's numbers from its counter's entry in ds, OVER_LIMIT where that
// entry denied (not in shadow mode), each such denial recorded in who is
// throttled.
func (r *rateLimitService) respond(call *rlsCall, req *rlsv3.RateLimitRequest, limits []*envoyconf.Limit, ds []limiter.Decision, where []counterSlot, app string) *rlsv3.RateLimitResponse {
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
		reset.Seconds = decide.CeilSeconds(e.ResetAfter)
		st.CurrentLimit, st.DurationUntilReset = current, reset
		st.LimitRemaining = uint32(min(max(e.Remaining, 0), math.MaxUint32))
		if !e.Allowed && !e.Shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			st.LimitRemaining = 0
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			r.recordDenied(app, l.FullKey, req.GetDescriptors()[i].GetEntries())
		}
	}
	return resp
}

// recordDenied records one descriptor that its limit denied in who is
// throttled: the "rule" is the limit's full key in the envoy
// configuration, the identity the descriptor's entries.
func (r *rateLimitService) recordDenied(app, key string, entries []*rlcommon.RateLimitDescriptor_Entry) {
	if app == "" || !r.core.RecordsThrottled() {
		return
	}
	names, values := make([]string, len(entries)), make([]string, len(entries))
	for i, e := range entries {
		names[i], values[i] = e.GetKey(), e.GetValue()
	}
	r.core.RecordThrottled(app, key, names, values)
}

// storeFailure applies QUOTA_FAIL_MODE as /v1/check does: open answers OK
// (nothing was counted), closed answers UNAVAILABLE, which Envoy's
// rate_limit filter turns into its own failure_mode_deny choice, as it does
// when envoy ratelimit loses its Redis.
func (r *rateLimitService) storeFailure(err error, call *rlsCall, n int) (*rlsv3.RateLimitResponse, error) {
	if !r.core.Undecided(err, 1, "entry", "grpc") {
		return nil, status.Error(codes.Unavailable, "the counter store is unreachable; no decision could be made")
	}
	return call.answer(n), nil
}

package api

import rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

// PlatformRequests is platformRequests, for package api_test.
var PlatformRequests = platformRequests

// RateLimitService is the Envoy rate limit service NewGRPC serves, timed
// as there, for calls without the transport in package api_test.
func (s *Server) RateLimitService(conf *EnvoyConfig) rlsv3.RateLimitServiceServer {
	return &rateLimitService{s: s, conf: conf, latency: s.deps.Metrics.CheckLatency.WithLabelValues(rateLimitMethod)}
}

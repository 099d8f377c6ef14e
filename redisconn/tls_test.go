package redisconn_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quota-platform/quota/config"
	"github.com/quota-platform/quota/internal/testsupport/testenv"
	"github.com/quota-platform/quota/redisconn"
)

// A client, Ping and Probe made from QUOTA_REDIS_TLS* reach a redis-server
// that speaks only TLS and requires a client certificate; trusting another
// CA, or without the client certificate, none of them does.
func TestTLS_ClientPingAndProbe(t *testing.T) {
	t.Parallel()
	f := testenv.MakeTLSFiles(t, t.TempDir())
	port := testenv.FreePort(t) // not testenv.PortRedisTLS: cmd/quotad's tests use it meanwhile
	addr := "127.0.0.1:" + strconv.Itoa(port)
	clientTLS := f.ClientTLS(t)
	testenv.StartRedisServer(t, port, func(ctx context.Context) error { return testenv.PingAddr(ctx, addr, clientTLS) },
		"--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey, "--tls-ca-cert-file", f.CA,
		"--tls-auth-clients", "yes")
	cases := []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"CA and client certificate", map[string]string{"QUOTA_REDIS_TLS_CA": f.CA, "QUOTA_REDIS_TLS_CERT": f.ClientCert, "QUOTA_REDIS_TLS_KEY": f.ClientKey}, true},
		{"another CA", map[string]string{"QUOTA_REDIS_TLS_CA": f.OtherCA, "QUOTA_REDIS_TLS_CERT": f.ClientCert, "QUOTA_REDIS_TLS_KEY": f.ClientKey}, false},
		{"no client certificate", map[string]string{"QUOTA_REDIS_TLS_CA": f.CA}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"QUOTA_REDIS_ADDRS": addr, "QUOTA_REDIS_TLS": "on"}
			for k, v := range tc.env {
				env[k] = v
			}
			s, err := config.Load(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			rdb := redisconn.New(s)
			defer rdb.Close()
			for what, err := range map[string]error{
				"client": rdb.Ping(ctx).Err(),
				"Ping":   redisconn.Ping(s)(ctx, addr),
				"Probe":  redisconn.Probe(s)(ctx),
			} {
				if (err == nil) != tc.ok {
					t.Errorf("%s: %v, want ok=%v", what, err, tc.ok)
				}
			}
		})
	}
}

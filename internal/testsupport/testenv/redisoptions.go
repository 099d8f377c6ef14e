package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis servers of the Redis option tests (TLS, ACL, Sentinel, a
// cluster configuration endpoint) listen on fixed private ports, 7201-7230:
// a cluster's nodes must know their ports before they start.
const (
	PortRedisTLS      = 7201
	PortRedisACL      = 7202
	PortSentinelMain  = 7203 // the master; 7204 its replica; 7205 the sentinel
	PortSentinel      = 7205
	PortClusterFirst  = 7206 // 7206-7208: three masters
	PortClusterNodes  = 3
	PortRedisOptsLast = 7230
)

// RedisServer is a redis-server (or sentinel) started by a test with the
// options it needs; it is stopped by its PID when the test ends.
type RedisServer struct {
	t    testing.TB
	Port int
	args []string
	cmd  *exec.Cmd
	logs *LockedBuffer
}

// Addr is host:port of the server.
func (r *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Logs is what the server wrote.
func (r *RedisServer) Logs() string { return r.logs.String() }

// StartRedisServer starts `redis-server args...` (with --port, --bind,
// no persistence, its directory a temporary one) and waits until ready
// answers nil.
func StartRedisServer(t testing.TB, port int, ready func(context.Context) error, args ...string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not installed: %v (run deploy/ensure-services.sh)", err)
	}
	r := &RedisServer{t: t, Port: port, logs: &LockedBuffer{}}
	r.args = append(args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", t.TempDir(), "--logfile", "")
	if !hasArg(args, "--port") {
		r.args = append(r.args, "--port", strconv.Itoa(port))
	}
	r.start(ready)
	t.Cleanup(r.Kill)
	return r
}

func hasArg(args []string, name string) bool {
	for _, a := range args {
		if a == name {
			return true
		}
	}
	return false
}

func (r *RedisServer) start(ready func(context.Context) error) {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", r.args...)
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	if ready == nil {
		ready = func(ctx context.Context) error { return PingAddr(ctx, r.Addr(), nil) }
	}
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = ready(ctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("redis-server on %s not ready: %v\n%s", r.Addr(), err, r.logs)
}

// Kill stops the server (SIGKILL by its PID) and waits for it.
func (r *RedisServer) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// PingAddr sends PING to addr (over TLS when cfg is not nil).
func PingAddr(ctx context.Context, addr string, cfg *tls.Config) error {
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// TLSFiles are PEM files made by MakeTLSFiles: a CA, a server certificate
// for 127.0.0.1 and localhost, and a client certificate, all signed by it.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCA is a CA that signed none of them.
	OtherCA string
}

// MakeTLSFiles writes a fresh CA and certificates into dir.
func MakeTLSFiles(t testing.TB, dir string) TLSFiles {
	t.Helper()
	f := TLSFiles{
		CA: filepath.Join(dir, "ca.crt"), OtherCA: filepath.Join(dir, "other-ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	caKey, caCert, caDER := signCert(t, "quota test CA", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	})
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	_, _, otherDER := signCert(t, "some other CA", nil, nil, func(c *x509.Certificate) { c.IsCA, c.BasicConstraintsValid = true, true })
	writePEM(t, f.OtherCA, "CERTIFICATE", otherDER)
	leaf := func(certPath, keyPath, cn string, usage x509.ExtKeyUsage, server bool) {
		key, _, der := signCert(t, cn, caCert, caKey, func(c *x509.Certificate) {
			c.KeyUsage, c.ExtKeyUsage = x509.KeyUsageDigitalSignature, []x509.ExtKeyUsage{usage}
			if server {
				c.IPAddresses, c.DNSNames = []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}
			}
		})
		writePEM(t, certPath, "CERTIFICATE", der)
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyPath, "PRIVATE KEY", kb)
	}
	leaf(f.ServerCert, f.ServerKey, "redis", x509.ExtKeyUsageServerAuth, true)
	leaf(f.ClientCert, f.ClientKey, "quotad", x509.ExtKeyUsageClientAuth, false)
	return f
}

// signCert makes a key and a certificate for cn valid for a day, shaped by
// shape, signed by parent (self-signed when parent is nil).
func signCert(t testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, shape func(*x509.Certificate)) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	shape(tmpl)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClientTLS is the test's own TLS configuration for f (client certificate
// included), to reach a TLS redis-server directly.
func (f TLSFiles) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(f.CA)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("CA %s: %v", f.CA, err)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// StartTLSRedis starts a redis-server that speaks only TLS on
// PortRedisTLS and requires a client certificate signed by f.CA.
func StartTLSRedis(t testing.TB, f TLSFiles) *RedisServer {
	t.Helper()
	cfg := f.ClientTLS(t)
	addr := "127.0.0.1:" + strconv.Itoa(PortRedisTLS)
	return StartRedisServer(t, PortRedisTLS, func(ctx context.Context) error { return PingAddr(ctx, addr, cfg) },
		"--port", "0", "--tls-port", strconv.Itoa(PortRedisTLS),
		"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey, "--tls-ca-cert-file", f.CA,
		"--tls-auth-clients", "yes")
}

// StartACLRedis starts a redis-server on PortRedisACL whose default user is
// off: only user (with password) may connect, with every command and key.
func StartACLRedis(t testing.TB, user, password string) *RedisServer {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(PortRedisACL)
	return StartRedisServer(t, PortRedisACL, func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password, MaxRetries: -1})
		defer c.Close()
		return c.Ping(ctx).Err()
	}, "--user", "default", "off", "--user", user, "on", ">"+password, "~*", "&*", "+@all")
}

// Sentinel is a master, its replica and one sentinel watching them under
// the name Master (quorum 1).
type Sentinel struct {
	Master          string
	Main, Replica   *RedisServer
	SentinelProcess *RedisServer
}

// StartSentinel starts the master on PortSentinelMain, its replica on the
// next port and a sentinel on PortSentinel; the sentinel considers the
// master down after downAfter.
func StartSentinel(t testing.TB, downAfter time.Duration) *Sentinel {
	t.Helper()
	s := &Sentinel{Master: "quota-main"}
	s.Main = StartRedisServer(t, PortSentinelMain, nil)
	replicaAddr := "127.0.0.1:" + strconv.Itoa(PortSentinelMain+1)
	s.Replica = StartRedisServer(t, PortSentinelMain+1, func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: replicaAddr, MaxRetries: -1})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica not linked yet")
		}
		return nil
	}, "--replicaof", "127.0.0.1", strconv.Itoa(PortSentinelMain))
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
		PortSentinel, s.Master, PortSentinelMain, s.Master, downAfter.Milliseconds(), s.Master, s.Master)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sentAddr := "127.0.0.1:" + strconv.Itoa(PortSentinel)
	sp := &RedisServer{t: t, Port: PortSentinel, logs: &LockedBuffer{}, args: []string{conf, "--sentinel"}}
	sp.start(func(ctx context.Context) error {
		c := redis.NewSentinelClient(&redis.Options{Addr: sentAddr, MaxRetries: -1})
		defer c.Close()
		_, err := c.GetMasterAddrByName(ctx, s.Master).Result()
		return err
	})
	t.Cleanup(sp.Kill)
	s.SentinelProcess = sp
	return s
}

// SmallCluster is a Redis Cluster of PortClusterNodes masters (no
// replicas) on PortClusterFirst and the ports after it.
type SmallCluster struct {
	Nodes []*RedisServer
}

// StartSmallCluster starts the nodes, has redis-cli create the cluster and
// waits until every node reports cluster_state:ok.
func StartSmallCluster(t testing.TB) *SmallCluster {
	t.Helper()
	c := &SmallCluster{}
	var addrs []string
	for i := range PortClusterNodes {
		port := PortClusterFirst + i
		dir := t.TempDir()
		n := StartRedisServer(t, port, nil, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000")
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	cmd := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		for {
			info, err := cl.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				t.Fatalf("cluster node %s not ok: %v %s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return c
}

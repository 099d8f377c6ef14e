package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// enforcedCalls sends three checks for user (limit 2) and reports whether
// they were decided by Redis: 200, 200, 429, none answered by the fail mode.
func enforcedCalls(t *testing.T, url, user string) error {
	t.Helper()
	return enforcedBody(t, url, fmt.Sprintf(`{"user_id":%q}`, user))
}

func enforcedBody(t *testing.T, url, body string) error {
	t.Helper()
	for i, want := range []int{200, 200, 429} {
		resp, err := http.Post(url+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.Header.Get("Quota-Enforced") != "" {
			return fmt.Errorf("call %d of %s: %d (Quota-Enforced %q), want %d decided by Redis", i, body, resp.StatusCode, resp.Header.Get("Quota-Enforced"), want)
		}
	}
	return nil
}

// redisReadiness is what /readyz says about Redis.
func redisReadiness(t *testing.T, url string) string {
	t.Helper()
	_, checks := readyz(t, url)
	return checks["redis"]
}

// quotad reaches a Redis that speaks only TLS and requires a client
// certificate: with the CA and the client certificate its checks are
// enforced and the rules store is written there; without the client
// certificate, or trusting another CA, nothing reaches Redis (checks fail
// open and /readyz says why).
func TestRedisTLS_ChecksEnforcedWithCAAndClientCertificate(t *testing.T) {
	t.Parallel()
	f := testenv.MakeTLSFiles(t, t.TempDir())
	r := testenv.StartTLSRedis(t, f)
	rulesPath := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	tlsEnv := []string{"QUOTA_REDIS_ADDRS=" + r.Addr(), "QUOTA_REDIS_TLS=on", "QUOTA_ANALYTICS=off"}
	prefix := "t" + testenv.RandomHex(4) + ":"
	s := startServer(t, rulesPath, append(tlsEnv, "QUOTA_REDIS_KEY_PREFIX="+prefix,
		"QUOTA_REDIS_TLS_CA="+f.CA, "QUOTA_REDIS_TLS_CERT="+f.ClientCert, "QUOTA_REDIS_TLS_KEY="+f.ClientKey)...)
	if err := enforcedCalls(t, s.url, "u"); err != nil {
		t.Fatalf("over TLS: %v\n%s", err, s.logs)
	}
	if got := redisReadiness(t, s.url); got != "ok" {
		t.Fatalf("/readyz redis: %s", got)
	}
	direct := redis.NewClient(&redis.Options{Addr: r.Addr(), TLSConfig: f.ClientTLS(t)})
	defer direct.Close()
	if seq, err := direct.HGet(context.Background(), prefix+"rules", "seq").Result(); err != nil || seq != "1" {
		t.Fatalf("rules store on the TLS Redis: %q %v", seq, err)
	}

	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"no client certificate", []string{"QUOTA_REDIS_TLS_CA=" + f.CA}, "certificate"},
		{"another CA", []string{"QUOTA_REDIS_TLS_CA=" + f.OtherCA, "QUOTA_REDIS_TLS_CERT=" + f.ClientCert, "QUOTA_REDIS_TLS_KEY=" + f.ClientKey}, "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, rulesPath, append(tlsEnv, tc.env...)...)
			if err := enforcedCalls(t, s.url, "u"); err == nil {
				t.Fatal("checks were enforced")
			}
			// With TLS 1.3 the server refuses a client without a
			// certificate after the client's side of the handshake, so a
			// ping may see the connection reset before the alert that
			// says why: the next probe's ping reads the alert.
			got := redisReadiness(t, s.url)
			for try := 0; try < 20 && !strings.Contains(got, tc.want); try++ {
				time.Sleep(100 * time.Millisecond)
				got = redisReadiness(t, s.url)
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("/readyz redis: %q, want it to mention %q", got, tc.want)
			}
		})
	}
}

// quotad logs in as an ACL user whose password it reads from a file; the
// default user is off, so without that user nothing works.
func TestRedisACL_UserAndPasswordFile(t *testing.T) {
	t.Parallel()
	r := testenv.StartACLRedis(t, "quotad", "acl-secret-0123")
	dir := t.TempDir()
	good := writeFile(t, dir, "redis.pass", "acl-secret-0123\n")
	bad := writeFile(t, dir, "wrong.pass", "not-the-password\n")
	rulesPath := writeFile(t, dir, "rules.yaml", validRules)
	for _, tc := range []struct {
		name     string
		env      []string
		enforced bool
		want     string // /readyz's redis answer
	}{
		{"user and password file", []string{"QUOTA_REDIS_USERNAME=quotad", "QUOTA_REDIS_PASSWORD_FILE=" + good}, true, "ok"},
		{"user and password", []string{"QUOTA_REDIS_USERNAME=quotad", "QUOTA_REDIS_PASSWORD=acl-secret-0123"}, true, "ok"},
		{"wrong password", []string{"QUOTA_REDIS_USERNAME=quotad", "QUOTA_REDIS_PASSWORD_FILE=" + bad}, false, "WRONGPASS"},
		{"no user (default user is off)", nil, false, "NOAUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, rulesPath, append(tc.env, "QUOTA_REDIS_ADDRS="+r.Addr(), "QUOTA_ANALYTICS=off")...)
			err := enforcedCalls(t, s.url, "u")
			if (err == nil) != tc.enforced {
				t.Fatalf("enforced: %v, want %v", err, tc.enforced)
			}
			if got := redisReadiness(t, s.url); !strings.Contains(got, tc.want) {
				t.Fatalf("/readyz redis: %q, want %q", got, tc.want)
			}
		})
	}
}

// With Sentinel quotad finds the master through the sentinel, and when the
// master is killed it follows the replica the sentinel promotes.
func TestRedisSentinel_FollowsThePromotedReplica(t *testing.T) {
	t.Parallel()
	sn := testenv.StartSentinel(t, 500*time.Millisecond)
	rulesPath := writeFile(t, t.TempDir(), "rules.yaml", validRules)
	s := startServer(t, rulesPath, "QUOTA_REDIS_ADDRS="+sn.SentinelProcess.Addr(), "QUOTA_REDIS_SENTINEL_MASTER="+sn.Master,
		"QUOTA_ANALYTICS=off", "QUOTA_TIERING=off")
	if err := enforcedCalls(t, s.url, "before"); err != nil {
		t.Fatalf("through the sentinel: %v\n%s", err, s.logs)
	}
	main := redis.NewClient(&redis.Options{Addr: sn.Main.Addr()})
	defer main.Close()
	if n, err := main.DBSize(context.Background()).Result(); err != nil || n == 0 {
		t.Fatalf("the master holds %d keys (%v): the checks did not go there", n, err)
	}
	sn.Main.Kill()
	killed := time.Now()
	for i := 0; ; i++ {
		err := enforcedCalls(t, s.url, fmt.Sprintf("after-%d", i))
		if err == nil {
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("not enforced 30 s after the master was killed: %v\n%s", err, sn.SentinelProcess.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	back := time.Since(killed)
	replica := redis.NewClient(&redis.Options{Addr: sn.Replica.Addr()})
	defer replica.Close()
	if role, err := replica.Do(context.Background(), "ROLE").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("the replica was not promoted: %v %v", role, err)
	}
	t.Logf("enforced again %s after the master was killed (sentinel down-after 500ms)", back.Round(10*time.Millisecond))
}

// One address of a Redis Cluster with QUOTA_REDIS_CLUSTER=on: quotad
// discovers the nodes and its counters (one hash slot per app, tiering on)
// spread over all of them. Without the setting, the one address is taken
// for a single Redis and the checks on other nodes' slots are not enforced.
func TestRedisCluster_OneConfigurationEndpoint(t *testing.T) {
	t.Parallel()
	c := testenv.StartSmallCluster(t)
	rulesPath := writeFile(t, t.TempDir(), "rules.yaml",
		"rules:\n  - {name: per_app_user, dimensions: [app_id, user_id], limit: 2, window: 1h, algorithm: fixed_window}\n")
	env := []string{"QUOTA_REDIS_ADDRS=" + c.Nodes[0].Addr(), "QUOTA_ANALYTICS=off"}
	s := startServer(t, rulesPath, append(env, "QUOTA_REDIS_CLUSTER=on")...)
	for a := range 30 {
		if err := enforcedBody(t, s.url, fmt.Sprintf(`{"app_id":"app-%d","user_id":"u"}`, a)); err != nil {
			t.Fatalf("through the configuration endpoint: %v\n%s", err, s.logs)
		}
	}
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		keys, err := cl.DBSize(context.Background()).Result()
		cl.Close()
		if err != nil || keys == 0 {
			t.Errorf("node %s holds %d keys (%v): the counters did not spread", n.Addr(), keys, err)
		}
	}
	single := startServer(t, rulesPath, env...)
	missed := 0
	for a := range 30 {
		if enforcedBody(t, single.url, fmt.Sprintf(`{"app_id":"app-%d","user_id":"single"}`, a)) != nil {
			missed++
		}
	}
	if missed == 0 {
		t.Error("without QUOTA_REDIS_CLUSTER=on every check was enforced: the setting makes no difference")
	}
	t.Logf("without QUOTA_REDIS_CLUSTER=on: %d of 30 apps not enforced", missed)
}

// Redis options that cannot work together, or files that cannot be read,
// stop quotad with one clear line.
func TestRedisOptions_InvalidCombinationsStopStartUp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", validRules)
	notPEM := writeFile(t, dir, "not.pem", "hello")
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"sentinel and cluster", []string{"QUOTA_REDIS_SENTINEL_MASTER=m", "QUOTA_REDIS_CLUSTER=on"}, "QUOTA_REDIS_SENTINEL_MASTER"},
		{"TLS files without TLS", []string{"QUOTA_REDIS_TLS_CA=" + notPEM}, "QUOTA_REDIS_TLS is not on"},
		{"certificate without key", []string{"QUOTA_REDIS_TLS=on", "QUOTA_REDIS_TLS_CERT=" + notPEM}, "QUOTA_REDIS_TLS_KEY"},
		{"CA file that is not PEM", []string{"QUOTA_REDIS_TLS=on", "QUOTA_REDIS_TLS_CA=" + notPEM}, "no PEM certificate"},
		{"missing CA file", []string{"QUOTA_REDIS_TLS=on", "QUOTA_REDIS_TLS_CA=" + filepath.Join(dir, "nope.crt")}, "QUOTA_REDIS_TLS_CA"},
		{"password and password file", []string{"QUOTA_REDIS_PASSWORD=x", "QUOTA_REDIS_PASSWORD_FILE=" + notPEM}, "QUOTA_REDIS_PASSWORD_FILE"},
		{"missing password file", []string{"QUOTA_REDIS_PASSWORD_FILE=" + filepath.Join(dir, "nope")}, "QUOTA_REDIS_PASSWORD_FILE"},
		{"cluster off with several addresses", []string{"QUOTA_REDIS_CLUSTER=off", "QUOTA_REDIS_ADDRS=127.0.0.1:1,127.0.0.1:2"}, "QUOTA_REDIS_CLUSTER"},
		{"negative drain", []string{"QUOTA_DRAIN=-1s"}, "QUOTA_DRAIN"},
		{"unknown rules store", []string{"QUOTA_RULES_STORE=mysql"}, "QUOTA_RULES_STORE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := runQuotad(t, append(tc.env, "QUOTA_RULES="+good)...)
			if err == nil {
				t.Fatal("quotad started")
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr %q, want one line mentioning %q", out, tc.want)
			}
		})
	}
}

// runQuotad runs quotad serve with env until it exits (at most 30 s) and
// returns its stderr.
func runQuotad(t *testing.T, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, quotadBin, "serve")
	cmd.Env = append(environWithoutQuota(), append(env, fmt.Sprintf("QUOTA_LISTEN=127.0.0.1:%d", testenv.FreePort(t)))...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

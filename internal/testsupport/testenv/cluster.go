package testenv

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartRedisCluster starts masters redis-server processes with cluster
// mode on, on free ports (a data directory each under the test's temporary
// directory), joins them into a Redis Cluster without replicas
// (redis-cli --cluster create) and waits until every node reports the
// cluster ok. Missing slots do not stop the others answering
// (cluster-require-full-coverage no), so a test can kill one master and see
// the others go on. The servers are killed when the test ends.
func StartRedisCluster(t testing.TB, masters int) []*RedisProcess {
	t.Helper()
	return StartRedisClusterWith(t, masters)
}

// StartRedisClusterWith is StartRedisCluster with extra redis-server
// options for every node (e.g. "--appendonly", "yes").
func StartRedisClusterWith(t testing.TB, masters int, opts ...string) []*RedisProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not installed: %v (apt-get install redis-tools)", err)
	}
	var nodes []*RedisProcess
	var addrs []string
	for range masters {
		p := &RedisProcess{t: t, Port: FreePort(t), args: []string{
			"--cluster-enabled", "yes", "--dir", t.TempDir(), "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"}}
		p.args = append(p.args, opts...)
		p.Start()
		t.Cleanup(p.Kill)
		nodes, addrs = append(nodes, p), append(addrs, p.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, p := range nodes {
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, _ := exec.Command("redis-cli", "-p", strconv.Itoa(p.Port), "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: cluster not ok within 20 s: %s", p, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

// ClusterClient returns a client of the cluster whose masters are nodes,
// with opts' other settings (nil: go-redis' defaults), closed when the test
// ends.
func ClusterClient(t testing.TB, nodes []*RedisProcess, opts *redis.ClusterOptions) *redis.ClusterClient {
	t.Helper()
	o := redis.ClusterOptions{}
	if opts != nil {
		o = *opts
	}
	for _, n := range nodes {
		o.Addrs = append(o.Addrs, n.Addr())
	}
	cc := redis.NewClusterClient(&o)
	t.Cleanup(func() { cc.Close() })
	return cc
}

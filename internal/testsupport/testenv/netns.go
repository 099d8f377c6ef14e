package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Net is a private network of hosts for a test: each Host is a network
// namespace of its own (`ip netns`) whose veth link joins a bridge in the
// test's namespace, on a /24 of 10.231.0.0/16 picked at random; the test
// reaches every host through the bridge (its address .1). Everything is
// made by NewNet and AddHost and removed when the test ends; the processes
// a test starts in a host are stopped by their PIDs first (their cleanups
// run before the Net's). It needs root and iproute2 (and iptables for Block).
type Net struct {
	t      testing.TB
	id     string // 6 hex digits: names of the bridge, links and namespaces
	bridge string
	prefix string // "10.231.N."
	hosts  []*Host
}

// Host is one network namespace of a Net.
type Host struct {
	net  *Net
	Name string // for messages: "redis-1", "quotad-2"
	NS   string // the namespace's name
	IP   string
	veth string // the link's end in the test's namespace (on the bridge)
}

// NewNet makes the bridge of a new private network.
func NewNet(t testing.TB) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("network namespaces need root (run make test-partitions as root)")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed: %v (apt-get install iproute2 iptables)", tool, err)
		}
	}
	n := &Net{t: t, id: RandomHex(3)}
	n.bridge = "qbr" + n.id
	n.prefix = "10.231." + strconv.Itoa(rand.IntN(250)+1) + "."
	t.Cleanup(n.remove)
	n.run("ip", "link", "add", n.bridge, "type", "bridge")
	n.run("ip", "addr", "add", n.prefix+"1/24", "dev", n.bridge)
	n.run("ip", "link", "set", n.bridge, "up")
	return n
}

func (n *Net) run(args ...string) {
	n.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// remove deletes the namespaces, their links and the bridge.
func (n *Net) remove() {
	for _, h := range n.hosts {
		_ = exec.Command("ip", "link", "del", h.veth).Run()
		_ = exec.Command("ip", "netns", "del", h.NS).Run()
	}
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
}

// AddHost makes a namespace with its link on the bridge and the next address.
func (n *Net) AddHost(name string) *Host {
	n.t.Helper()
	i := len(n.hosts) + 2
	h := &Host{net: n, Name: name, NS: fmt.Sprintf("q%s-%d", n.id, i), IP: n.prefix + strconv.Itoa(i),
		veth: fmt.Sprintf("qv%s-%d", n.id, i)}
	n.hosts = append(n.hosts, h)
	n.run("ip", "netns", "add", h.NS)
	n.run("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
	n.run("ip", "link", "set", h.veth, "master", n.bridge)
	n.run("ip", "link", "set", h.veth, "up")
	h.run("ip", "link", "set", "lo", "up")
	h.run("ip", "addr", "add", h.IP+"/24", "dev", "eth0")
	h.run("ip", "link", "set", "eth0", "up")
	return h
}

// Wrap is the command prefix that runs a program in the host.
func (h *Host) Wrap() []string { return []string{"ip", "netns", "exec", h.NS} }

func (h *Host) run(args ...string) {
	h.net.t.Helper()
	if err := h.Run(args...); err != nil {
		h.net.t.Fatal(err)
	}
}

// Run runs a command in the host and waits for it.
func (h *Host) Run(args ...string) error {
	argv := append(h.Wrap(), args...)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %s: %w: %s", h.Name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Direction says which packets a Block drops, seen from the host.
type Direction int

// Directions of a Block.
const (
	Both     Direction = iota
	Incoming           // packets from the peer are dropped: the host's requests arrive, their answers never come back
	Outgoing           // packets to the peer are dropped
)

func (d Direction) String() string {
	return [...]string{"both ways", "incoming only", "outgoing only"}[d]
}

func (h *Host) rules(peer *Host, d Direction) [][]string {
	var out [][]string
	if d == Both || d == Incoming {
		out = append(out, []string{"INPUT", "-s", peer.IP, "-j", "DROP"})
	}
	if d == Both || d == Outgoing {
		out = append(out, []string{"OUTPUT", "-d", peer.IP, "-j", "DROP"})
	}
	return out
}

// Block drops the packets between the host and peer in direction d (an
// iptables DROP in the host's namespace: a silent link, no reset).
func (h *Host) Block(peer *Host, d Direction) error {
	for _, r := range h.rules(peer, d) {
		if err := h.Run(append([]string{"iptables", "-w", "-A"}, r...)...); err != nil {
			return err
		}
	}
	return nil
}

// Unblock removes what Block(peer, d) added.
func (h *Host) Unblock(peer *Host, d Direction) error {
	for _, r := range h.rules(peer, d) {
		if err := h.Run(append([]string{"iptables", "-w", "-D"}, r...)...); err != nil {
			return err
		}
	}
	return nil
}

// SetLink takes the host's link down (isolated from every other host) or up.
func (h *Host) SetLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if out, err := exec.Command("ip", "link", "set", h.veth, state).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: link %s: %w: %s", h.Name, state, err, out)
	}
	return nil
}

// StartRedis starts redis-server in the host on port 6379 with extra
// options (e.g. cluster mode, AOF); it is killed by PID when the test ends.
func (h *Host) StartRedis(t testing.TB, args ...string) *RedisProcess {
	t.Helper()
	// Not loopback: protected mode would refuse every other host.
	p := &RedisProcess{t: t, Port: 6379, host: h.IP, wrap: h.Wrap(), args: append([]string{"--protected-mode", "no"}, args...)}
	t.Cleanup(p.Kill) // first: a server that starts but never answers is killed too
	p.Start()
	return p
}

// NewQuotad prepares a quotad in the host listening on its address, port
// 8080 (see testenv.NewQuotad).
func (h *Host) NewQuotad(t testing.TB, env ...string) *Quotad {
	t.Helper()
	return newQuotadAt(t, h.IP+":8080", h.Wrap(), env...)
}

// ClusterNode is a node of a Redis Cluster made by StartClusterIn.
type ClusterNode struct {
	*RedisProcess
	Host *Host
	ID   string // the node's cluster id
}

// StartClusterIn starts a Redis Cluster with one master in each of
// masters and, when replicas is not empty, replicas[i] replicating
// masters[i]; node timeout nodeTimeout, full coverage not required. It
// waits until every node reports the cluster ok and each replica's link to
// its master is up.
func StartClusterIn(t testing.TB, masters, replicas []*Host, nodeTimeout time.Duration, args ...string) (ms, rs []*ClusterNode) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not installed: %v (apt-get install redis-tools)", err)
	}
	start := func(h *Host) *ClusterNode {
		a := append([]string{"--cluster-enabled", "yes", "--dir", t.TempDir(), "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10), "--cluster-require-full-coverage", "no"}, args...)
		p := h.StartRedis(t, a...)
		out, err := exec.Command("redis-cli", "-h", h.IP, "-p", "6379", "cluster", "myid").Output()
		if err != nil {
			t.Fatalf("%s: cluster myid: %v", h.Name, err)
		}
		return &ClusterNode{RedisProcess: p, Host: h, ID: strings.TrimSpace(string(out))}
	}
	var addrs []string
	for _, h := range masters {
		n := start(h)
		ms = append(ms, n)
		addrs = append(addrs, n.Addr())
	}
	create := append([]string{"--cluster", "create"}, addrs...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", create...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for i, h := range replicas {
		n := start(h)
		rs = append(rs, n)
		if out, err := exec.Command("redis-cli", "--cluster", "add-node", n.Addr(), ms[i].Addr(),
			"--cluster-slave", "--cluster-master-id", ms[i].ID).CombinedOutput(); err != nil {
			t.Fatalf("redis-cli --cluster add-node %s: %v\n%s", n.Addr(), err, out)
		}
	}
	all := append(append([]*ClusterNode{}, ms...), rs...)
	for _, n := range all {
		if err := waitRedisInfo(n.Addr(), "cluster info", "cluster_state:ok", 30*time.Second); err != nil {
			t.Fatalf("%s: %v", n.Host.Name, err)
		}
	}
	for _, n := range rs {
		if err := waitRedisInfo(n.Addr(), "info replication", "master_link_status:up", 30*time.Second); err != nil {
			t.Fatalf("%s: %v", n.Host.Name, err)
		}
	}
	return ms, rs
}

// waitRedisInfo waits until `redis-cli cmd` at addr prints want.
func waitRedisInfo(addr, cmd, want string, timeout time.Duration) error {
	host, port, _ := strings.Cut(addr, ":")
	deadline := time.Now().Add(timeout)
	for {
		out, _ := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, strings.Fields(cmd)...)...).Output()
		if strings.Contains(string(out), want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q in %q within %s: %s", addr, want, cmd, timeout, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Role is what ROLE says a Redis node is now ("master", "slave"), or the
// error of asking.
func Role(ctx context.Context, addr string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	v, err := rdb.Do(ctx, "role").Slice()
	if err != nil {
		return "", fmt.Errorf("role of %s: %w", addr, err)
	}
	if len(v) == 0 {
		return "", fmt.Errorf("role of %s: empty reply", addr)
	}
	s, _ := v[0].(string)
	return s, nil
}

// Info returns the INFO section of the Redis at addr.
func Info(ctx context.Context, addr, section string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return "", fmt.Errorf("info %s of %s: %w", section, addr, err)
	}
	return s, nil
}

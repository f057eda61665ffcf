package testutil

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated deployments: the shared test servers have no replicas, so
// tests of replication and failover start their own from the
// redis-server binary, on loopback ports below 45000, each node in a
// t.TempDir(), all killed in t.Cleanup.

var (
	portsMu sync.Mutex
	given   = map[int]bool{}
)

// LowPort returns a loopback port below 45000 that nothing listens on and
// that this process has not handed out before.
func LowPort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := 20000 + rand.IntN(25000)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		given[p] = true
		return p
	}
	t.Fatal("no free loopback port below 45000")
	return 0
}

// needBinaries skips the test outside the fault tier, and when a binary is
// missing, or fails it then under REDEQ_REQUIRE_SERVER.
func needBinaries(t testing.TB, names ...string) {
	t.Helper()
	FaultTier(t)
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv(RequireServerEnv) != "" {
				t.Fatalf("%s not found and %s is set", name, RequireServerEnv)
			}
			t.Skipf("%s not installed; .ci/run installs it", name)
		}
	}
}

// startLow starts redis-server on a port from LowPort.
func startLow(t testing.TB, args ...string) *Server {
	t.Helper()
	s := &Server{t: t, Dir: t.TempDir(), args: args}
	s.startOnFreePort(LowPort)
	t.Cleanup(s.Kill)
	return s
}

// Pair is a master and its replica.
type Pair struct {
	Master, Replica *Server
}

// StartPair starts a master and a replica of it, both with args, and
// returns once the replica is in sync.
func StartPair(t testing.TB, args ...string) *Pair {
	t.Helper()
	needBinaries(t, "redis-server")
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	m := startLow(t, args...)
	r := startLow(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(m.Port)}, args...)...)
	p := &Pair{Master: m, Replica: r}
	for start := time.Now(); !linkUp(r.Addr) || !replicasOnline(m.Addr, 1); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("replica %s not in sync with master %s after 30 s\nreplica's log:\n%s\nmaster's log:\n%s",
				r.Addr, m.Addr, r.logTail(), m.logTail())
		}
	}
	return p
}

// linkUp reports whether the replica at addr is connected to its master
// and done with the initial sync.
func linkUp(addr string) bool {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "replication").Result()
	return err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1")
}

// replicasOnline reports whether n replicas of the master at addr
// acknowledge a write within 100 ms. After a diskless sync a master
// streams writes to a replica, and WAIT counts it, only from the replica's
// first REPLCONF ACK, up to a second after both report the link up. The
// write leaves no key; in a cluster it uses a key of the node's own slots.
func replicasOnline(addr string, n int) bool {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1}) // WAIT counts this connection's writes
	defer c.Close()
	ctx := context.Background()
	for i := range 1000 {
		key := "testutil:in-sync:" + strconv.Itoa(i)
		err := c.Set(ctx, key, "1", 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "MOVED") {
			continue
		}
		if err != nil || c.Del(ctx, key).Err() != nil {
			return false
		}
		got, err := c.Do(ctx, "WAIT", n, 100).Int()
		return err == nil && got >= n
	}
	return false
}

// ReplCluster is a Redis Cluster of masters with one replica each.
type ReplCluster struct {
	Nodes []*Server
	Addrs []string
}

// beforeCreate, when set, runs before each redis-cli --cluster create of
// StartCluster (tests of StartCluster set it).
var beforeCreate func(*ReplCluster)

// StartCluster starts a cluster of masters masters with one replica each
// (redis-cli --cluster create --cluster-replicas 1), with the given
// cluster-node-timeout, and returns once every node sees the cluster ok
// and every replica is in sync. A killed node started again with Start
// keeps its nodes.conf and rejoins.
func StartCluster(t testing.TB, masters int, nodeTimeout time.Duration) *ReplCluster {
	t.Helper()
	needBinaries(t, "redis-server", "redis-cli")
	var c *ReplCluster
	for attempt := 1; ; attempt++ {
		c = &ReplCluster{}
		for range 2 * masters {
			// The bus port is named: port+10000 may be taken or above 45000.
			n := startLow(t, "--repl-diskless-sync-delay", "0", "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(LowPort(t)),
				"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", strconv.Itoa(int(nodeTimeout.Milliseconds())))
			c.Nodes = append(c.Nodes, n)
			c.Addrs = append(c.Addrs, n.Addr)
		}
		if beforeCreate != nil {
			beforeCreate(c)
		}
		args := append([]string{"--cluster", "create"}, c.Addrs...)
		out, err := exec.Command("redis-cli", append(args, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
		if err == nil {
			break
		}
		// Test binaries run side by side and start servers of their own:
		// a node may have lost its port, or its process, since it started.
		// Such a cluster is started again on other ports; any other
		// failure is the test's.
		lost := c.lost()
		if len(lost) == 0 || attempt == 3 {
			t.Fatalf("redis-cli --cluster create: %v\n%s\nnodes no longer the process started there: %v\n%s", err, out, lost, c.logs())
		}
		t.Logf("redis-cli --cluster create: %v: %v no longer the process started there; the cluster starts again on other ports\n%s", err, lost, out)
		for _, n := range c.Nodes {
			n.Kill()
		}
	}
	EventuallyEvery(t, 60*time.Second, 50*time.Millisecond, "cluster ok, every replica in sync", func() bool {
		replicas := 0
		for _, n := range c.Nodes {
			role, ok := c.state(n.Addr)
			if !ok {
				return false
			}
			switch role {
			case "slave":
				if !linkUp(n.Addr) {
					return false
				}
				replicas++
			case "master":
				if !replicasOnline(n.Addr, 1) {
					return false
				}
			}
		}
		return replicas == masters
	})
	return c
}

// lost lists the nodes whose address no longer answers as the
// cluster-enabled process started there.
func (c *ReplCluster) lost() []string {
	var out []string
	for _, n := range c.Nodes {
		if !n.clusterNode() {
			out = append(out, n.Addr)
		}
	}
	return out
}

// logs is the tail of every node's log.
func (c *ReplCluster) logs() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "%s's log:\n%s\n", n.Addr, n.logTail())
	}
	return b.String()
}

// state returns the role of the node at addr and whether it sees the
// cluster ok.
func (c *ReplCluster) state(addr string) (role string, ok bool) {
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	ctx := context.Background()
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		return "", false
	}
	r, err := cl.Do(ctx, "ROLE").Slice()
	if err != nil || len(r) == 0 {
		return "", false
	}
	role, _ = r[0].(string)
	return role, true
}

// Node returns the node listening on addr, nil if none.
func (c *ReplCluster) Node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// ReplicaOf returns the replica of the master at addr, nil if none.
func (c *ReplCluster) ReplicaOf(addr string) *Server {
	ctx := context.Background()
	m := redis.NewClient(&redis.Options{Addr: addr})
	id, err := m.Do(ctx, "CLUSTER", "MYID").Text()
	m.Close()
	if err != nil {
		return nil
	}
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		nodes, err := cl.ClusterNodes(ctx).Result()
		cl.Close()
		if err == nil && strings.Contains(nodes, "myself,slave "+id) {
			return n
		}
	}
	return nil
}

// InSync reports whether the node at addr is a replica done with its
// sync from its master.
func (c *ReplCluster) InSync(addr string) bool { return linkUp(addr) }

// Promoted reports whether the node at addr is a master and every other
// live node sees the cluster ok.
func (c *ReplCluster) Promoted(addr string, down *Server) bool {
	if role, ok := c.state(addr); !ok || role != "master" {
		return false
	}
	for _, n := range c.Nodes {
		if n == down {
			continue
		}
		if _, ok := c.state(n.Addr); !ok {
			return false
		}
	}
	return true
}

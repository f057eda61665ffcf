package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestClusterFailover: a 3-master + 3-replica cluster; under load, one
// master hands over to its replica with CLUSTER FAILOVER. Every job runs.
func TestClusterFailover(t *testing.T) {
	var nodes []*testutil.Server
	for range 6 {
		// The bus port is named: port+10000 may be taken or out of range.
		nodes = append(nodes, testutil.StartServer(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(testutil.FreePort(t)), "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000", "--appendonly", "yes"))
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found: %v", err)
	}
	args := []string{"--cluster", "create"}
	var addrs []string
	for _, n := range nodes {
		args = append(args, n.Addr)
		addrs = append(addrs, n.Addr)
	}
	out, err := exec.Command("redis-cli", append(args, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, string(out))
	ctx := context.Background()
	testutil.Eventually(t, 30*time.Second, "cluster ok with 3 replicas", func() bool {
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		c := redis.NewClient(&redis.Options{Addr: nodes[0].Addr})
		defer c.Close()
		shards, err := c.ClusterNodes(ctx).Result()
		return err == nil && strings.Count(shards, "slave") == 3
	})

	cfg := testutil.Config(t)
	cfg.Concurrency = 8
	newClient := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		return c
	}
	ran := newTally()
	var mu sync.Mutex
	var clients []*redeq.Client
	for range 2 {
		c, err := redeq.New(newClient(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		startWith(t, c, newListener("orders", ran.handle))
		clients = append(clients, c)
	}

	// The master of bucket 0 hands over to its replica while jobs flow.
	admin := newClient()
	master, err := admin.MasterForKey(ctx, keys.ForBucket(cfg.Prefix, "orders", 0).Pool())
	require.NoError(t, err)
	masterID, err := master.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	var replica string
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		role, _ := c.Do(ctx, "ROLE").Slice()
		info, _ := c.Do(ctx, "CLUSTER", "NODES").Text()
		c.Close()
		if len(role) > 0 && role[0] == "slave" && strings.Contains(info, "myself,slave "+masterID) {
			replica = n.Addr
		}
	}
	require.NotEmpty(t, replica, "replica of %s", master.Options().Addr)

	const n = 1500
	job := func(i int) *redeq.Job {
		return &redeq.Job{Topic: "orders", ID: fmt.Sprint(i), Delay: time.Duration(i%100) * 10 * time.Millisecond}
	}
	added := make(chan struct{})
	var addErrs []error
	var failed []int
	// On a loaded machine the cluster itself may report cluster_state:fail
	// for a moment during the failover, and every node then refuses writes
	// with CLUSTERDOWN: no client can write then. The watch notes it, so
	// that the test tells such a moment from a failover that fails Adds.
	var down atomic.Bool
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		var cs []*redis.Client
		for _, nd := range nodes {
			cs = append(cs, redis.NewClient(&redis.Options{Addr: nd.Addr}))
		}
		defer func() {
			for _, c := range cs {
				c.Close()
			}
		}()
		for {
			select {
			case <-added:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, c := range cs {
				if info, err := c.ClusterInfo(ctx).Result(); err == nil && strings.Contains(info, "cluster_state:fail") {
					down.Store(true)
				}
			}
		}
	}()
	go func() {
		defer close(added)
		for i := range n {
			err := clients[i%2].Add(ctx, job(i))
			if err != nil {
				mu.Lock()
				addErrs = append(addErrs, err)
				failed = append(failed, i)
				mu.Unlock()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	rc := redis.NewClient(&redis.Options{Addr: replica})
	defer rc.Close()
	// A manual failover gives up after 5s if the replica cannot catch up
	// in time (a loaded machine): ask again until it is done.
	promoted := func() bool {
		role, err := rc.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	}
	asks := 0
	for deadline := time.Now().Add(60 * time.Second); !promoted() && time.Now().Before(deadline); {
		require.NoError(t, rc.Do(ctx, "CLUSTER", "FAILOVER").Err())
		asks++
		for wait := time.Now().Add(6 * time.Second); !promoted() && time.Now().Before(wait); {
			time.Sleep(50 * time.Millisecond)
		}
	}
	require.True(t, promoted(), "replica promoted after %d CLUSTER FAILOVER", asks)
	<-added
	<-watchDone
	mu.Lock()
	if down.Load() {
		// Only the cluster's own refusals, while it said it was down:
		// CLUSTERDOWN, or a MOVED that go-redis still had after its
		// redirects while the slots moved back and forth; the service
		// adds those jobs again, and every job must run once.
		for _, err := range addErrs {
			if !strings.Contains(err.Error(), "MOVED") {
				require.ErrorContains(t, err, "CLUSTERDOWN", "the only Add errors while the cluster reported itself down")
			}
		}
		for _, i := range failed {
			testutil.Eventually(t, 10*time.Second, "a failed Add succeeds again", func() bool {
				err := clients[0].Add(ctx, job(i))
				return err == nil || errors.Is(err, redeq.ErrJobExists)
			})
		}
		t.Logf("the cluster reported cluster_state:fail during the failover; %d Adds failed with CLUSTERDOWN or MOVED and were added again", len(failed))
	} else {
		require.Empty(t, addErrs, "a coordinated failover pauses writes, it does not fail them")
	}
	mu.Unlock()
	testutil.Eventually(t, 60*time.Second, "every job ran", func() bool { return ran.distinct() == n })
	testutil.Eventually(t, 10*time.Second, "pool empty", func() bool { return stats(t, clients[0], "orders").Pool == 0 })
	t.Logf("failover of %s to %s under load: %d jobs, lost 0, duplicates %d", master.Options().Addr, replica, n, ran.extra())
}

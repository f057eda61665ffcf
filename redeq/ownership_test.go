package redeq_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// clusterMasters lists the addresses of the masters of the cluster rdb
// reaches.
func clusterMasters(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	var out []string
	for _, s := range slots {
		if a := s.Nodes[0].Addr; !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// masterOf returns the address of the master holding key (or channel).
func masterOf(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	return nodeOf(t, rdb, key)
}

// spareMaster looks for a prefix under which one master of the cluster
// holds none of the keys a client needs whatever its buckets (the fleet,
// the topic set, the wake channel, and the keys of each topic of
// needed), and returns the prefix and that master. avoid lists further
// keys, made from the prefix, that must not live on it.
func spareMaster(t *testing.T, rdb redis.UniversalClient, needed []string, avoid func(prefix string) []string) (string, string) {
	t.Helper()
	masters := clusterMasters(t, rdb)
	for range 500 {
		prefix := testutil.Prefix(t)
		ks := []string{keys.Movers(prefix), keys.Topics(prefix), keys.Retired(prefix), keys.WakeChannel(prefix),
			keys.ReadyChannel(prefix), keys.Alive(prefix)}
		for _, topic := range needed {
			ks = append(ks, keys.ForTopic(prefix, topic).Meta())
		}
		if avoid != nil {
			ks = append(ks, avoid(prefix)...)
		}
		used := map[string]bool{}
		for _, k := range ks {
			used[masterOf(t, rdb, k)] = true
		}
		for _, m := range masters {
			if !used[m] {
				return prefix, m
			}
		}
	}
	t.Fatal("no prefix leaves a master free of the fleet's keys")
	return "", ""
}

// refusing is a cluster client of addrs whose dialer refuses every
// connection to the node at refused, as a partition between this client
// and that node would.
func refusing(t *testing.T, addrs []string, refused string) *redis.ClusterClient {
	t.Helper()
	var d net.Dialer
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == refused {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOwnerCutOffFromMasterHandsItsBucketsOver: a client that cannot
// reach one master of the cluster (client A) stops claiming the buckets
// that live there, and a client that reaches every master (client B)
// moves them: every job runs soon after it is due, though A keeps
// announcing itself and owns its share of the other buckets.
func TestOwnerCutOffFromMasterHandsItsBucketsOver(t *testing.T) {
	be := testutil.Cluster(t)
	probe := be.New(t)
	const topic = "t"
	prefix, cut := spareMaster(t, probe, []string{topic}, nil)
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	cfg.Concurrency = 16
	e := setup(t, be, cfg)
	ctx := context.Background()
	onCut := 0
	for _, n := range bucketNodes(t, e, topic, cfg.Concurrency) {
		if n == cut {
			onCut++
		}
	}
	require.Positive(t, onCut, "no bucket on the master A cannot reach")

	a, err := redeq.New(refusing(t, be.Addrs, cut), e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	require.NoError(t, a.Start(ctx))
	var runs jobRuns
	l := newListener(topic, runs.handler(0))
	l.workers = 8
	startWith(t, e.c, l)
	waitFor(t, 5*time.Second, "both clients announced", func() bool {
		return e.rdb.ZCard(ctx, keys.Movers(prefix)).Val() == 2
	})

	const jobs = 64
	for i := range jobs {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("j", i), Delay: time.Second}))
	}
	// Due in 1 s; then UnreachableAfter (3 scans) and two announcements
	// pass before B moves what A could not.
	waitFor(t, time.Second+40*cfg.ScanInterval, "every job ran", func() bool { return runs.ranAll("j", jobs, nil) })
	for id, r := range runs.snapshot() {
		require.Len(t, r, 1, "job %s ran more than once", id)
	}
	require.EqualValues(t, 2, e.rdb.ZCard(ctx, keys.Movers(prefix)).Val(), "A stopped announcing")
}

// TestMoverWorksBesideTopicOnDeadMaster: a client started while one
// master of the cluster is down (cluster-require-full-coverage no, and
// no replica takes over) moves the topics it can read: a topic recorded
// earlier whose meta lives on the dead master holds up nothing but its
// own jobs, and a job of another topic, all of whose keys live on the
// healthy masters, runs as soon as it is due.
func TestMoverWorksBesideTopicOnDeadMaster(t *testing.T) {
	cl := testutil.StartCluster(t, 3, time.Second)
	ctx := context.Background()
	for _, addr := range cl.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		require.NoError(t, n.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err())
		require.NoError(t, n.ConfigSet(ctx, "cluster-replica-no-failover", "yes").Err())
		n.Close()
	}
	be := clusterBackend(cl.Addrs, false)
	probe := be.New(t)
	// t1 has its meta on the master to be killed; t2 has none of its
	// keys there.
	var t1, t2 string
	prefix, dead := spareMaster(t, probe, nil, nil)
	for i := 0; t1 == "" || t2 == ""; i++ {
		require.Less(t, i, 1000, "no topic names fit")
		name := fmt.Sprint("t", i)
		meta, bucket := masterOf(t, probe, keys.ForTopic(prefix, name).Meta()), masterOf(t, probe, keys.ForBucket(prefix, name, 0).Pool())
		switch {
		case t1 == "" && meta == dead:
			t1 = name
		case t2 == "" && meta != dead && bucket != dead:
			t2 = name
		}
	}
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: t1, ID: "earlier", Delay: time.Hour}))
	cl.Node(dead).Kill()

	c, err := redeq.New(be.New(t), e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	l := newListener(t2, nil)
	startWith(t, c, l)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: t2, ID: "now"}))
	waitFor(t, 50*cfg.ScanInterval, "the job of the healthy topic ran", func() bool { return l.count() > 0 })
}

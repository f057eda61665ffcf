package redeq_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestDownMasterHoldsUpOnlyItsJobs: a client started while one master of
// the cluster is down (cluster-require-full-coverage no, no failover)
// starts, and moves and delivers, promptly, the jobs of every topic whose
// keys live on the healthy masters, whichever master is down. With the
// default prefix every master holds one of the fleet's shared keys: the
// one of slots 0-5460 the movers' set, the one of 5461-10922 the
// notification channels (redeq:wake, redeq:ready), the one of 10923-16383
// the alive set and the topic set.
func TestDownMasterHoldsUpOnlyItsJobs(t *testing.T) {
	testutil.FaultTier(t)
	for down := range 3 {
		t.Run(fmt.Sprint("slots", []string{"0-5460", "5461-10922", "10923-16383"}[down]), func(t *testing.T) {
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
			dead := mastersBySlot(t, probe)[down]
			cfg := testutil.Config(t)
			cfg.Prefix = "redeq" // the default: a private cluster
			var shared []string
			for name, k := range map[string]string{"movers": keys.Movers(cfg.Prefix), "alive": keys.Alive(cfg.Prefix),
				"topics": keys.Topics(cfg.Prefix), "wake": keys.WakeChannel(cfg.Prefix), "ready": keys.ReadyChannel(cfg.Prefix)} {
				if masterOf(t, probe, k) == dead {
					shared = append(shared, name)
				}
			}
			slices.Sort(shared)
			t.Logf("the down master holds %v", shared)
			const topics = 12
			healthy := map[string]bool{}
			for i := range topics {
				name := fmt.Sprint("t", i)
				healthy[name] = masterOf(t, probe, keys.ForTopic(cfg.Prefix, name).Meta()) != dead &&
					masterOf(t, probe, keys.ForBucket(cfg.Prefix, name, 0).Pool()) != dead
			}
			e := setup(t, be, cfg)
			for i := range topics {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: fmt.Sprint("t", i), ID: "before", Delay: 3 * time.Second}))
			}
			cl.Node(dead).Kill()

			c, err := redeq.New(be.New(t), e.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			var mu sync.Mutex
			ran := map[string]bool{}
			for name, ok := range healthy {
				if !ok {
					continue
				}
				require.NoError(t, c.Register(redeq.ListenerFunc(name, func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
					mu.Lock()
					ran[j.Topic+"/"+j.ID] = true
					mu.Unlock()
					ch.Ack()
					return nil
				})))
			}
			require.NoError(t, c.Start(ctx), "start while master %s is down", dead)
			for name, ok := range healthy {
				if ok {
					require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: name, ID: "after"}))
				}
			}
			start := time.Now()
			waitEvery(t, 3*time.Second+60*cfg.ScanInterval, 50*time.Millisecond, "every healthy topic's jobs ran", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for name, ok := range healthy {
					if ok && (!ran[name+"/before"] || !ran[name+"/after"]) {
						return false
					}
				}
				return true
			})
			t.Logf("master %s down: healthy topics' jobs ran within %v", dead, time.Since(start))
		})
	}
}

// mastersBySlot lists the cluster's masters in the order of their slots.
func mastersBySlot(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	var out []string
	for _, s := range slots {
		if a := s.Nodes[0].Addr; !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// TestDownMasterHoldsUpOnlyItsBuckets: with the fleet's shared keys on the
// healthy masters, a client started while one master is down runs
// promptly every job whose bucket and topic meta live on healthy masters,
// in topics of 16 buckets spread over every master, whether or not it
// also listens to a topic whose meta is on the down master.
func TestDownMasterHoldsUpOnlyItsBuckets(t *testing.T) {
	testutil.FaultTier(t)
	for _, alsoDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("listens_to_a_down_topic=%v", alsoDown), func(t *testing.T) {
			downMasterBuckets(t, alsoDown)
		})
	}
}

func downMasterBuckets(t *testing.T, alsoDown bool) {
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
	prefix, dead := spareMaster(t, probe, nil, nil)
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	cfg.Concurrency = 16
	const topics = 6
	e := setup(t, be, cfg)
	healthy := map[string]bool{} // topic/id -> its bucket and meta are on healthy masters
	for i := range topics {
		name := fmt.Sprint("t", i)
		metaOK := masterOf(t, probe, keys.ForTopic(prefix, name).Meta()) != dead
		for j := range 40 {
			id := fmt.Sprint("j", j)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: name, ID: id, Delay: 2 * time.Second}))
			healthy[name+"/"+id] = metaOK && masterOf(t, probe, keys.ForBucket(prefix, name, bucketOf(id, 16)).Pool()) != dead
		}
	}
	cl.Node(dead).Kill()
	c, err := redeq.New(be.New(t), e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	var mu sync.Mutex
	ran := map[string]bool{}
	for i := range topics {
		name := fmt.Sprint("t", i)
		if !alsoDown && masterOf(t, probe, keys.ForTopic(prefix, name).Meta()) == dead {
			continue
		}
		require.NoError(t, c.Register(redeq.ListenerFunc(name, func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
			mu.Lock()
			ran[j.Topic+"/"+j.ID] = true
			mu.Unlock()
			ch.Ack()
			return nil
		})))
	}
	require.NoError(t, c.Start(ctx), "start while master %s is down", dead)
	start := time.Now()
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for k, ok := range healthy {
			if ok && !ran[k] {
				out = append(out, k)
			}
		}
		return out
	}
	waitEvery(t, 2*time.Second+60*cfg.ScanInterval, 50*time.Millisecond, "every job of a healthy bucket ran", func() bool { return len(missing()) == 0 })
	t.Logf("ran within %v", time.Since(start))
}

package redeq_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func redisZAt(member string, ms int64) redis.Z { return redis.Z{Score: float64(ms), Member: member} }

// find returns the consumer of id in cs.
func find(t *testing.T, cs []redeq.ConsumerInfo, id string) redeq.ConsumerInfo {
	t.Helper()
	for _, c := range cs {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("consumer %s not listed in %+v", id, cs)
	return redeq.ConsumerInfo{}
}

// TestConsumersShowWhoHoldsWhat: Consumers names each running consumer by
// its client name (the host name by default), host and pid, with when it
// started and last heartbeat, its topics, and the deliveries it holds,
// longest running first; a consumer that shut down is no longer listed.
func TestConsumersShowWhoHoldsWhat(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		host, err := os.Hostname()
		require.NoError(t, err)
		named := e.another(t, func(c *config.Config) { c.ClientName = "billing-7" })
		l, runs := holdingListener("a")
		startWith(t, named, l, newListener("b", nil))
		plain := e.another(t, nil)
		startWith(t, plain, newListener("c", nil))

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "a", ID: "first"}))
		h1 := next(t, runs, "first")
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "a", ID: "second"}))
		h2 := next(t, runs, "second")

		before := time.Now()
		cs, err := e.c.Consumers(ctx)
		require.NoError(t, err)
		require.Len(t, cs, 2)
		got := find(t, cs, named.ConsumerID())
		require.Equal(t, "billing-7", got.Name)
		require.Equal(t, host, got.Host)
		require.Equal(t, os.Getpid(), got.PID)
		require.Equal(t, []string{"a", "b"}, got.Topics)
		require.Equal(t, e.cfg.ConsumerTimeout, got.Timeout)
		require.False(t, got.Silent)
		require.False(t, got.Started.IsZero())
		require.False(t, got.LastHeartbeat.Before(got.Started), "started %v, heartbeat %v", got.Started, got.LastHeartbeat)
		require.WithinDuration(t, before, got.LastHeartbeat, time.Minute)
		require.EqualValues(t, 2, got.InFlight)
		require.Len(t, got.Running, 2)
		require.Equal(t, "first", got.Running[0].ID, "longest running first")
		require.Equal(t, "second", got.Running[1].ID)
		for _, r := range got.Running {
			require.Equal(t, "a", r.Topic)
			require.False(t, r.Since.Before(got.Started), r.ID)
			require.WithinDuration(t, before, r.Since, time.Minute, r.ID)
		}
		other := find(t, cs, plain.ConsumerID())
		require.Equal(t, host, other.Name, "the host name by default")
		require.Equal(t, []string{"c"}, other.Topics)
		require.Zero(t, other.InFlight)
		require.Empty(t, other.Running)

		close(h1.done)
		close(h2.done)
		require.NoError(t, named.Shutdown(ctx))
		cs, err = e.c.Consumers(ctx)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.Equal(t, plain.ConsumerID(), cs[0].ID)
	})
}

// TestConsumersShowSilentOnes: a consumer whose last heartbeat is older
// than its timeout, which a reaper has not yet forgotten, is listed as
// silent with what it still holds; one written by a client that records
// no info (an older version) is listed with its id and topics alone; a
// recorded info that is not valid JSON, or holds control characters, is
// not shown as it is.
func TestConsumersShowSilentOnes(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		alive, topics := keys.Alive(e.cfg.Prefix), keys.AliveTopics(e.cfg.Prefix)
		old := time.Now().Add(-time.Hour).UnixMilli()
		for _, cid := range []string{"gone", "legacy", "garbled"} {
			require.NoError(t, e.rdb.ZAdd(ctx, alive, redisZAt(cid, old)).Err())
			require.NoError(t, e.rdb.HSet(ctx, topics, cid, keys.Address("t", 1), keys.AliveTimeout(cid), 15000).Err())
		}
		require.NoError(t, e.rdb.HSet(ctx, topics, keys.AliveInfo("gone"), `{"name":"web-1","host":"pod-9","pid":42}`).Err())
		require.NoError(t, e.rdb.HSet(ctx, topics, keys.AliveInfo("garbled"), `{"name":"x\u001b[31mred","host":`).Err())
		require.NoError(t, e.rdb.ZAdd(ctx, keys.ForBucket(e.cfg.Prefix, "t", 0).InFlight("gone"), redisZAt("7:job-1", old+5)).Err())

		cs, err := e.c.Consumers(ctx)
		require.NoError(t, err)
		require.Len(t, cs, 3)
		gone := find(t, cs, "gone")
		require.True(t, gone.Silent)
		require.Equal(t, "web-1", gone.Name)
		require.Equal(t, "pod-9", gone.Host)
		require.Equal(t, 42, gone.PID)
		require.EqualValues(t, 1, gone.InFlight)
		require.Len(t, gone.Running, 1)
		require.Equal(t, redeq.RunningJob{Topic: "t", ID: "job-1", Since: time.UnixMilli(old + 5), For: gone.Running[0].For}, gone.Running[0])
		require.InDelta(t, time.Hour.Seconds(), gone.Running[0].For.Seconds(), 60, "by the server's clock")
		require.InDelta(t, time.Hour.Seconds(), gone.HeartbeatAge.Seconds(), 60)
		legacy := find(t, cs, "legacy")
		require.True(t, legacy.Silent)
		require.Empty(t, legacy.Name)
		require.Equal(t, []string{"t"}, legacy.Topics)
		garbled := find(t, cs, "garbled")
		require.Empty(t, garbled.Name, "not valid JSON")

		require.NoError(t, e.rdb.HSet(ctx, topics, keys.AliveInfo("garbled"), `{"name":"x\u001b[31mred","host":"h","pid":1}`).Err())
		cs, err = e.c.Consumers(ctx)
		require.NoError(t, err)
		require.False(t, strings.ContainsRune(find(t, cs, "garbled").Name, 0x1b), "no control character reaches a terminal")
	})
}

// TestReapedConsumerLeavesNoInfo: once a reaper forgets a dead consumer,
// its info goes with its other fields, and Consumers no longer lists it.
func TestReapedConsumerLeavesNoInfo(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		alive, topics := keys.Alive(e.cfg.Prefix), keys.AliveTopics(e.cfg.Prefix)
		old := time.Now().Add(-time.Hour).UnixMilli()
		require.NoError(t, e.rdb.ZAdd(ctx, alive, redisZAt("dead", old)).Err())
		require.NoError(t, e.rdb.HSet(ctx, topics, "dead", keys.Address("t", e.cfg.Concurrency), keys.AliveTimeout("dead"), 1000,
			keys.AliveInfo("dead"), `{"name":"web-1","host":"pod-9","pid":42}`).Err())
		startWith(t, e.c, newListener("t", nil))
		testutil.Eventually(t, 20*time.Second, "the dead consumer forgotten", func() bool {
			return e.rdb.HExists(ctx, topics, keys.AliveInfo("dead")).Val() == false
		})
		require.Equal(t, redis.Nil, e.rdb.ZScore(ctx, alive, "dead").Err())
		cs, err := e.c.Consumers(ctx)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.Equal(t, e.c.ConsumerID(), cs[0].ID)
	})
}

// TestOperatorReadsAnswerBesideAHungMasterTheyDoNotRead: on a Redis
// Cluster, Consumers, ServerTime and Schedules read the server's clock on
// the node of the key they read (the alive set, the schedule index), so a
// hung master that holds none of those keys does not hold them up.
func TestOperatorReadsAnswerBesideAHungMasterTheyDoNotRead(t *testing.T) {
	testutil.FaultTier(t) // a private proxy, and calls that wait for timeouts when they fail
	be := testutil.Cluster(t)
	probe := be.New(t)
	var prefix, hung string
	for hung == "" {
		prefix = testutil.Prefix(t)
		used := map[string]bool{masterOf(t, probe, keys.Alive(prefix)): true, masterOf(t, probe, keys.Schedules(prefix)): true}
		for _, m := range clusterMasters(t, probe) {
			if !used[m] {
				hung = m
			}
		}
	}
	rdb, hang := hangByProxy(t, be.Addrs, hung)
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	c, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.Consumers(ctx) // the cluster's topology read while every node answers
	require.NoError(t, err)
	hang()
	for i := range 12 {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Consumers(cctx)
		require.NoError(t, err, "Consumers, call %d, beside the hung master %s", i, hung)
		_, err = c.ServerTime(cctx)
		require.NoError(t, err, "ServerTime, call %d", i)
		_, err = c.Schedules(cctx)
		require.NoError(t, err, "Schedules, call %d", i)
		cancel()
	}
}

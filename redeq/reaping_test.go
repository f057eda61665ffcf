package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// mortal is a consumer client whose heartbeats can be made to fail (it
// is dead as far as Redis can tell) and whose fetches can be held on the
// way to the server (a network that delays them, a process stopped
// between its check of the heartbeat and the write of the fetch).
type mortal struct {
	c       *redeq.Client
	l       *listener
	dead    atomic.Bool
	hold    atomic.Bool
	held    chan struct{} // closed when the first held fetch waits
	release chan struct{} // closing it lets held fetches through
}

func newMortal(t *testing.T, e *env, topic string) *mortal {
	t.Helper()
	m := &mortal{held: make(chan struct{}), release: make(chan struct{})}
	hb := newScriptHook(t, "consumer/heartbeat.lua")
	hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		if m.dead.Load() {
			cmd.SetErr(errors.New("dead"))
			return cmd.Err()
		}
		return next()
	})
	var once atomic.Bool
	fetch := newScriptHook(t, "ready/fetch.lua")
	fetch.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		if m.hold.Load() {
			if once.CompareAndSwap(false, true) {
				close(m.held)
			}
			select {
			case <-m.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next()
	})
	rdb := e.be.New(t)
	rdb.AddHook(hb)
	rdb.AddHook(cutLeases(t, &m.dead))
	// A dead consumer settles nothing either: what it holds comes back
	// only by recovery.
	settles := testutil.HookScript(testutil.LoadScript(t, "../ack/settle.lua"))
	settles.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
		if !m.dead.Load() {
			return next()
		}
		err := errors.New("dead")
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	})
	rdb.AddHook(settles)
	rdb.AddHook(fetch)
	c, err := redeq.New(rdb, e.cfg)
	require.NoError(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		_ = c.Shutdown(context.Background())
	})
	m.c = c
	m.l = blockingListener(topic, stop)
	startWith(t, c, m.l)
	return m
}

// inFlightBucket returns the bucket of topic where consumer cid holds a
// delivery, or -1.
func inFlightBucket(t *testing.T, e *env, topic, cid string) int {
	t.Helper()
	for b := range config.MaxConcurrency {
		n, err := e.rdb.ZCard(context.Background(), keys.ForBucket(e.cfg.Prefix, topic, b).InFlight(cid)).Result()
		require.NoError(t, err)
		if n > 0 {
			return b
		}
	}
	return -1
}

// TestFetchLandingAfterDeclarationRecovered: a consumer checks that its
// last heartbeat is recent and sends a fetch; the fetch is delayed on the
// way (a slow network, the process stopped just before the write) and
// reaches the bucket after a reaper declared the consumer dead (and, as it
// held nothing, forgot it). The consumer then dies without another
// heartbeat. Its delivery is newer than the declaration, or belongs to a
// consumer no longer in the alive set: the job must still run again.
func TestFetchLandingAfterDeclarationRecovered(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing
		m := newMortal(t, e, "t")

		m.hold.Store(true)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		select {
		case <-m.held:
		case <-time.After(10 * time.Second):
			t.Fatal("no fetch")
		}
		m.dead.Store(true) // from now on silent
		// A reaper declares it dead, and at once forgets it when it holds
		// nothing: either way the fetch that lands now is "after".
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout, "silent or forgotten", func() bool {
			s, err := e.rdb.ZScore(ctx, keys.Alive(e.cfg.Prefix), m.c.ConsumerID()).Result()
			if !errors.Is(err, redis.Nil) {
				require.NoError(t, err)
			}
			return err != nil || s < float64(time.Now().Add(-e.cfg.ConsumerTimeout).UnixMilli())
		})
		time.Sleep(e.cfg.ConsumerTimeout / 2) // reapers looked since
		m.hold.Store(false)
		close(m.release) // the fetch lands
		// Its reply comes after the delivery's lease may have lapsed, so
		// no handler runs it; the job is in flight until recovered.
		testutil.Eventually(t, 10*time.Second, "the fetch lands", func() bool { return state(t, e.c, "t", "j") == redeq.StateInFlight })
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered", func() bool {
			return state(t, e.c, "t", "j") == redeq.StateReady
		})
	})
}

// TestBucketClockAheadStillRecovered: keys in different slots live on
// different nodes with their own clocks. A consumer fetches a job on a
// node whose clock runs one ConsumerTimeout ahead of the alive set's node
// and dies right after. The delivery's fetch time, by the bucket node's
// clock, is later than the reaper's declaration by the alive node's
// clock; the job must still run again.
func TestBucketClockAheadStillRecovered(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing
		m := newMortal(t, e, "t")
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 10*time.Second, "fetched", func() bool { return m.l.count() == 1 })
		m.dead.Store(true)
		b := inFlightBucket(t, e, "t", m.c.ConsumerID())
		require.GreaterOrEqual(t, b, 0)
		// What the bucket node wrote, had its clock been ConsumerTimeout ahead.
		k := keys.ForBucket(e.cfg.Prefix, "t", b).InFlight(m.c.ConsumerID())
		zs, err := e.rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		require.NoError(t, err)
		for _, z := range zs {
			z.Score += float64(e.cfg.ConsumerTimeout.Milliseconds())
			require.NoError(t, e.rdb.ZAddXX(ctx, k, z).Err())
		}
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered", func() bool {
			return state(t, e.c, "t", "j") == redeq.StateReady
		})
	})
}

// TestManyStuckSilentConsumersDoNotStarveOthers: a pass reads at most 100
// silent consumers, oldest heartbeat first. When 100 of them cannot be
// finished (each holds a delivery newer than its declaration, as the two
// tests above leave behind; or its topic's node is down), a consumer that
// dies afterwards must still have its job run again.
func TestManyStuckSilentConsumersDoNotStarveOthers(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing
		m := newMortal(t, e, "t")
		for i := range 100 {
			cid := fmt.Sprintf("stuck-%03d", i)
			require.NoError(t, e.rdb.ZAdd(ctx, keys.Alive(e.cfg.Prefix), redis.Z{Score: float64(1000 + i), Member: cid}).Err())
			require.NoError(t, e.rdb.HSet(ctx, keys.AliveTopics(e.cfg.Prefix), cid, keys.Address("t", e.cfg.Concurrency)).Err())
			require.NoError(t, e.rdb.ZAdd(ctx, keys.ForBucket(e.cfg.Prefix, "t", 0).InFlight(cid), redis.Z{Score: 3000, Member: "1:gone"}).Err())
		}
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 10*time.Second, "fetched", func() bool { return m.l.count() == 1 })
		m.dead.Store(true)
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered", func() bool {
			return state(t, e.c, "t", "j") == redeq.StateReady
		})
	})
}

// TestLostTopicMetaStrandsNothing: a failover of a new topic's node loses
// its meta (the bucket count, written once at the topic's first use) while
// its buckets, on other nodes, keep a dead consumer's delivery. A reaper
// that never used the topic reads no count; the dead consumer's job must
// still run again: a reaper must not forget a consumer whose buckets it
// could not count.
func TestLostTopicMetaStrandsNothing(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		m := newMortal(t, e, "t") // moves; the only consumer
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 10*time.Second, "fetched", func() bool { return m.l.count() == 1 })
		m.dead.Store(true)
		require.NoError(t, e.rdb.Del(ctx, keys.ForTopic(e.cfg.Prefix, "t").Meta()).Err())
		r := e.another(t, nil)
		require.NoError(t, r.Start(ctx)) // reaps; has never used the topic
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout, "forgotten", func() bool {
			return errors.Is(e.rdb.ZScore(ctx, keys.Alive(e.cfg.Prefix), m.c.ConsumerID()).Err(), redis.Nil)
		})
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "k"})) // the topic is in use again
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered", func() bool {
			return state(t, e.c, "t", "j") == redeq.StateReady
		})
	})
}

// TestFetchLandingAfterShutdownRecovered: a fetch is on the wire (written,
// delayed by the network: a retransmission on its connection) when the
// consumer shuts down. Shutdown gives up on it after its budget, rolls
// back what it holds, and leaves. The fetch then reaches the server and
// takes a job for the consumer that left. That job must still run. (It
// does: Shutdown spends its budget waiting for the fetch, so its rollback
// fails and it stays in the alive set, for a reaper to recover.)
func TestFetchLandingAfterShutdownRecovered(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing
		held, release := make(chan struct{}), make(chan struct{})
		landed := make(chan error, 1)
		var hold, once atomic.Bool
		fetch := newScriptHook(t, "ready/fetch.lua")
		fetch.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if !hold.Load() {
				return next()
			}
			if once.CompareAndSwap(false, true) {
				close(held)
			}
			<-release
			// The server runs what was written; the client has stopped
			// waiting for the reply.
			args := append([]any{"eval", fetch.Src}, cmd.Args()[2:]...)
			landed <- e.rdb.Do(context.Background(), args...).Err()
			return context.Canceled
		})
		rdb := e.be.New(t)
		rdb.AddHook(fetch)
		a, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		stop := make(chan struct{})
		l := blockingListener("t", stop)
		startWith(t, a, l)

		hold.Store(true)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("no fetch")
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = a.Shutdown(sctx)
		cancel()
		close(release)
		require.NoError(t, <-landed)
		require.Equal(t, redeq.StateInFlight, state(t, e.c, "t", "j"))
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered", func() bool {
			return state(t, e.c, "t", "j") == redeq.StateReady
		})
		close(stop)
	})
}

package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// consumerWrites counts the commands sent that write a topic's consumer
// set, in pipelines too.
type consumerWrites struct{ n atomic.Int64 }

func (h *consumerWrites) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "zadd", "zrem", "evalsha", "eval":
	default:
		return // a read
	}
	for _, a := range args[1:] {
		if k, ok := a.(string); ok && strings.HasSuffix(k, "}:consumers") {
			h.n.Add(1)
			return
		}
	}
}

func (h *consumerWrites) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *consumerWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *consumerWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// TestHeartbeatCostsOneCallWhateverTheTopics: a client listening to many
// topics says it is alive with one call per HeartbeatInterval; it writes
// the topics' consumer sets when it joins them, not on every heartbeat,
// so a fleet's idle cost does not grow with clients x topics.
func TestHeartbeatCostsOneCallWhateverTheTopics(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var beats atomic.Int64
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			beats.Add(1)
			return next()
		})
		writes := &consumerWrites{}
		rdb := e.be.New(t)
		rdb.AddHook(hb)
		rdb.AddHook(writes)
		c, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		const topics = 12
		for i := range topics {
			require.NoError(t, c.Register(redeq.ListenerFunc(fmt.Sprintf("t%d", i), func(context.Context, *redeq.Job, *redeq.Channel) error { return nil })))
		}
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		joined := writes.n.Load()
		require.Equal(t, int64(topics), joined, "joining writes each topic's consumer set once")
		start := beats.Load()
		testutil.Eventually(t, 20*e.cfg.HeartbeatInterval+5*time.Second, "heartbeats", func() bool { return beats.Load() >= start+5 })
		require.Equal(t, joined, writes.n.Load(), "a heartbeat wrote the topics' consumer sets")
		for i := range topics {
			require.NoError(t, e.rdb.ZScore(ctx, keys.ForTopic(e.cfg.Prefix, fmt.Sprintf("t%d", i)).Consumers(), c.ConsumerID()).Err())
		}
	})
}

// TestForgottenConsumerComesBack: a consumer that a reaper forgot (it
// looked silent, then came back), or whose heartbeat a failover lost, is
// back in the alive set with its topics at its next heartbeat, so that its
// jobs are recovered if it dies later.
func TestForgottenConsumerComesBack(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Register(redeq.ListenerFunc("t", func(_ context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			return nil
		})))
		require.NoError(t, e.c.Start(ctx))
		cid := e.c.ConsumerID()
		alive, topics := keys.Alive(e.cfg.Prefix), keys.AliveTopics(e.cfg.Prefix)
		require.NoError(t, e.rdb.ZScore(ctx, alive, cid).Err())
		line := keys.Address("t", e.cfg.Concurrency)
		require.Equal(t, line, e.rdb.HGet(ctx, topics, cid).Val())
		// What a reaper does to a consumer it forgets.
		require.NoError(t, e.rdb.ZRem(ctx, alive, cid).Err())
		require.NoError(t, e.rdb.HDel(ctx, topics, cid).Err())
		testutil.Eventually(t, 10*e.cfg.HeartbeatInterval+5*time.Second, "back", func() bool {
			return e.rdb.ZScore(ctx, alive, cid).Err() == nil && e.rdb.HGet(ctx, topics, cid).Val() == line
		})
	})
}

// TestNoFetchWhileHeartbeatsFail: a consumer whose heartbeats do not get
// through takes no job, even when Redis answers its fetches (the alive
// set's node is down, or its heartbeats are stuck): a reaper may count it
// as dead and forget it, and a job it fetched then would sit in an
// in-flight set nobody watches. Once a heartbeat gets through again, it
// joins its topics again and runs the job.
func TestNoFetchWhileHeartbeatsFail(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var failing atomic.Bool
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if failing.Load() {
				cmd.SetErr(fmt.Errorf("heartbeat held back"))
				return cmd.Err()
			}
			return next()
		})
		rdb := e.be.New(t)
		rdb.AddHook(hb)
		c, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		ran := make(chan string, 1)
		require.NoError(t, c.Register(redeq.ListenerFunc("t", func(_ context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			ran <- job.ID
			return nil
		})))
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		require.NoError(t, e.c.Start(ctx)) // reaps
		failing.Store(true)
		// Past the point where the consumer stops trusting its last heartbeat
		// (two thirds of ConsumerTimeout after it was sent).
		time.Sleep(e.cfg.ConsumerTimeout)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		deadline := time.Now().Add(2 * e.cfg.ConsumerTimeout)
		for time.Now().Before(deadline) {
			select {
			case <-ran:
				t.Fatal("a consumer whose heartbeats fail took a job")
			case <-time.After(10 * time.Millisecond):
			}
		}
		failing.Store(false)
		select {
		case id := <-ran:
			require.Equal(t, "j", id)
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not run after the heartbeats came back")
		}
		require.Equal(t, keys.Address("t", e.cfg.Concurrency), e.rdb.HGet(ctx, keys.AliveTopics(e.cfg.Prefix), c.ConsumerID()).Val(), "not watched by reapers")
	})
}

package redeq_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// held is one delivery a test listener holds until done is closed; then
// it acks.
type held struct {
	job  *redeq.Job
	done chan struct{}
}

// holdingListener returns a listener for topic whose every delivery is
// sent on the channel returned and waits for its done before it acks.
func holdingListener(topic string) (*listener, chan held) {
	runs := make(chan held, 16)
	l := newListener(topic, func(_ context.Context, job *redeq.Job, ch *redeq.Channel) error {
		h := held{job: job, done: make(chan struct{})}
		runs <- h
		<-h.done
		ch.Ack()
		return nil
	})
	l.workers = 4
	return l, runs
}

// next returns the next delivery of runs, failing after a deadline.
func next(t *testing.T, runs chan held, what string) held {
	t.Helper()
	select {
	case h := <-runs:
		return h
	case <-time.After(10 * time.Second):
		t.Fatalf("no delivery: %s", what)
		return held{}
	}
}

// completions counts the runs of one script that got a reply.
func completions(t *testing.T, path string) (*scriptHook, *atomic.Int64) {
	h := newScriptHook(t, path)
	var n atomic.Int64
	h.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		err := next()
		n.Add(1)
		return err
	})
	return h, &n
}

// inFlightIDs lists the ids List shows in flight for topic, sorted.
func inFlightIDs(t *testing.T, c *redeq.Client, topic string) []string {
	t.Helper()
	page, err := c.List(context.Background(), topic, redeq.StateInFlight, redeq.ListOptions{Limit: 100})
	require.NoError(t, err)
	var ids []string
	for _, j := range page.Jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	return ids
}

// topicConsumers is the Consumers of topic's TopicInfo.
func topicConsumers(t *testing.T, c *redeq.Client, topic string) int64 {
	t.Helper()
	infos, err := c.Topics(context.Background())
	require.NoError(t, err)
	for _, info := range infos {
		if info.Name == topic {
			return info.Consumers
		}
	}
	return -1
}

// TestResumedConsumerIsVisibleAgain: a consumer that stops heartbeating
// (stopped, paused, cut off) long enough for a reaper to recover its job
// and forget it, then resumes, is counted and listed again from its next
// heartbeat: Stats.Consumers, TopicInfo.Consumers, Stats.InFlight and
// List(inflight) show it and the jobs it runs. The job the reaper took
// from it runs again under a new delivery, and the stalled handler's ack
// is dropped by the fence.
func TestResumedConsumerIsVisibleAgain(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var stopped atomic.Bool
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if stopped.Load() {
				cmd.SetErr(errors.New("consumer stopped"))
				return cmd.Err()
			}
			return next()
		})
		settles, settled := completions(t, "ack/settle.lua")
		c := e.hooked(t, hb, cutLeases(t, &stopped), settles)
		l, runs := holdingListener("t")
		startWith(t, c, l)
		require.NoError(t, e.c.Start(ctx)) // moves and reaps
		cid := c.ConsumerID()

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a"}))
		stale := next(t, runs, "first delivery of a")
		testutil.Eventually(t, 5*time.Second, "counted", func() bool {
			st := stats(t, e.c, "t")
			return st.Consumers == 1 && st.InFlight == 1
		})

		// The consumer stops: its job is recovered and it is forgotten.
		stopped.Store(true)
		testutil.Eventually(t, 20*e.cfg.ConsumerTimeout, "reaped and forgotten", func() bool {
			return stats(t, e.c, "t").Consumers == 0 && state(t, e.c, "t", "a") == redeq.StateReady &&
				e.rdb.ZScore(ctx, keys.Alive(e.cfg.Prefix), cid).Err() == redis.Nil
		})

		// It resumes: it takes the job again, and a new one.
		stopped.Store(false)
		again := next(t, runs, "second delivery of a")
		require.Equal(t, "a", again.job.ID)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "b"}))
		fresh := next(t, runs, "delivery of b")
		require.Equal(t, "b", fresh.job.ID)
		testutil.Eventually(t, 10*e.cfg.HeartbeatInterval+5*time.Second, "visible again", func() bool {
			st := stats(t, e.c, "t")
			return st.Consumers == 1 && st.InFlight == 2 && topicConsumers(t, e.c, "t") == 1
		})
		require.Equal(t, []string{"a", "b"}, inFlightIDs(t, e.c, "t"))
		for _, id := range []string{"a", "b"} {
			job, err := e.c.Get(ctx, "t", id)
			require.NoError(t, err)
			require.Equal(t, cid, job.Consumer)
		}

		// The stalled handler acks: dropped, the new delivery keeps a.
		before := settled.Load()
		close(stale.done)
		testutil.Eventually(t, 5*time.Second, "stale outcome settled", func() bool { return settled.Load() > before })
		require.Equal(t, redeq.StateInFlight, state(t, e.c, "t", "a"), "the stale ack acted on the new delivery")
		require.Equal(t, []string{"a", "b"}, inFlightIDs(t, e.c, "t"))

		close(again.done)
		close(fresh.done)
		testutil.Eventually(t, 5*time.Second, "both acked", func() bool {
			return state(t, e.c, "t", "a") == "" && state(t, e.c, "t", "b") == ""
		})
		st := stats(t, e.c, "t")
		require.Zero(t, st.InFlight)
		require.Equal(t, int64(1), st.Consumers)
		select {
		case h := <-runs:
			t.Fatalf("job %s ran once more", h.job.ID)
		default:
		}
	})
}

// TestComebackWhileForgottenKeepsMembership: a consumer that comes back
// between a reaper's forgetting it and the reaper's taking it out of its
// topics' consumer sets stays in them: its heartbeat joined again, and the
// reaper takes out only a membership older than the heartbeat it forgot.
func TestComebackWhileForgottenKeepsMembership(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var stopped atomic.Bool
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if stopped.Load() {
				cmd.SetErr(errors.New("consumer stopped"))
				return cmd.Err()
			}
			return next()
		})
		c := e.hooked(t, hb)
		startWith(t, c, newListener("t", nil))
		cid := c.ConsumerID()
		consumers := keys.ForTopic(e.cfg.Prefix, "t").Consumers()
		joinedField := cid + "#joined"
		gone := newScriptHook(t, "consumer/gone.lua")
		gone.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			err := next()
			if v, _ := cmd.(*redis.Cmd).Int(); err == nil && v == 1 && stopped.Load() {
				// Forgotten: the consumer resumes and joins again before
				// the reaper goes on.
				stopped.Store(false)
				testutil.Eventually(t, 10*time.Second, "joined again", func() bool {
					at, err := e.rdb.HGet(ctx, keys.AliveTopics(e.cfg.Prefix), joinedField).Float64()
					return err == nil && e.rdb.ZScore(ctx, consumers, cid).Val() == at
				})
			}
			return err
		})
		forgets, forgot := completions(t, "consumer/forget.lua")
		reaper := e.hooked(t, gone, forgets)
		require.NoError(t, reaper.Start(ctx))
		stopped.Store(true)
		testutil.Eventually(t, 20*e.cfg.ConsumerTimeout, "forgotten and back", func() bool { return forgot.Load() > 0 })
		require.NoError(t, e.rdb.ZScore(ctx, consumers, cid).Err(), "the reaper took a consumer that came back out of its topic")
		require.Equal(t, int64(1), stats(t, e.c, "t").Consumers)
	})
}

// TestForgottenConsumerRejoinsThroughARerun: the heartbeat that finds a
// forgotten consumer makes it join its topics again even when its first
// reply is lost and go-redis runs it again: the rerun gives the same join
// time.
func TestForgottenConsumerRejoinsThroughARerun(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		hb.set(rerun)
		c := e.hooked(t, hb)
		startWith(t, c, newListener("t", nil))
		cid := c.ConsumerID()
		consumers := keys.ForTopic(e.cfg.Prefix, "t").Consumers()
		require.NoError(t, e.rdb.ZScore(ctx, consumers, cid).Err())
		// What a reaper does to a consumer it forgets (gone.lua, forget.lua):
		// the topic's set first, then its alive records at once (one slot),
		// so that a heartbeat between the steps, which finds it alive and
		// joins nothing, cannot leave it alive and out of the topic's set.
		require.NoError(t, e.rdb.ZRem(ctx, consumers, cid).Err())
		_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, keys.Alive(e.cfg.Prefix), cid)
			p.HDel(ctx, keys.AliveTopics(e.cfg.Prefix), cid, cid+"#timeout", cid+"#joined")
			return nil
		})
		require.NoError(t, err)
		testutil.Eventually(t, 10*e.cfg.HeartbeatInterval+5*time.Second, "joined again", func() bool {
			return e.rdb.ZScore(ctx, consumers, cid).Err() == nil
		})
		require.Equal(t, int64(1), stats(t, e.c, "t").Consumers)
	})
}

// TestStoppedConsumerProcessIsVisibleAfterResume: a consumer process
// stopped with SIGSTOP until a reaper recovered its job and forgot it,
// then continued with SIGCONT, is counted and listed again with the jobs
// it runs (the one taken from it, under a new delivery, and a new one).
func TestStoppedConsumerProcessIsVisibleAfterResume(t *testing.T) {
	testutil.FaultTier(t)
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Start(ctx)) // moves and reaps
		ch := startChild(t, e.be, e.cfg.Prefix, "t")
		holding := func(what string) string {
			t.Helper()
			select {
			case id := <-ch.held:
				return id
			case <-time.After(20 * time.Second):
				t.Fatalf("the child holds no job: %s", what)
				return ""
			}
		}
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a"}))
		require.Equal(t, "a", holding("first delivery of a"))
		testutil.Eventually(t, 10*time.Second, "counted", func() bool {
			st := stats(t, e.c, "t")
			return st.Consumers == 1 && st.InFlight == 1
		})

		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
		testutil.Eventually(t, 20*e.cfg.ConsumerTimeout, "reaped and forgotten", func() bool {
			return stats(t, e.c, "t").Consumers == 0 && state(t, e.c, "t", "a") == redeq.StateReady
		})
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
		require.Equal(t, "a", holding("second delivery of a"))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "b"}))
		require.Equal(t, "b", holding("delivery of b"))
		testutil.Eventually(t, 10*time.Second, "visible again", func() bool {
			st := stats(t, e.c, "t")
			return st.Consumers == 1 && st.InFlight == 2 && topicConsumers(t, e.c, "t") == 1
		})
		require.Equal(t, []string{"a", "b"}, inFlightIDs(t, e.c, "t"))
	})
}

// TestShutdownLeavesNoTraceOfTheConsumer: a consumer that shuts down
// cleanly leaves its topics' consumer sets and takes every field it wrote
// beside its heartbeat (topics, timeout, join time) with it.
func TestShutdownLeavesNoTraceOfTheConsumer(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.another(t, nil)
		startWith(t, c, newListener("t", nil))
		cid := c.ConsumerID()
		fields := e.rdb.HKeys(ctx, keys.AliveTopics(e.cfg.Prefix)).Val()
		require.Contains(t, fields, cid+"#joined")
		require.NoError(t, c.Shutdown(ctx))
		for _, f := range e.rdb.HKeys(ctx, keys.AliveTopics(e.cfg.Prefix)).Val() {
			require.NotContains(t, f, cid)
		}
		require.Equal(t, redis.Nil, e.rdb.ZScore(ctx, keys.ForTopic(e.cfg.Prefix, "t").Consumers(), cid).Err())
		require.Equal(t, redis.Nil, e.rdb.ZScore(ctx, keys.Alive(e.cfg.Prefix), cid).Err())
	})
}

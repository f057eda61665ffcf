package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// serverNow is the Redis server's clock.
func serverNow(t *testing.T, e *env) time.Time {
	t.Helper()
	tm, err := e.rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return tm
}

// TestFailureTimeIsRecordedWithTheError: a failed delivery leaves its
// error and when it failed, by the Redis clock, on the job: Get and List
// give LastError and FailedAt, and Failures holds both failures, newest
// first, each with its time and the consumer whose delivery failed; an
// ack takes them away with the job.
func TestFailureTimeIsRecordedWithTheError(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var calls atomic.Int32
		fail := make(chan struct{})
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if calls.Add(1) <= 2 {
				return fmt.Errorf("partner answered %d", calls.Load())
			}
			<-fail
			ch.Ack()
			return nil
		}, redeq.WithRetry(5, 10*time.Millisecond))
		before := serverNow(t, e)
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 20*time.Second, "two failures", func() bool { return calls.Load() >= 3 })
		after := serverNow(t, e).Add(time.Millisecond)
		j, err := e.c.Get(ctx, "t", "j")
		require.NoError(t, err)
		require.Equal(t, "partner answered 2", j.LastError)
		require.False(t, j.FailedAt.Before(before.Truncate(time.Millisecond)), "failed at %v, before %v", j.FailedAt, before)
		require.False(t, j.FailedAt.After(after), "failed at %v, after %v", j.FailedAt, after)
		require.Len(t, j.Failures, 2, "%+v", j.Failures)
		require.Equal(t, redeq.Failure{At: j.FailedAt, Error: "partner answered 2", Consumer: j.Failures[0].Consumer}, j.Failures[0])
		require.Equal(t, "partner answered 1", j.Failures[1].Error)
		require.False(t, j.Failures[1].At.After(j.FailedAt), "newest first: %+v", j.Failures)
		require.NotEmpty(t, j.Failures[0].Consumer)
		infos, err := e.c.Consumers(ctx)
		require.NoError(t, err)
		require.Len(t, infos, 1)
		require.Equal(t, infos[0].ID, j.Failures[0].Consumer, "the consumer that ran the delivery")
		require.Equal(t, j.Failures[0].Consumer, j.Failures[1].Consumer)
		page, err := e.c.List(ctx, "t", redeq.StateInFlight, redeq.ListOptions{})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 1)
		require.Equal(t, j.FailedAt, page.Jobs[0].FailedAt)
		require.Equal(t, j.LastError, page.Jobs[0].LastError)
		close(fail)
		testutil.Eventually(t, 20*time.Second, "the ack", func() bool {
			_, err := e.c.Get(ctx, "t", "j")
			return errors.Is(err, redeq.ErrJobNotFound)
		})
	})
}

// TestRetentionKeepsAckedJobs: on a topic with retention an acked job
// stays readable as done for the retention: Get returns it with State
// done, when and by which consumer it finished, and every failure before
// the ack (newest first); List(StateDone) lists it; then it expires.
// Without retention an ack leaves nothing behind (no done keys at all).
func TestRetentionKeepsAckedJobs(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var calls, plainCalls atomic.Int32
		kept := redeq.ListenerFunc("kept", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if job.ID == "flaky" && calls.Add(1) <= 3 {
				return fmt.Errorf("try %d", calls.Load())
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(5, 10*time.Millisecond), redeq.WithRetention(time.Hour))
		brief := redeq.ListenerFunc("brief", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			return nil
		}, redeq.WithRetention(300*time.Millisecond))
		plain := redeq.ListenerFunc("plain", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if plainCalls.Add(1) <= 2 {
				return errors.New("once")
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(5, 10*time.Millisecond))
		before := serverNow(t, e).Truncate(time.Millisecond)
		startWith(t, e.c, kept, brief, plain)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "kept", ID: "flaky", Body: []byte("b"), Headers: map[string]string{"tenant": "7"}}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "kept", ID: "clean"}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "brief", ID: "x"}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "plain", ID: "p"}))

		var j *redeq.Job
		testutil.Eventually(t, 20*time.Second, "flaky done", func() bool {
			var err error
			j, err = e.c.Get(ctx, "kept", "flaky")
			return err == nil && j.State == redeq.StateDone
		})
		require.Equal(t, e.c.ConsumerID(), j.Consumer)
		require.Equal(t, []byte("b"), j.Body)
		require.Equal(t, map[string]string{"tenant": "7"}, j.Headers)
		require.Equal(t, 3, j.Attempt)
		require.False(t, j.FinishedAt.Before(before), "finished %v before %v", j.FinishedAt, before)
		require.Len(t, j.Failures, 3)
		for i, f := range j.Failures {
			require.Equal(t, fmt.Sprintf("try %d", 3-i), f.Error, "newest first")
			require.False(t, f.At.After(j.FinishedAt))
			if i > 0 {
				require.False(t, f.At.After(j.Failures[i-1].At))
			}
		}
		require.Equal(t, "try 3", j.LastError)
		require.Equal(t, j.Failures[0].At, j.FailedAt)

		testutil.Eventually(t, 20*time.Second, "both listed done", func() bool {
			page, err := e.c.List(ctx, "kept", redeq.StateDone, redeq.ListOptions{})
			require.NoError(t, err)
			return len(page.Jobs) == 2
		})
		testutil.Eventually(t, 20*time.Second, "brief's record expired", func() bool {
			j, err := e.c.Get(ctx, "brief", "x")
			if err == nil {
				require.Equal(t, redeq.StateDone, j.State)
			}
			return errors.Is(err, redeq.ErrJobNotFound)
		})
		page, err := e.c.List(ctx, "brief", redeq.StateDone, redeq.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, page.Jobs, "expired")

		testutil.Eventually(t, 20*time.Second, "plain acked", func() bool {
			_, err := e.c.Get(ctx, "plain", "p")
			return errors.Is(err, redeq.ErrJobNotFound)
		})
		for b := range e.cfg.Concurrency {
			k := keys.ForBucket(e.cfg.Prefix, "plain", b)
			require.Zero(t, e.rdb.Exists(ctx, k.Done(), k.DoneJobs()).Val(), "no retention, no done keys")
		}
		page, err = e.c.List(ctx, "plain", redeq.StateDone, redeq.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, page.Jobs)
	})
}

// TestRetentionIsBoundedPerTopic: a topic keeps at most RetentionMax done
// records; the oldest go first, and the listing pages through what is
// kept, each record once.
func TestRetentionIsBoundedPerTopic(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.another(t, func(c *config.Config) { c.Retention, c.RetentionMax = time.Hour, 3 })
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			return nil
		})
		startWith(t, c, l)
		for i := range 8 {
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprintf("j%d", i)}))
			testutil.Eventually(t, 20*time.Second, "acked", func() bool {
				j, err := c.Get(ctx, "t", fmt.Sprintf("j%d", i))
				return err == nil && j.State == redeq.StateDone
			})
		}
		var ids []string
		cur := ""
		for {
			page, err := c.List(ctx, "t", redeq.StateDone, redeq.ListOptions{Limit: 1, Cursor: cur})
			require.NoError(t, err)
			for _, j := range page.Jobs {
				ids = append(ids, j.ID)
			}
			if cur = page.Next; cur == "" {
				break
			}
		}
		// The cap is shared among buckets (rounded up): a bucket keeps at
		// most ceil(3/buckets).
		most := 3
		if b := e.cfg.Concurrency; b > 1 {
			most = b * ((3 + b - 1) / b)
		}
		require.LessOrEqual(t, len(ids), most, "%v", ids)
		require.NotEmpty(t, ids)
		require.Contains(t, ids, "j7", "the newest is kept")
		require.Equal(t, len(ids), len(uniq(ids)), "each once: %v", ids)
	})
}

func uniq(ss []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return m
}

// TestSilentConsumersJobsAreShownAsSuch: a job in flight whose consumer
// missed its heartbeats past its own ConsumerTimeout, not yet recovered,
// carries ConsumerSilentSince (that consumer's last heartbeat) in Get and
// the in-flight listing; a job of a consumer that heartbeats does not.
func TestSilentConsumersJobsAreShownAsSuch(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		alive, topics := keys.Alive(e.cfg.Prefix), keys.AliveTopics(e.cfg.Prefix)
		now := serverNow(t, e).UnixMilli()
		old := now - time.Hour.Milliseconds()
		beats := map[string]int64{"ghost": old, "live": now}
		for id, cid := range map[string]string{"g": "ghost", "l": "live"} {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Delay: time.Hour}))
			k := keys.ForBucket(e.cfg.Prefix, "t", bucketOf(id, e.cfg.Concurrency))
			// What a fetch by cid leaves: the id in its in-flight set, the
			// state naming its delivery.
			require.NoError(t, e.rdb.ZRem(ctx, k.Scheduled(), id).Err())
			require.NoError(t, e.rdb.ZAdd(ctx, k.InFlight(cid), redisZAt("7:"+id, now)).Err())
			require.NoError(t, e.rdb.HSet(ctx, k.State(), id, "7@"+cid).Err())
			require.NoError(t, e.rdb.ZAdd(ctx, keys.ForTopic(e.cfg.Prefix, "t").Consumers(), redisZAt(cid, beats[cid])).Err())
			require.NoError(t, e.rdb.ZAdd(ctx, alive, redisZAt(cid, beats[cid])).Err())
			require.NoError(t, e.rdb.HSet(ctx, topics, cid, keys.Address("t", e.cfg.Concurrency), keys.AliveTimeout(cid), 15000).Err())
		}
		g, err := e.c.Get(ctx, "t", "g")
		require.NoError(t, err)
		require.Equal(t, redeq.StateInFlight, g.State)
		require.Equal(t, "ghost", g.Consumer)
		require.Equal(t, time.UnixMilli(old), g.ConsumerSilentSince)
		l, err := e.c.Get(ctx, "t", "l")
		require.NoError(t, err)
		require.Equal(t, "live", l.Consumer)
		require.True(t, l.ConsumerSilentSince.IsZero())

		page, err := e.c.List(ctx, "t", redeq.StateInFlight, redeq.ListOptions{})
		require.NoError(t, err)
		got := map[string]time.Time{}
		for _, j := range page.Jobs {
			got[j.ID] = j.ConsumerSilentSince
		}
		require.Equal(t, map[string]time.Time{"g": time.UnixMilli(old), "l": {}}, got)
	})
}

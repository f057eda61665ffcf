package redeqtest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/redeqtest"
)

type reminder struct {
	Meeting string `json:"meeting"`
}

// TestAdvanceRunsWhatFallsDue: a job runs only once the clock has moved
// to its due time, and then promptly, even with scan settings that would
// make a client look only every 20 s: Advance wakes the started client.
func TestAdvanceRunsWhatFallsDue(t *testing.T) {
	for _, buckets := range []int{1, 8} {
		t.Run(fmt.Sprintf("Buckets%d", buckets), func(t *testing.T) {
			env := redeqtest.New(t, redeqtest.WithConfig(func(cfg *config.Config) {
				cfg.ScanInterval = 10 * time.Second // the owner rescans every 20 s
				cfg.LockExpiry = 60 * time.Second
				cfg.Concurrency = buckets
			}))
			var ran atomic.Int32
			env.Start(redeq.Typed("remind", func(ctx context.Context, r reminder) error {
				ran.Add(1)
				return nil
			}))
			ctx := context.Background()
			ids := []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"}
			for _, id := range ids {
				_, err := redeq.AddTyped(ctx, env.Client(), "remind", id, reminder{"standup"}, 30*time.Minute)
				require.NoError(t, err)
			}

			env.Advance(29 * time.Minute)
			env.WaitIdle("remind")
			require.Zero(t, ran.Load(), "not before its due time")
			env.RequireAdded("remind", "m1")

			start := time.Now()
			env.Advance(time.Minute)
			env.WaitIdle("remind")
			require.Equal(t, int32(len(ids)), ran.Load())
			require.Less(t, time.Since(start), 10*time.Second, "ran without waiting for a scan")
			for _, id := range ids {
				env.RequireNotAdded("remind", id)
			}
		})
	}
}

// TestAdvanceRunsRetriesOnTheClock: a failed job's retry waits for the
// clock to reach its interval, and then runs.
func TestAdvanceRunsRetriesOnTheClock(t *testing.T) {
	env := redeqtest.New(t)
	var calls atomic.Int32
	env.Start(redeq.ListenerFunc("partner.call", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		if calls.Add(1) == 1 {
			return context.DeadlineExceeded
		}
		ch.Ack()
		return nil
	}, redeq.WithRetry(5, time.Minute, 5*time.Minute)))
	require.NoError(t, env.Client().Add(context.Background(), &redeq.Job{Topic: "partner.call", ID: "p1"}))
	env.WaitIdle("partner.call")
	require.Equal(t, int32(1), calls.Load())
	job := env.RequireAdded("partner.call", "p1")
	require.Equal(t, redeq.StateScheduled, job.State)
	require.Equal(t, 1, job.Attempt)
	require.True(t, env.Now().Add(time.Minute).Equal(job.RunAt), "retried one minute later on the Env's clock: %v", job.RunAt)

	env.Advance(59 * time.Second)
	env.WaitIdle("partner.call")
	require.Equal(t, int32(1), calls.Load(), "not before the interval")
	env.Advance(time.Second)
	env.WaitIdle("partner.call")
	require.Equal(t, int32(2), calls.Load())
	env.RequireNotAdded("partner.call", "p1")
}

// TestDrainRunsWaitingJobsNow: Drain runs every waiting job of a topic
// at once, whatever its due time, and returns once they have run.
func TestDrainRunsWaitingJobsNow(t *testing.T) {
	env := redeqtest.New(t)
	var ran atomic.Int32
	env.Start(redeq.Typed("remind", func(ctx context.Context, r reminder) error {
		ran.Add(1)
		return nil
	}))
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		_, err := redeq.AddTyped(ctx, env.Client(), "remind", id, reminder{id}, 24*time.Hour)
		require.NoError(t, err)
	}
	require.Len(t, env.Jobs("remind"), 3)
	env.Drain("remind")
	require.Equal(t, int32(3), ran.Load())
	require.Empty(t, env.Jobs("remind"))
	require.Empty(t, env.Jobs("never.used"), "a topic never used holds no job")
}

// TestRequireAddedFails: RequireAdded and RequireNotAdded fail the test
// (and name the topic's jobs) when the job is not where they say.
func TestRequireAddedFails(t *testing.T) {
	env := redeqtest.New(t)
	require.NoError(t, env.Client().Add(context.Background(), &redeq.Job{Topic: "t", ID: "there", Delay: time.Hour}))
	ft := &fakeT{TB: t}
	fenv := envOf(t, ft) // an Env of the fake, to see its failures
	require.NoError(t, fenv.Client().Add(context.Background(), &redeq.Job{Topic: "t", ID: "there", Delay: time.Hour}))
	runFatal(func() { fenv.RequireAdded("t", "missing") })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, `job "missing" of topic "t" was not added (topic holds there (scheduled))`)
	ft.failed = false
	runFatal(func() { fenv.RequireNotAdded("t", "there") })
	require.True(t, ft.failed)
	require.Contains(t, ft.msg, `job "there" of topic "t" was added`)
	ft.failed = false
	runFatal(func() { fenv.RequireNotAdded("t", "missing"); fenv.RequireAdded("t", "there") })
	require.False(t, ft.failed, ft.msg)

	env.RequireAdded("t", "there")
	env.RequireNotAdded("t", "missing")
}

// TestAdvanceWakesEveryClient: with two instances, whichever moves the
// topic's buckets is woken by Advance, so the job runs promptly on the
// one that listens.
func TestAdvanceWakesEveryClient(t *testing.T) {
	env := redeqtest.New(t, redeqtest.WithConfig(func(cfg *config.Config) {
		cfg.ScanInterval = 10 * time.Second
		cfg.LockExpiry = 60 * time.Second
		cfg.Concurrency = 4
	}))
	producer := env.NewClient()
	require.NoError(t, producer.Start(context.Background())) // moves buckets, runs no listener
	var ran atomic.Int32
	env.Start(redeq.Typed("remind", func(ctx context.Context, r reminder) error {
		ran.Add(1)
		return nil
	}))
	for i := range 8 {
		_, err := redeq.AddTyped(context.Background(), producer, "remind", fmt.Sprint(i), reminder{"x"}, time.Hour)
		require.NoError(t, err)
	}
	env.Advance(time.Hour)
	env.WaitIdle() // every topic
	require.Equal(t, int32(8), ran.Load())
}

package redeq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// A job due a minute ago and not started is a minute overdue while it
// waits in its bucket (no mover ran) and still once the mover has put it
// in the ready list; once consumed, its topic is 0 overdue. A job not due
// yet is not overdue, and a topic nobody used is left out.
func TestOldestOverdue(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cfg := e.cfg
		cfg.Concurrency = 4
		c, err := redeq.New(e.rdb, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(ctx) })

		past := time.Now().Add(-time.Minute)
		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "late", ID: id, RunAt: past.Add(30 * time.Second)}))
		}
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "late", ID: "oldest", RunAt: past}))
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "later", ID: "x", Delay: time.Hour}))

		got, err := c.OldestOverdue(ctx, "late", "later", "nobody")
		require.NoError(t, err)
		require.Len(t, got, 2, "a topic nobody used is left out")
		require.GreaterOrEqual(t, got["late"], time.Minute-time.Second, "in the bucket, not moved")
		require.Less(t, got["late"], 10*time.Minute)
		require.Zero(t, got["later"])

		// A started client with no listener for the topic moves its jobs
		// to the ready list; they stay overdue there.
		require.NoError(t, c.Start(ctx))
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := c.Stats(ctx, "late")
			require.NoError(t, err)
			// Stats reads the ready list and the bucket one after the
			// other: a move between the reads can count a job in both.
			if (st.Ready == 4 && st.Scheduled == 0) || time.Now().After(deadline) {
				require.Equal(t, int64(4), st.Ready, "moved")
				require.Zero(t, st.Scheduled)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		got, err = c.OldestOverdue(ctx, "late")
		require.NoError(t, err)
		require.GreaterOrEqual(t, got["late"], time.Minute-time.Second, "in the ready list, not fetched")

		// A consumer drains the topic: nothing is overdue.
		consumer := e.another(t, func(cfg *config.Config) { cfg.Concurrency = 4 })
		require.NoError(t, consumer.Register(redeq.ListenerFunc("late", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			return nil
		})))
		require.NoError(t, consumer.Start(ctx))
		for {
			got, err = c.OldestOverdue(ctx, "late")
			require.NoError(t, err)
			if got["late"] == 0 || time.Now().After(deadline) {
				require.Zero(t, got["late"], "consumed")
				break
			}
			time.Sleep(10 * time.Millisecond)
		}

		_, err = c.OldestOverdue(ctx, "bad topic")
		require.True(t, errors.Is(err, redeq.ErrInvalidJob) || errors.Is(err, redeq.ErrInvalidArgument), "%v", err)
	})
}

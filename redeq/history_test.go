package redeq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// History counts, per minute, the deliveries processed and failed and the
// lateness of each fetched job, summed over the topic's buckets; its keys
// expire on their own.
func TestHistoryCountsProcessedFailedAndLateness(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			e := setup(t, be, cfg)
			ctx := context.Background()
			start := time.Now()
			require.NoError(t, e.c.Register(redeq.ListenerFunc("hist", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if job.Body[0] == 'f' {
					return errors.New("boom")
				}
				ch.Ack()
				return nil
			}, redeq.WithRetry(1, time.Millisecond))))
			var jobs []*redeq.Job
			for _, id := range []string{"a1", "a2", "a3", "a4", "f1", "f2"} {
				jobs = append(jobs, &redeq.Job{Topic: "hist", ID: id, Body: []byte(id[:1]), Delay: 10 * time.Millisecond})
			}
			require.NoError(t, e.c.AddBatch(ctx, jobs))
			require.NoError(t, e.c.Start(ctx))

			// a1..a4: one ack each; f1 f2: a failure retried, then one sent
			// to the dead set: 8 deliveries, 4 failed, all timed by the mover.
			var total redeq.Minute
			deadline := time.Now().Add(10 * time.Second)
			for {
				ms, err := e.c.History(ctx, "hist", start.Add(-time.Minute))
				require.NoError(t, err)
				total = redeq.SumMinutes(ms)
				if total.Processed >= 8 || time.Now().After(deadline) {
					require.NotEmpty(t, ms)
					require.False(t, ms[0].Start.After(start), "the first minute holds since")
					require.WithinDuration(t, time.Now().Truncate(time.Minute), ms[len(ms)-1].Start, time.Minute, "the last is the current minute")
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			require.EqualValues(t, 8, total.Processed)
			require.EqualValues(t, 4, total.Failed)
			require.EqualValues(t, 8, total.Lateness.Count())
			require.GreaterOrEqual(t, total.LatenessP99(), total.LatenessP50())

			var hist int
			for _, k := range testutil.Keys(t, e.rdb, e.cfg.Prefix) {
				if strings.Contains(k, ":hist:") {
					hist++
					ttl := e.rdb.TTL(ctx, k).Val()
					require.Greater(t, ttl, 80*time.Minute, "%s expires", k)
					require.LessOrEqual(t, ttl, 90*time.Minute, "%s expires", k)
				}
			}
			require.NotZero(t, hist)

			// Bad input is refused; a topic nobody used has empty minutes.
			_, err := e.c.History(ctx, "bad topic", time.Time{})
			require.ErrorIs(t, err, redeq.ErrInvalidJob)
			ms, err := e.c.History(ctx, "never", time.Time{})
			require.NoError(t, err)
			require.Len(t, ms, int(redeq.HistoryRetention/time.Minute)+1)
			require.Zero(t, redeq.SumMinutes(ms).Processed)
		})
	}
}

// The lateness quantiles interpolate inside the counter they fall in, and
// report the last (over 60 s) counter as "at least 60 s".
func TestLatenessQuantile(t *testing.T) {
	t.Parallel()
	var h redeq.LatenessHistogram
	require.Zero(t, h.Quantile(0.5), "empty")
	h[0] = 50 // at most 1 ms
	h[3] = 49 // 5..10 ms
	h[redeq.LatenessBuckets-1] = 1
	require.EqualValues(t, 100, h.Count())
	require.Equal(t, time.Millisecond, h.Quantile(0.5))
	require.Equal(t, 10*time.Millisecond, h.Quantile(0.99))
	require.Equal(t, time.Minute, h.Quantile(1))
	require.Equal(t, 5*time.Millisecond+5*time.Millisecond*24/49, h.Quantile(0.74).Truncate(time.Nanosecond))
	require.Equal(t, time.Minute, redeq.LatenessBound(redeq.LatenessBuckets-2))
	require.Equal(t, time.Duration(-1), redeq.LatenessBound(redeq.LatenessBuckets-1))
}

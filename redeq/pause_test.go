package redeq_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestPauseStopsRunningClients: once Pause returns, a running client of
// another process fetches nothing of the topic (its due jobs wait in the
// ready list while it keeps polling), other topics run on, Stats and
// Topics say paused; once Resume returns it runs them.
func TestPauseStopsRunningClients(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			e := setup(t, be, cfg)
			ctx := context.Background()

			// The consumer counts its fetch scripts, to know it kept trying.
			var fetches atomic.Int64
			hook := newScriptHook(t, "ready/fetch.lua")
			hook.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
				fetches.Add(1)
				return next()
			})
			rdb := be.New(t)
			rdb.AddHook(hook)
			consumer, err := redeq.New(rdb, e.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = consumer.Shutdown(context.Background()) })
			l := newListener("t", nil)
			other := newListener("other", nil)
			startWith(t, consumer, l, other)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "before"}))
			testutil.Eventually(t, 5*time.Second, "the consumer runs", func() bool { return l.count() == 1 })

			require.NoError(t, e.c.Pause(ctx, "t"))
			for i := range 8 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("p", i)}))
			}
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "other", ID: "o"}))
			testutil.Eventually(t, 5*time.Second, "due jobs moved to ready", func() bool { return stats(t, e.c, "t").Ready == 8 })
			testutil.Eventually(t, 5*time.Second, "another topic runs", func() bool { return other.count() == 1 })
			// Every bucket is polled each PollTimeout: many fetches later,
			// still nothing ran.
			tried := fetches.Load()
			testutil.Eventually(t, 10*time.Second, "the consumer polls", func() bool { return fetches.Load() >= tried+3*4 })
			require.Equal(t, 1, l.count(), "a job of a paused topic ran")
			st := stats(t, e.c, "t")
			require.True(t, st.Paused)
			require.EqualValues(t, 8, st.Ready)
			require.Zero(t, st.InFlight)

			require.NoError(t, e.c.Resume(ctx, "t"))
			require.False(t, stats(t, e.c, "t").Paused)
			testutil.Eventually(t, 5*time.Second, "resumed jobs run", func() bool { return l.count() == 9 })
		})
	}
}

// TestPauseLastCallWins: pausing twice, resuming twice, and a Pause made
// by one client and a Resume by another all leave the topic as the last
// call said, in every bucket.
func TestPauseLastCallWins(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "1"}))
		b := e.another(t, nil)
		require.NoError(t, e.c.Pause(ctx, "t"))
		require.NoError(t, e.c.Pause(ctx, "t"))
		require.True(t, stats(t, b, "t").Paused)
		require.NoError(t, b.Resume(ctx, "t"))
		require.NoError(t, b.Resume(ctx, "t"))
		require.False(t, stats(t, e.c, "t").Paused)
		l := newListener("t", nil)
		startWith(t, e.c, l)
		testutil.Eventually(t, 5*time.Second, "runs after resume", func() bool { return l.count() == 1 })
	})
}

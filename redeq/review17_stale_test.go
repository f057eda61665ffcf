package redeq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview17StaleEntriesWorkersOne attacks promise 4 ("a deleted job's
// stale ready-list entry never delays the other jobs of its bucket for
// long") on a listener with few workers. N due jobs are deleted (a
// cancelled campaign: "close these orders" no longer needed) while their
// ids sit in the ready list; then one live job falls due behind them. A
// fetch reads only as many entries as it may take (fetch.lua: LRANGE 0
// want-1, want = free workers), so a listener with Workers 1 drops one
// stale entry per round trip, and the live job waits N round trips.
func TestReview17StaleEntriesWorkersOne(t *testing.T) {
	for _, workers := range []int{1, 8} {
		t.Run(fmt.Sprint("workers", workers), func(t *testing.T) {
			t.Parallel()
			_, be := privateServer(t)
			ctx := context.Background()
			cfg := testutil.Config(t)
			e := setup(t, be, cfg)
			const n = 20000
			jobs := make([]*redeq.Job, n)
			for i := range jobs {
				jobs[i] = &redeq.Job{Topic: "t", ID: fmt.Sprint("gone", i)}
			}
			require.NoError(t, e.c.AddBatch(ctx, jobs))
			require.NoError(t, e.c.Start(ctx)) // moves, consumes nothing
			waitFor(t, 20*time.Second, "all ready", func() bool { return stats(t, e.c, "t").Ready == n })
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Go(func() {
					for i := g; i < n; i += 16 {
						_, err := e.c.Delete(ctx, "t", fmt.Sprint("gone", i))
						require.NoError(t, err)
					}
				})
			}
			wg.Wait()
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "live"}))
			waitFor(t, 5*time.Second, "live ready", func() bool { return state(t, e.c, "t", "live") == redeq.StateReady })

			x := e.another(t, nil)
			l := newListener("t", nil)
			l.workers = workers
			start := time.Now()
			startWith(t, x, l)
			waitFor(t, 60*time.Second, "live ran", func() bool { return l.count() == 1 })
			wait := l.deliveries()[0].at.Sub(start)
			t.Logf("workers %d: the live job behind %d stale entries started %v after the listener started", workers, n, wait.Round(time.Millisecond))
			require.Less(t, wait, 2*time.Second, "stale entries of deleted jobs held up the live job")
		})
	}
}

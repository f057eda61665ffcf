package redeq_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestStaleReadyEntriesDelayNoLiveJob: the ready-list entries of deleted
// jobs, which the fetch drops, never delay the live jobs of their bucket
// for long: neither in a backlog with many workers nor behind a run of
// them with Workers 1.
func TestStaleReadyEntriesDelayNoLiveJob(t *testing.T) {
	testutil.FaultTier(t) // every case starts a server of its own
	t.Run("deleted_in_backlog", testDeletedJobsInBacklogDelayNoLiveJob)
	t.Run("one_worker", testStaleEntriesDelayNoLiveJobWithOneWorker)
}

// testDeletedJobsInBacklogDelayNoLiveJob: a backlog of ready jobs, some of
// which were deleted (Client.Delete leaves their ids in the ready list, to
// be dropped by the fetch). A fetch that meets such stale ids returns
// fewer jobs than it asked for; the jobs behind them still run at once,
// not at the mover's next announcement (IdleScan, 5 s with the default
// ScanInterval). REDEQ_CONTROL=1 runs it with nothing deleted.
func testDeletedJobsInBacklogDelayNoLiveJob(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.ScanInterval = time.Second // the default
	cfg.Concurrency = 1
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx)) // a producer that moves

	const n = 40
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	testutil.Eventually(t, 5*time.Second, "all ready", func() bool { return stats(t, e.c, "t").Ready == n })
	// Paid orders: every other job is deleted while it waits in ready.
	kept := map[string]bool{}
	for i := range n {
		id := fmt.Sprint("j", i)
		if i%2 == 0 && os.Getenv("REDEQ_CONTROL") == "" {
			_, err := e.c.Delete(ctx, "t", id)
			require.NoError(t, err)
		} else {
			kept[id] = true
		}
	}
	t.Logf("ready list length after deletes: %d", e.rdb.LLen(ctx, keys.ForBucket(cfg.Prefix, "t", 0).Ready()).Val())

	var mu sync.Mutex
	runs := map[string]int{}
	var ran atomic.Int64
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		ran.Add(1)
		ch.Ack()
		return nil
	})
	l.workers = 4
	consumer := e.another(t, nil)
	start := time.Now()
	startWith(t, consumer, l)
	deadline := time.Now().Add(30 * time.Second)
	for ran.Load() < int64(len(kept)) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%d of %d kept jobs ran in %v", ran.Load(), len(kept), took)
	if os.Getenv("REDEQ_CONTROL") != "" {
		return // control: nothing deleted
	}
	require.EqualValues(t, len(kept), ran.Load())
	for id, k := range runs {
		require.True(t, kept[id], "a deleted job ran: %s", id)
		require.Equal(t, 1, k, "job %s ran %d times", id, k)
	}
	require.Less(t, took, time.Second, "20 ready jobs, 4 workers, a 2 ms job: the backlog waited for the mover's announcements")
}

// testStaleEntriesDelayNoLiveJobWithOneWorker: N due jobs are deleted (a
// cancelled campaign) while their ids sit in the ready list; then one live
// job falls due behind them. A fetch reads only as many entries as it may
// take (fetch.lua: LRANGE 0 want-1, want = free workers); a listener with
// Workers 1 still runs the live job soon, not after N round trips.
func testStaleEntriesDelayNoLiveJobWithOneWorker(t *testing.T) {
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
			testutil.Eventually(t, 20*time.Second, "all ready", func() bool { return stats(t, e.c, "t").Ready == n })
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
			testutil.Eventually(t, 5*time.Second, "live ready", func() bool { return state(t, e.c, "t", "live") == redeq.StateReady })

			x := e.another(t, nil)
			l := newListener("t", nil)
			l.workers = workers
			start := time.Now()
			startWith(t, x, l)
			testutil.Eventually(t, 60*time.Second, "live ran", func() bool { return l.count() == 1 })
			wait := l.deliveries()[0].at.Sub(start)
			t.Logf("workers %d: the live job behind %d stale entries started %v after the listener started", workers, n, wait.Round(time.Millisecond))
			require.Less(t, wait, 2*time.Second, "stale entries of deleted jobs held up the live job")
		})
	}
}

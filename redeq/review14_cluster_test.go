package redeq_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// idPerBucket returns one job id per bucket of a topic of n buckets.
func idPerBucket(n int) []string {
	ids := make([]string, n)
	left := n
	for i := 0; left > 0; i++ {
		id := fmt.Sprint("j", i)
		if b := bucketOf(id, n); ids[b] == "" {
			ids[b] = id
			left--
		}
	}
	return ids
}

// TestReview14HungNodeDelaysRecoveryOfManyBuckets attacks promise 3 with
// one crashed consumer whose topic has 64 buckets over 3 masters; one
// master (not the alive set's) hangs (CLIENT PAUSE ALL). The reaper
// recovers the buckets 8 at a time, each call "bounded by
// max(ConsumerTimeout/5, 1 s)" (consumer/reaper.go recoverCallTimeout)
// through a ctx deadline; go-redis does not cut a read short at a ctx
// deadline unless the client sets ContextTimeoutEnabled (off by default),
// so each call to the hung node holds one of the 8 slots for ReadTimeout
// (3 s). About 21 buckets live on the hung node: jobs on the healthy nodes
// whose buckets come after the first 8 hung ones wait 3 s per round.
//
// R14_CTX_TIMEOUTS=1 runs it with ContextTimeoutEnabled on the client,
// to confirm the cause: it then passes.
func TestReview14HungNodeDelaysRecoveryOfManyBuckets(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	rc, be := privateCluster(t, 3)
	if os.Getenv("R14_CTX_TIMEOUTS") != "" {
		be = clusterBackend(rc.Addrs, true)
	}
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 64
	e := setup(t, be, cfg)
	ids := idPerBucket(64)
	for _, id := range ids {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
	}
	require.NoError(t, e.c.Start(ctx)) // the one client: it moves and reaps
	waitFor(t, 10*time.Second, "all due", func() bool { return stats(t, e.c, "t").Ready == 64 })
	for b := range 64 {
		items, _, err := ready.Fetch(ctx, e.rdb, cfg.Prefix, "t", b, "c1", 10, true)
		require.NoError(t, err)
		require.Len(t, items, 1)
	}
	time.Sleep(2 * cfg.ConsumerTimeout) // the reaper has looked for long, the deliveries are old

	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	var hung string
	for _, id := range ids {
		if n := nodeOf(t, e.rdb, keys.ForBucket(cfg.Prefix, "t", bucketOf(id, 64)).Pool()); n != aliveNode {
			hung = n
			break
		}
	}
	var healthy []string
	for _, id := range ids {
		if nodeOf(t, e.rdb, keys.ForBucket(cfg.Prefix, "t", bucketOf(id, 64)).Pool()) != hung {
			healthy = append(healthy, id)
		}
	}
	t.Logf("alive set on %s; %d of 64 buckets on the hung node %s", aliveNode, 64-len(healthy), hung)
	pauseNode(t, hung, 12*time.Second, "ALL") // Redis 7.0 pauses CLIENT UNPAUSE too: it ends by itself

	// c1 crashed.
	require.NoError(t, e.rdb.HSet(ctx, keys.AliveTopics(cfg.Prefix), "c1", keys.Address("t", 64)).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, keys.Alive(cfg.Prefix), redis.Z{Score: 1, Member: "c1"}).Err())
	died := time.Now()
	back := map[string]time.Duration{}
	for time.Since(died) < 11*time.Second && len(back) < len(healthy) {
		for _, id := range healthy {
			if _, ok := back[id]; ok {
				continue
			}
			k := keys.ForBucket(cfg.Prefix, "t", bucketOf(id, 64))
			if e.rdb.HGet(ctx, k.State(), id).Val() == "r" {
				back[id] = time.Since(died)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	var last time.Duration
	for _, d := range back {
		last = max(last, d)
	}
	t.Logf("%d of %d jobs on healthy nodes back in ready; the last after %v", len(back), len(healthy), last)

	// The hung node answers again, with the reaper's late calls queued:
	// every job comes back once, counted once, none lost.
	time.Sleep(time.Until(died.Add(12 * time.Second)))
	waitFor(t, 20*time.Second, "all 64 back", func() bool { return stats(t, e.c, "t").Ready == 64 })
	for _, id := range ids {
		j, err := e.c.Get(ctx, "t", id)
		require.NoError(t, err)
		require.Equalf(t, 1, j.Recoveries, "job %s counted %d recoveries", id, j.Recoveries)
		require.Zero(t, j.Attempt)
	}
	ready := map[string]int{}
	for b := range 64 {
		for _, id := range e.rdb.LRange(ctx, keys.ForBucket(cfg.Prefix, "t", b).Ready(), 0, -1).Val() {
			ready[id]++
		}
	}
	for _, id := range ids {
		require.Equalf(t, 1, ready[id], "job %s is %d times in its ready list", id, ready[id])
	}
	limit := cfg.ConsumerTimeout + 3*time.Second
	require.Len(t, back, len(healthy), "jobs on healthy nodes did not come back within 11 s")
	require.LessOrEqualf(t, last, limit, "jobs of a crashed consumer on healthy nodes waited %v (limit %v) behind a hung node they do not live on", last, limit)
}

// TestReview14HungNodeStallsListenerOnHealthyNodes attacks promise 3 ("a
// node that hangs delays only the jobs stored on that node") for a live
// consumer: one listener, 64 buckets over 3 masters, a steady stream of
// 10 ms jobs. One master (not the alive set's) hangs for 12 s. The jobs on
// the two healthy masters must keep running: neither a fetch from a hung
// bucket nor the outcome of a job stored there may hold up the others.
func TestReview14HungNodeStallsListenerOnHealthyNodes(t *testing.T) {
	t.Parallel() // its own Redis: it runs beside the other fault tests
	_, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 64
	e := setup(t, be, cfg)
	ids := idPerBucket(64)
	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	nodeOfBucket := bucketNodes(t, e, "t", 64)
	var hung string
	for _, n := range nodeOfBucket {
		if n != aliveNode {
			hung = n
			break
		}
	}
	var hungIDs, healthyIDs []string
	for b, id := range ids {
		if nodeOfBucket[b] == hung {
			hungIDs = append(hungIDs, id)
		} else {
			healthyIDs = append(healthyIDs, id)
		}
	}

	var healthyRuns atomic.Int64
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		if nodeOfBucket[bucketOf(job.ID, 64)] != hung {
			healthyRuns.Add(1)
		}
		time.Sleep(10 * time.Millisecond)
		ch.Ack()
		return nil
	})
	l.workers = 8
	consumer := e.another(t, nil)
	startWith(t, consumer, l)
	require.NoError(t, e.c.Start(ctx))

	// Streams of Adds: one over the healthy buckets, one over the hung
	// node's (stopped when it hangs: an Add there would wait for it). An id
	// is added again once its last run was acked (ErrJobExists before).
	stop, stopHung := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	stream := func(stop chan struct{}, pick []string) {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_ = e.c.Add(ctx, &redeq.Job{Topic: "t", ID: pick[i%len(pick)]})
		}
	}
	wg.Go(func() { stream(stop, healthyIDs) })
	wg.Go(func() { stream(stopHung, hungIDs) })
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(3 * time.Second)
	before := healthyRuns.Load()
	require.Greater(t, before, int64(100), "the listener runs")

	close(stopHung)
	pauseNode(t, hung, 12*time.Second, "ALL")
	perSec := perSecond(&healthyRuns, 10*time.Second)
	t.Logf("%d of 64 buckets on the hung node %s; runs of jobs on healthy nodes: %d in the 3 s before, per second while it hangs: %v",
		len(hungIDs), hung, before, perSec)
	stalled := 0
	for _, n := range perSec {
		if n < 10 {
			stalled++
		}
	}
	require.LessOrEqualf(t, stalled, 1, "the listener ran fewer than 10 jobs stored on healthy nodes in %d of the 10 s a node it does not need hung: %v", stalled, perSec)
}

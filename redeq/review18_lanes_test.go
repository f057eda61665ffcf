package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview18SettleLaneFillsAndBlocksOtherBuckets attacks promise 1: the
// outcome of a job whose bucket's node is in trouble does not delay other
// buckets' outcomes. A 3-master cluster with WaitReplicas 1: the replica of
// the master holding bucket 0 is stopped (SIGSTOP), so every settle of that
// master's buckets fails with ErrNotReplicated and is retried, while the
// fetches from those buckets (which do not wait for replicas) go on. The
// "sick" buckets' lane fills, the single settler goroutine then blocks
// handing it one more outcome (consumer/runner.go settle -> send), and the
// jobs of the healthy masters are neither settled nor even run. Fixed:
// the runner holds at most twice its workers' deliveries of a bucket, so
// it stops fetching from the sick buckets and their lane never fills.
func TestReview18SettleLaneFillsAndBlocksOtherBuckets(t *testing.T) {
	t.Parallel()
	rc, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 8
	cfg.WaitReplicas = 1
	cfg.WaitTimeout = 50 * time.Millisecond
	e := setup(t, be, cfg)
	nodes := bucketNodes(t, e, "t", 8)
	sickNode := nodes[0]
	sick := map[int]bool{}
	for b, n := range nodes {
		sick[b] = n == sickNode
	}
	var sickIDs, healthyIDs []string
	for i := 0; len(sickIDs) < 60 || len(healthyIDs) < 20; i++ {
		id := fmt.Sprint("j", i)
		if sick[bucketOf(id, 8)] {
			if len(sickIDs) < 60 {
				sickIDs = append(sickIDs, id)
			}
		} else if len(healthyIDs) < 20 {
			healthyIDs = append(healthyIDs, id)
		}
	}
	replica := rc.ReplicaOf(sickNode)
	require.NotNil(t, replica)
	pid := serverPid(t, replica)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	var mu sync.Mutex
	ran := map[string]int{}
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		mu.Lock()
		ran[job.ID]++
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		ch.Ack()
		return nil
	})
	l.workers = 4
	a := e.another(t, nil)
	startWith(t, a, l)

	for _, id := range sickIDs {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Delay: 1500 * time.Millisecond}))
	}
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	time.Sleep(3 * time.Second) // the sick jobs fall due and run; their settles fail

	countRan := func(ids []string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, id := range ids {
			if ran[id] > 0 {
				n++
			}
		}
		return n
	}
	acked := func(ids []string) int {
		n := 0
		for _, id := range ids {
			if _, err := e.c.Get(ctx, "t", id); errors.Is(err, redeq.ErrJobNotFound) {
				n++
			}
		}
		return n
	}
	sickRan := countRan(sickIDs)
	addedAt := time.Now()
	for _, id := range healthyIDs {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
	}
	time.Sleep(3 * time.Second)
	hRan, hAcked := countRan(healthyIDs), acked(healthyIDs)
	t.Logf("sick buckets %v: %d/%d sick jobs ran before the healthy ones were added; 3 s after adding %d jobs to healthy buckets: %d ran, %d acked (%.1fs)",
		sick, sickRan, len(sickIDs), len(healthyIDs), hRan, hAcked, time.Since(addedAt).Seconds())

	for _, g := range goroutineStacks() {
		if strings.Contains(g, "consumer.(*runner).settle(") || strings.Contains(g, "consumer.(*runner).submit(") {
			first := strings.SplitN(g, "\n", 4)
			t.Logf("blocked: %s", strings.Join(first[:min(len(first), 3)], " | "))
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	began := time.Now()
	err := a.Shutdown(sctx)
	took := time.Since(began)
	t.Logf("Shutdown(1s) with outcomes waiting took %v: %v", took, err)

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	// None lost: another consumer runs every job that was not acked.
	b := e.another(t, nil)
	l2 := newListener("t", nil)
	l2.workers = 4
	startWith(t, b, l2)
	all := append(append([]string(nil), sickIDs...), healthyIDs...)
	waitFor(t, 20*time.Second, "every job acked", func() bool { return acked(all) == len(all) })

	require.Less(t, took, 2*time.Second, "Shutdown overran its ctx by more than a grace")
	require.Equal(t, len(healthyIDs), hAcked, "healthy buckets' outcomes held up by the sick node's lane")
}

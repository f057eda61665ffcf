package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestSickBucketsHoldUpNoOtherBucket: the outcome of a job whose bucket's
// node is in trouble does not delay other buckets' jobs or outcomes. A
// 3-master cluster with WaitReplicas 1: the replica of the master holding
// bucket 0 is stopped (SIGSTOP), so every settle of that master's buckets
// fails with ErrNotReplicated and is retried, while the fetches from those
// buckets (which do not wait for replicas) go on. The runner holds at most
// twice its workers' deliveries of a bucket, so it stops fetching from the
// sick buckets, their settle lane never fills, and the jobs of the healthy
// masters run and are settled.
func TestSickBucketsHoldUpNoOtherBucket(t *testing.T) {
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
	testutil.Eventually(t, 20*time.Second, "every job acked", func() bool { return acked(all) == len(all) })

	require.Less(t, took, 2*time.Second, "Shutdown overran its ctx by more than a grace")
	require.Equal(t, len(healthyIDs), hAcked, "healthy buckets' outcomes held up by the sick node's lane")
}

// settleReplyLost runs every other settle script and then reports its
// reply lost (an i/o timeout after Redis applied it).
type settleReplyLost struct{ n, lost atomic.Int64 }

func (h *settleReplyLost) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *settleReplyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func isSettle(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 5 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(a[0]))
	// The settle script's keys start with the pool and the consumer's
	// in-flight set, and its third is the bucket's ZSET (the recover
	// script's start with the in-flight set).
	return (name == "evalsha" || name == "eval") && len(a) >= 6 &&
		strings.HasSuffix(fmt.Sprint(a[3]), ":pool") && strings.Contains(fmt.Sprint(a[4]), ":inflight:") &&
		strings.HasSuffix(fmt.Sprint(a[5]), ":bucket")
}

func (h *settleReplyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isSettle(cmd) {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		if h.n.Add(1)%2 == 0 {
			return nil
		}
		h.lost.Add(1)
		err := errors.New("read tcp: i/o timeout (simulated lost settle reply)")
		cmd.SetErr(err)
		return err
	}
}

// TestOutcomesAppliedOnceDespiteLostSettleReplies: every other settle's
// reply is lost after Redis applied it, so the lane applies each batch
// again; each outcome still counts once. Jobs f* always fail (per-job
// intervals 300 ms, 500 ms, MaxRetries 2), jobs r* rejoin once after
// 300 ms then ack, jobs a* ack. Checked: each retry and rejoin comes no
// earlier than its interval after the previous run ended; attempts count
// 0, 1, 2 with no gap or repeat; FinalRetry runs once per f job; every f
// job ends dead, every other job gone; nothing is parked.
func TestOutcomesAppliedOnceDespiteLostSettleReplies(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	e := setup(t, be, cfg)
	type run struct {
		attempt    int
		start, end time.Time
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	rejoined := map[string]bool{}
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		r := run{attempt: job.Attempt, start: time.Now()}
		time.Sleep(10 * time.Millisecond)
		var err error
		switch job.ID[0] {
		case 'f':
			err = errors.New("boom")
		case 'r':
			mu.Lock()
			first := !rejoined[job.ID]
			rejoined[job.ID] = true
			mu.Unlock()
			if first {
				ch.Rejoin(300 * time.Millisecond)
			} else {
				ch.Ack()
			}
		default:
			ch.Ack()
		}
		r.end = time.Now()
		mu.Lock()
		runs[job.ID] = append(runs[job.ID], r)
		mu.Unlock()
		return err
	})
	l.workers = 4
	hook := &settleReplyLost{}
	c := e.hooked(t, hook)
	startWith(t, c, l)
	intervals := []time.Duration{300 * time.Millisecond, 500 * time.Millisecond}
	var ids []string
	for i := range 10 {
		for _, p := range []string{"f", "r", "a"} {
			id := fmt.Sprint(p, i)
			ids = append(ids, id)
			j := &redeq.Job{Topic: "t", ID: id}
			if p == "f" {
				j.MaxRetries, j.RetryIntervals = 2, intervals
			}
			require.NoError(t, e.c.Add(ctx, j))
		}
	}
	testutil.Eventually(t, 15*time.Second, "all settled", func() bool {
		st := stats(t, e.c, "t")
		return st.Pool == st.Dead && st.Dead >= 10 && st.InFlight == 0
	})
	time.Sleep(time.Second) // anything early or doubled would show now
	st := stats(t, e.c, "t")
	mu.Lock()
	defer mu.Unlock()
	var bad []string
	fRuns := 0
	for _, id := range ids {
		rs := runs[id]
		switch id[0] {
		case 'f':
			fRuns = len(rs)
			for k := 1; k < len(rs); k++ {
				gap := rs[k].start.Sub(rs[k-1].end)
				if rs[k].attempt != k || gap < intervals[min(k-1, len(intervals)-1)] {
					bad = append(bad, fmt.Sprintf("%s run %d attempt %d gap %v", id, k, rs[k].attempt, gap))
				}
			}
		case 'r':
			if len(rs) != 2 || rs[1].attempt != 0 || rs[1].start.Sub(rs[0].end) < 300*time.Millisecond {
				bad = append(bad, fmt.Sprintf("%s runs %+v", id, rs))
			}
		default:
			if len(rs) != 1 {
				bad = append(bad, fmt.Sprintf("%s ran %d times", id, len(rs)))
			}
		}
	}
	finals := map[string]int{}
	l.mu.Lock()
	for _, j := range l.finals {
		finals[j.ID]++
	}
	l.mu.Unlock()
	t.Logf("settles %d, replies lost %d; f jobs ran %d times each; finals %v; stats %+v; bad %v",
		hook.n.Load(), hook.lost.Load(), fRuns, finals, st, bad)
	require.Positive(t, hook.lost.Load())
	require.Empty(t, bad)
	require.Len(t, finals, 10)
	for id, n := range finals {
		require.Equal(t, 1, n, id)
	}
	require.Equal(t, int64(10), st.Dead)
	require.Equal(t, int64(10), st.Pool)
	require.Zero(t, st.UnAck)
}

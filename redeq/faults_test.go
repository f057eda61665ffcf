package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestCorruptEntryGoesDead: a pool entry redeq cannot read sends that job
// to the dead set and the worker goes on with the next job.
func TestCorruptEntryGoesDead(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "bad", Delay: 100 * time.Millisecond}))
		require.NoError(t, e.rdb.HSet(ctx, keys.ForBucket(e.cfg.Prefix, "t", 0).Pool(), "bad", "not an envelope").Err())
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "good", Delay: 150 * time.Millisecond}))
		l := newListener("t", nil)
		l.workers = 1
		startWith(t, e.c, l)
		testutil.Eventually(t, 3*time.Second, "good job ran", func() bool { return l.byID()["good"] == 1 })
		testutil.Eventually(t, 3*time.Second, "corrupt job dead", func() bool { return stats(t, e.c, "t").Dead == 1 })
		require.NotContains(t, l.byID(), "bad")
		dead, err := e.c.DeadJobs(ctx, "t", 10)
		require.NoError(t, err)
		require.Equal(t, "bad", dead[0].ID)
		require.Contains(t, dead[0].Reason, "corrupt envelope")
		// Deleting it removes its reason too.
		_, err = e.c.Delete(ctx, "t", "bad")
		require.NoError(t, err)
		require.Zero(t, e.rdb.Exists(ctx, keys.ForBucket(e.cfg.Prefix, "t", 0).Reasons()).Val())
	})
}

// TestBucketsSpreadOverMasters: on a cluster, a topic with 8 buckets puts
// its buckets on more than one master.
func TestBucketsSpreadOverMasters(t *testing.T) {
	be := testutil.Cluster(t)
	ctx := context.Background()
	rdb := be.New(t).(*redis.ClusterClient)
	masters := map[string]bool{}
	for b := range 8 {
		k := keys.ForBucket("redeq", "orders", b).Pool()
		slot, err := rdb.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		node, err := rdb.MasterForKey(ctx, k)
		require.NoError(t, err)
		masters[node.Options().Addr] = true
		t.Logf("bucket %d: slot %d on %s", b, slot, node.Options().Addr)
	}
	require.Greater(t, len(masters), 1)
}

// TestRedisOutage: the server stops for 5s under load. Add returns errors
// meanwhile, never a half-written job; the background loops recover
// without a restart and every job whose Add succeeded runs.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	cfg := testutil.Config(t)
	opts := &redis.Options{MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}
	c, err := redeq.New(srv.Client(opts), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	l := newListener("t", nil)
	startWith(t, c, l)

	ctx := context.Background()
	var mu sync.Mutex
	var added, failed []string
	stop := make(chan struct{})
	var producing sync.WaitGroup
	producing.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			id := fmt.Sprint(i)
			err := c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Delay: time.Duration(i%20) * 10 * time.Millisecond})
			mu.Lock()
			if err == nil {
				added = append(added, id)
			} else {
				failed = append(failed, id)
			}
			mu.Unlock()
		}
	})
	time.Sleep(time.Second)
	srv.Stop()
	time.Sleep(5 * time.Second)
	srv.Start()
	time.Sleep(time.Second)
	close(stop)
	producing.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, failed, "Add must report the outage")
	t.Logf("%d adds succeeded, %d failed during the outage", len(added), len(failed))
	missing := func() []string {
		ran := l.byID()
		var out []string
		for _, id := range added {
			if ran[id] == 0 {
				out = append(out, id)
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range missing() {
		job, err := c.Get(ctx, "t", id)
		if err != nil {
			t.Errorf("job %s never ran: %v", id, err)
		} else {
			t.Errorf("job %s never ran: %s, due %v", id, job.State, job.RunAt)
		}
	}
	if t.Failed() {
		st := stats(t, c, "t")
		t.Fatalf("stats %+v", st)
	}
	// A failed Add wrote nothing, or (its reply lost) all of the job.
	k := keys.ForBucket(cfg.Prefix, "t", bucket.Of("x", 1))
	for _, id := range failed {
		inPool := srv.Client(nil).HExists(ctx, k.Pool(), id).Val()
		ran := l.byID()[id] > 0
		require.True(t, !inPool || ran || srv.Client(nil).ZScore(ctx, k.Scheduled(), id).Err() == nil, id)
	}
	testutil.Eventually(t, 10*time.Second, "pool drained", func() bool { return stats(t, c, "t").Pool == 0 })
}

// loseFirstFetchReply lets the first fetch script run on the server and
// then replaces its reply with an error, as a network fault would.
type loseFirstFetchReply struct{ done atomic.Bool }

func (h *loseFirstFetchReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseFirstFetchReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 3 && fmt.Sprint(args[0]) == "evalsha" && strings.HasSuffix(fmt.Sprint(args[3]), ":ready") &&
			err == nil && h.done.CompareAndSwap(false, true) {
			lost := errors.New("i/o timeout (simulated: reply lost)")
			cmd.SetErr(lost)
			return lost
		}
		return err
	}
}

func (h *loseFirstFetchReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLostFetchReply: a fetch whose reply is lost moved jobs into this
// consumer's in-flight list without the consumer knowing; they must still
// run, although the consumer stays alive (so the reaper never steps in).
func TestLostFetchReply(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hook := &loseFirstFetchReply{}
		c := e.hooked(t, hook)
		for i := range 5 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint(i)}))
		}
		l := newListener("t", nil)
		startWith(t, c, l)
		testutil.Eventually(t, 5*time.Second, "every job ran", func() bool { return len(l.byID()) == 5 && stats(t, e.c, "t").Pool == 0 })
		require.True(t, hook.done.Load(), "a fetch reply was lost")
		require.Zero(t, stats(t, e.c, "t").InFlight)
	})
}

// retryFirstFetch runs the first fetch script twice and returns the second
// reply, as go-redis does when the first reply is lost and its retry
// succeeds: the client sees no error.
type retryFirstFetch struct{ done atomic.Bool }

func (h *retryFirstFetch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *retryFirstFetch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) > 3 && fmt.Sprint(args[0]) == "evalsha" && strings.HasSuffix(fmt.Sprint(args[3]), ":ready") &&
			err == nil && fetchedSome(cmd) && h.done.CompareAndSwap(false, true) {
			return next(ctx, cmd) // the first reply, with its jobs, is dropped
		}
		return err
	}
}

func fetchedSome(cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return false
	}
	v, _ := c.Val().([]any)
	return len(v) > 0
}

func (h *retryFirstFetch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHiddenLostFetch: a fetch whose reply was lost and silently retried
// leaves jobs in this consumer's in-flight list that it never learns of;
// the periodic sweep still hands them back and they run.
func TestHiddenLostFetch(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hook := &retryFirstFetch{}
		rdb := e.be.New(t)
		rdb.AddHook(hook)
		cfg := e.cfg
		c, err := redeq.New(rdb, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		for i := range 6 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint(i)}))
		}
		l := newListener("t", nil)
		l.workers = 2 // the first fetch takes some jobs, the hidden retry others
		startWith(t, c, l)
		testutil.Eventually(t, 10*time.Second, "every job ran", func() bool { return len(l.byID()) == 6 && stats(t, e.c, "t").Pool == 0 })
		require.True(t, hook.done.Load(), "a fetch was run twice")
		require.Zero(t, stats(t, e.c, "t").InFlight)
	})
}

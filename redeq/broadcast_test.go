package redeq_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestBroadcastBurstReachesEveryClient: 40 broadcast jobs of 1 MiB fall due
// at once. Together they are past Redis's default pub/sub output buffer
// limit (32 MB), so a mover that published the envelopes would get every
// subscriber disconnected and lose all of them. Every client must receive
// every job once, body intact.
func TestBroadcastBurstReachesEveryClient(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var bls []*sizeListener
		for i := range 2 {
			c := e.c
			if i > 0 {
				c = e.another(t, nil)
			}
			bl := &sizeListener{topics: []string{"cache"}, got: map[string]int{}}
			bls = append(bls, bl)
			require.NoError(t, c.RegisterBroadcast(bl))
			require.NoError(t, c.Start(ctx))
		}
		const n = 40
		body := bytes.Repeat([]byte{'x'}, 1<<20)
		at := time.Now().Add(2 * time.Second) // all stored before the first falls due
		jobs := make([]*redeq.Job, n)
		for i := range jobs {
			jobs[i] = &redeq.Job{Topic: "cache", ID: fmt.Sprint("big-", i), Body: body, Broadcast: true, RunAt: at}
		}
		require.NoError(t, e.c.AddBatch(ctx, jobs))
		for i, bl := range bls {
			testutil.Eventually(t, 30*time.Second, fmt.Sprintf("client %d received all %d", i, n), func() bool { return bl.distinct() == n })
		}
		for _, bl := range bls {
			bl.mu.Lock()
			for id, runs := range bl.got {
				require.Equal(t, 1, runs, "job %s ran more than once", id)
			}
			require.Zero(t, bl.bad, "bodies not intact")
			bl.mu.Unlock()
		}
		require.Zero(t, stats(t, e.c, "cache").Pool)
	})
}

// sizeListener records, per id, how often a broadcast arrived, and counts
// bodies that are not 1 MiB of 'x' (keeping no body).
type sizeListener struct {
	topics []string
	mu     sync.Mutex
	got    map[string]int
	bad    int
}

func (b *sizeListener) Topics() []string { return b.topics }

func (b *sizeListener) OnBroadcast(ctx context.Context, job *redeq.Job) {
	ok := len(job.Body) == 1<<20 && bytes.Count(job.Body, []byte{'x'}) == 1<<20
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got[job.ID]++
	if !ok {
		b.bad++
	}
}

func (b *sizeListener) distinct() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.got)
}

// stuckListener blocks in OnBroadcast, ignoring its context, until release
// is closed.
type stuckListener struct {
	topics  []string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newStuckListener(t *testing.T, topics ...string) *stuckListener {
	s := &stuckListener{topics: topics, entered: make(chan struct{}, 1), release: make(chan struct{})}
	// Let the handler go at the end of the test; the client's Shutdown
	// then ends its goroutine before the leak check.
	t.Cleanup(s.unblock)
	return s
}

func (s *stuckListener) Topics() []string { return s.topics }

func (s *stuckListener) OnBroadcast(ctx context.Context, job *redeq.Job) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
}

func (s *stuckListener) unblock() { s.once.Do(func() { close(s.release) }) }

// TestShutdownBoundedByStuckBroadcastHandler: a broadcast handler that
// ignores its context does not make Shutdown hang; Shutdown returns once
// ShutdownTimeout has passed (plus a short grace).
func TestShutdownBoundedByStuckBroadcastHandler(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.another(t, func(c *config.Config) { c.ShutdownTimeout = 200 * time.Millisecond })
		s := newStuckListener(t, "cache")
		require.NoError(t, c.RegisterBroadcast(s))
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "cache", ID: "stuck", Broadcast: true}))
		select {
		case <-s.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("broadcast handler never ran")
		}
		done := make(chan error, 1)
		go func() { done <- c.Shutdown(ctx) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			s.unblock()
			<-done
			t.Fatal("Shutdown waited for a broadcast handler that ignores its context")
		}
	})
}

// TestFullBroadcastQueueKeepsWakeUps: while a broadcast handler is stuck
// and more broadcast jobs fall due than a client queues, the goroutine that
// routes pub/sub messages must not block: wake-ups still reach the mover,
// so a plain job runs long before the one-minute fallback scan.
func TestFullBroadcastQueueKeepsWakeUps(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.another(t, func(c *config.Config) {
			c.ScanInterval = time.Minute
			c.PollTimeout = time.Minute
			c.LockExpiry = 2 * time.Minute
		})
		s := newStuckListener(t, "cache")
		require.NoError(t, c.RegisterBroadcast(s))
		l := newListener("orders", nil)
		startWith(t, c, l)
		const n = 2000
		jobs := make([]*redeq.Job, n)
		for i := range jobs {
			jobs[i] = &redeq.Job{Topic: "cache", ID: fmt.Sprint("b-", i), Broadcast: true}
		}
		require.NoError(t, c.AddBatch(ctx, jobs))
		testutil.Eventually(t, 60*time.Second, "broadcast jobs moved", func() bool { return stats(t, c, "cache").Pool == 0 })
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "orders", ID: "o-1", Delay: 50 * time.Millisecond}))
		testutil.Eventually(t, 20*time.Second, "plain job ran while broadcasts were stuck", func() bool { return l.count() == 1 })
	})
}

// TestRegisterBroadcastRefusesDuplicates: a listener naming a topic twice,
// or registered twice, would run each job twice in one client; both are
// refused, naming the problem, and a refused call registers nothing.
func TestRegisterBroadcastRefusesDuplicates(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		twice := &bcastListener{topics: []string{"cache", "prices", "cache"}}
		err := e.c.RegisterBroadcast(twice)
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.ErrorContains(t, err, `"cache"`)

		bl := &bcastListener{topics: []string{"cache"}}
		require.NoError(t, e.c.RegisterBroadcast(bl))
		err = e.c.RegisterBroadcast(bl)
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.ErrorContains(t, err, "registered twice")

		// Another listener of the same topic is a listener of its own.
		other := &bcastListener{topics: []string{"cache"}}
		require.NoError(t, e.c.RegisterBroadcast(other))
		require.NoError(t, e.c.Start(ctx))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "cache", ID: "once", Broadcast: true}))
		testutil.Eventually(t, 5*time.Second, "both listeners ran", func() bool { return bl.count() == 1 && other.count() == 1 })
		require.Zero(t, twice.count(), "a refused listener ran")
	})
}

// TestBroadcastFunc: a function registered with BroadcastFunc runs once
// for each broadcast job of its topics, with the job; a nil function and
// the same listener twice are refused, naming the problem, and a refused
// call registers nothing.
func TestBroadcastFunc(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		got := map[string]int{}
		topics := []string{"cache", "prices"}
		bl := redeq.BroadcastFunc(func(ctx context.Context, job *redeq.Job) {
			mu.Lock()
			defer mu.Unlock()
			got[job.Topic+"/"+job.ID+"/"+string(job.Body)]++
		}, topics...)
		topics[0] = "changed" // the listener keeps its own copy
		require.Equal(t, []string{"cache", "prices"}, bl.Topics())

		err := e.c.RegisterBroadcast(redeq.BroadcastFunc(nil, "cache"))
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.ErrorContains(t, err, "nil function")
		require.NoError(t, e.c.RegisterBroadcast(bl))
		err = e.c.RegisterBroadcast(bl)
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.ErrorContains(t, err, "registered twice")

		require.NoError(t, e.c.Start(ctx))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "cache", ID: "a", Body: []byte("1"), Broadcast: true}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "prices", ID: "b", Body: []byte("2"), Broadcast: true}))
		want := map[string]int{"cache/a/1": 1, "prices/b/2": 1}
		testutil.Eventually(t, 5*time.Second, "both broadcasts ran", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == len(want)
		})
		time.Sleep(200 * time.Millisecond) // a second run (the refused listeners) would show by now
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, want, got)
	})
}

// TestBroadcastNoticeMustMatchItsJob: a client reads a broadcast's envelope
// by the notice the mover published. A notice whose sequence or created
// time does not match what the mover kept (a job re-added under the same
// id, or a forged message) delivers nothing; a re-added job is delivered
// when it falls due, not before.
func TestBroadcastNoticeMustMatchItsJob(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		bl := &bcastListener{topics: []string{"cache"}}
		require.NoError(t, e.c.RegisterBroadcast(bl))
		require.NoError(t, e.c.Start(ctx))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "cache", ID: "x", Body: []byte("first"), Broadcast: true}))
		testutil.Eventually(t, 5*time.Second, "first delivered", func() bool { return bl.count() == 1 })
		first := bl.jobs[0]
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "cache", ID: "x", Body: []byte("second"), Broadcast: true, Delay: time.Hour}))

		addr := keys.Address("cache", 0)
		created := first.CreatedAt.UnixMilli()
		ch := keys.BroadcastChannel(e.cfg.Prefix)
		for _, msg := range []string{
			fmt.Sprintf("%s\nx\n2\n%d", addr, created),   // a sequence never published
			fmt.Sprintf("%s\nx\n1\n%d", addr, created+1), // the wrong created time
			fmt.Sprintf("%s\ny\n1\n%d", addr, created),   // another id
			fmt.Sprintf("%s\nx\n1", addr),                // malformed
			"garbage",
		} {
			require.NoError(t, e.rdb.Publish(ctx, ch, msg).Err())
		}
		// A last, valid job: once it arrives, the forged notices were handled.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "cache", ID: "last", Broadcast: true}))
		testutil.Eventually(t, 5*time.Second, "last delivered", func() bool { return bl.count() == 2 })
		require.Equal(t, "last", bl.jobs[1].ID)
		got, err := e.c.Get(ctx, "cache", "x")
		require.NoError(t, err)
		require.Equal(t, []byte("second"), got.Body)
		require.Equal(t, redeq.StateScheduled, got.State)
	})
}

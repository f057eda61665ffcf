package redeq_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// gauge measures how many handlers run at once, and the most that ever did.
type gauge struct {
	now, peak atomic.Int64
}

func (g *gauge) enter() {
	n := g.now.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (g *gauge) leave() { g.now.Add(-1) }

// TestMaxRunningHoldsAcrossClients: ten clients of sixteen workers each
// listen to a topic with MaxRunning 5: the handlers never run more than
// five jobs at once, measured by the handlers themselves, and they do
// reach five; every job runs once.
func TestMaxRunningHoldsAcrossClients(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const jobs = 150
		var g gauge
		var done atomic.Int64
		h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			g.enter()
			time.Sleep(10 * time.Millisecond)
			g.leave()
			done.Add(1)
			ch.Ack()
			return nil
		}
		for i := range jobs {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
		}
		for i := range 10 {
			c := e.c
			if i > 0 {
				c = e.another(t, nil)
			}
			startWith(t, c, redeq.ListenerFunc("t", h, redeq.WithWorkers(16), redeq.WithMaxRunning(5)))
		}
		testutil.Eventually(t, 60*time.Second, "every job ran", func() bool { return done.Load() >= jobs })
		require.LessOrEqual(t, g.peak.Load(), int64(5), "jobs running at once")
		require.Equal(t, int64(5), g.peak.Load(), "the limit is reached")
		require.Equal(t, int64(jobs), done.Load(), "every job ran once")
		testutil.Eventually(t, 10*time.Second, "every slot is free", func() bool { return stats(t, e.c, "t").Running == 0 })
	})
}

// TestLimitKeyHoldsTheHotKeyAlone: with MaxRunning 1 per value of the
// header "tenant", a hot tenant whose 100 jobs were added first, and whose
// first job runs until every other tenant's job has run, holds up no one:
// the jobs of 1,000 other tenants run meanwhile, several at once. The hot
// tenant never runs two jobs at once, and all its jobs run in the end.
func TestLimitKeyHoldsTheHotKeyAlone(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const hotJobs, cold = 100, 1000
		var hot, others gauge
		var hotDone, coldDone atomic.Int64
		coldRan := make(chan struct{})
		var once sync.Once
		h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if job.Headers["tenant"] == "hot" {
				hot.enter()
				if job.ID == "hot0" {
					select {
					case <-coldRan:
					case <-ctx.Done():
						hot.leave()
						return ctx.Err()
					}
				}
				hot.leave()
				hotDone.Add(1)
			} else {
				others.enter()
				time.Sleep(time.Millisecond)
				others.leave()
				if coldDone.Add(1) == cold {
					once.Do(func() { close(coldRan) })
				}
			}
			ch.Ack()
			return nil
		}
		var batch []*redeq.Job
		for i := range hotJobs {
			batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("hot", i), Headers: map[string]string{"tenant": "hot"}})
		}
		for i := range cold {
			batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("c", i), Headers: map[string]string{"tenant": fmt.Sprint("tenant", i)}})
		}
		require.NoError(t, e.c.AddBatch(ctx, batch[:hotJobs]))
		require.NoError(t, e.c.AddBatch(ctx, batch[hotJobs:]))
		cfg := e.cfg
		cfg.ConsumeTimeout = time.Minute
		c, err := redeq.New(e.be.New(t), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		for _, cl := range []*redeq.Client{c, e.another(t, func(c *config.Config) { c.ConsumeTimeout = time.Minute })} {
			startWith(t, cl, redeq.ListenerFunc("t", h, redeq.WithWorkers(16), redeq.WithMaxRunning(1), redeq.WithLimitKey("tenant")))
		}
		select {
		case <-coldRan:
		case <-time.After(60 * time.Second):
			t.Fatalf("the other tenants' jobs are held up: %d of %d ran", coldDone.Load(), cold)
		}
		testutil.Eventually(t, 60*time.Second, "every hot job ran", func() bool { return hotDone.Load() >= hotJobs })
		require.Equal(t, int64(1), hot.peak.Load(), "hot tenant's jobs running at once")
		require.Greater(t, others.peak.Load(), int64(1), "other tenants run side by side")
		require.Equal(t, int64(hotJobs), hotDone.Load())
		require.Equal(t, int64(cold), coldDone.Load())
		testutil.Eventually(t, 10*time.Second, "every limit key is gone", func() bool {
			for _, k := range testutil.Keys(t, e.rdb, e.cfg.Prefix) {
				if strings.Contains(k, ":limit:") && !strings.HasSuffix(k, ":limit:run") {
					t.Logf("left: %s", k)
					return false
				}
			}
			return stats(t, e.c, "t").Running == 0
		})
	})
}

// TestLimitChangedWhileJobsRun: a client with MaxRunning 2 holds two jobs
// running; a client started later with MaxRunning 4 runs two more, not
// four: the limit counts every running job of the topic, whoever fetched
// it and under which limit. Stats shows the limit last started with and
// the slots held.
func TestLimitChangedWhileJobsRun(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var g gauge
		release := make(chan struct{})
		var done atomic.Int64
		h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			g.enter()
			defer g.leave()
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			done.Add(1)
			ch.Ack()
			return nil
		}
		for i := range 12 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
		}
		mod := func(c *config.Config) { c.ConsumeTimeout = time.Minute }
		startWith(t, e.another(t, mod), redeq.ListenerFunc("t", h, redeq.WithWorkers(8), redeq.WithMaxRunning(2)))
		testutil.Eventually(t, 10*time.Second, "two jobs run", func() bool { return g.now.Load() == 2 })
		startWith(t, e.another(t, mod), redeq.ListenerFunc("t", h, redeq.WithWorkers(8), redeq.WithMaxRunning(4)))
		testutil.Eventually(t, 10*time.Second, "four jobs run", func() bool { return g.now.Load() == 4 })
		st := stats(t, e.c, "t")
		require.Equal(t, redeq.Limits{MaxRunning: 4}, st.Limits)
		require.Equal(t, int64(4), st.Running)
		require.Equal(t, int64(8), st.Waiting, "the ready jobs wait for a slot")
		// Give the fetches every chance to overrun the limit.
		for range 5 {
			require.NoError(t, e.rdb.Publish(ctx, keys.ReadyChannel(e.cfg.Prefix), keys.Address("t", 0)).Err())
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, int64(4), g.peak.Load())
		close(release)
		testutil.Eventually(t, 30*time.Second, "every job ran", func() bool { return done.Load() == 12 })
		require.LessOrEqual(t, g.peak.Load(), int64(4))
	})
}

// TestLimitChangedToPerKeyCountsOtherLimitsSlots: a client started with
// MaxRunning 1 per tenant while five jobs of tenant A run under other
// limits (topic-wide MaxRunning, a per-tenant rate alone, MaxRunning per
// another header) starts no job of A until they end: their slots count
// against every value of its header, whose values it cannot tell. Once
// they end it runs A's jobs one at a time, and every job runs. Stats
// counts the jobs it holds back as waiting.
func TestLimitChangedToPerKeyCountsOtherLimitsSlots(t *testing.T) {
	t.Parallel()
	olds := []struct {
		name string
		opts []redeq.ListenerOption
	}{
		{"TopicWideMaxRunning", []redeq.ListenerOption{redeq.WithMaxRunning(5)}},
		{"PerKeyRateAlone", []redeq.ListenerOption{redeq.WithRateLimit(1000, time.Second), redeq.WithLimitKey("tenant")}},
		{"PerKeyMaxRunningOnAnotherHeader", []redeq.ListenerOption{redeq.WithMaxRunning(5), redeq.WithLimitKey("partner")}},
	}
	for _, old := range olds {
		t.Run(old.name, func(t *testing.T) {
			t.Parallel()
			each(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				headers := map[string]string{"tenant": "A", "partner": "P"}
				var oldRuns, newRuns gauge
				var done atomic.Int64
				oldH := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					oldRuns.enter()
					defer oldRuns.leave()
					<-ctx.Done() // until the old client's Shutdown cancels it: the job goes back unspent
					return ctx.Err()
				}
				newH := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					newRuns.enter()
					defer newRuns.leave()
					time.Sleep(5 * time.Millisecond) // work, so that runs could overlap
					done.Add(1)
					ch.Ack()
					return nil
				}
				for i := range 5 {
					require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i), Headers: headers}))
				}
				oldC := e.another(t, func(c *config.Config) { c.ShutdownTimeout = 100 * time.Millisecond })
				startWith(t, oldC, redeq.ListenerFunc("t", oldH, append([]redeq.ListenerOption{redeq.WithWorkers(5)}, old.opts...)...))
				testutil.Eventually(t, 10*time.Second, "five jobs of A run", func() bool { return oldRuns.now.Load() == 5 })
				for i := 5; i < 8; i++ {
					require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i), Headers: headers}))
				}
				startWith(t, e.another(t, nil), redeq.ListenerFunc("t", newH, redeq.WithWorkers(8),
					redeq.WithMaxRunning(1), redeq.WithLimitKey("tenant")))
				// Give the new client's fetches every chance to overrun.
				for range 10 {
					require.NoError(t, e.rdb.Publish(ctx, keys.ReadyChannel(e.cfg.Prefix), keys.Address("t", 0)).Err())
					time.Sleep(30 * time.Millisecond)
				}
				require.Zero(t, newRuns.peak.Load(), "no job of A starts beside five running")
				st := stats(t, e.c, "t")
				require.Equal(t, int64(3), st.Waiting, "the three jobs of A wait for a slot: %+v", st)
				// Its handlers are canceled and their jobs rolled back.
				require.ErrorIs(t, oldC.Shutdown(ctx), context.DeadlineExceeded)
				testutil.Eventually(t, 30*time.Second, "every job ran", func() bool { return done.Load() == 8 })
				require.Equal(t, int64(1), newRuns.peak.Load(), "one job of A at a time")
			})
		})
	}
}

// TestRateLimitHoldsJobsWithoutSpendingAttempts: with at most 3 jobs
// started per minute, a topic of 10 ready jobs starts 3, and the others
// wait where they are: ready, no attempt spent, and counted in
// Stats.Waiting.
func TestRateLimitHoldsJobsWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var started atomic.Int64
		h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			started.Add(1)
			ch.Ack()
			return nil
		}
		for i := range 10 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
		}
		for i := range 3 {
			c := e.c
			if i > 0 {
				c = e.another(t, nil)
			}
			startWith(t, c, redeq.ListenerFunc("t", h, redeq.WithRateLimit(3, time.Minute)))
		}
		testutil.Eventually(t, 10*time.Second, "three jobs start", func() bool { return started.Load() == 3 })
		testutil.Eventually(t, 10*time.Second, "the others are ready", func() bool { return stats(t, e.c, "t").Ready == 7 })
		time.Sleep(300 * time.Millisecond) // fetches that would overrun it had the time to
		require.Equal(t, int64(3), started.Load())
		st := stats(t, e.c, "t")
		require.Equal(t, int64(7), st.Waiting, "the ready jobs wait for the rate: %+v", st)
		for i := range 10 {
			j, err := e.c.Get(ctx, "t", fmt.Sprint("j", i))
			if errors.Is(err, redeq.ErrJobNotFound) {
				continue // acked
			}
			require.NoError(t, err)
			require.Equal(t, 0, j.Attempt, "a held job spends no attempt")
			require.Equal(t, redeq.StateReady, j.State)
		}
		require.Equal(t, redeq.Limits{Rate: 3, Per: time.Minute}, stats(t, e.c, "t").Limits)
	})
}

// TestLimitOptionsRefuseBadInput: a limit of zero or less, a rate period
// of zero or less, an empty limit key, and limits on a topic of several
// buckets are refused at Register with ErrInvalidArgument, naming the
// problem, and register nothing.
func TestLimitOptionsRefuseBadInput(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *redeq.Job, *redeq.Channel) error { return nil }
	cases := []struct {
		name string
		opt  redeq.ListenerOption
		want string
	}{
		{"MaxRunningZero", redeq.WithMaxRunning(0), "max running 0"},
		{"MaxRunningNegative", redeq.WithMaxRunning(-3), "max running -3"},
		{"RateZero", redeq.WithRateLimit(0, time.Second), "rate limit 0"},
		{"PeriodZero", redeq.WithRateLimit(5, 0), "the period must be 1ms to 24h"},
		{"PeriodNegative", redeq.WithRateLimit(5, -time.Second), "the period must be 1ms to 24h"},
		{"EmptyKey", redeq.WithLimitKey(""), "empty header name"},
		{"KeyWithoutLimit", redeq.WithLimitKey("tenant"), "without a limit"},
	}
	c, err := redeq.New(testutil.Backends(t)[0].New(t), testutil.Config(t))
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Register(redeq.ListenerFunc("t", h, tc.opt))
			require.ErrorIs(t, err, redeq.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("SeveralBuckets", func(t *testing.T) {
		cfg := testutil.Config(t)
		cfg.Concurrency = 4
		c, err := redeq.New(testutil.Backends(t)[0].New(t), cfg)
		require.NoError(t, err)
		err = c.Register(redeq.ListenerFunc("t", h, redeq.WithMaxRunning(2)))
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.ErrorContains(t, err, "one bucket")
	})
	// Nothing was registered: a good listener of the topic still is.
	require.NoError(t, c.Register(redeq.ListenerFunc("t", h, redeq.WithMaxRunning(1))))
}

// limitedKind is the child that listens to REDEQ_TEST_TOPIC with
// MaxRunning CHILD_MAX_RUNNING and 4 workers, holding every job it takes.
const limitedKind = "limited"

// runLimitedChild is the limitedKind child: it prints "id <cid>", and
// "start <id>" and "end <id>" when the handler of a job it takes begins
// and returns (its ctx ended).
func runLimitedChild() {
	c := childClient(faultChildConfig)
	n, _ := strconv.Atoi(os.Getenv("CHILD_MAX_RUNNING"))
	h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		fmt.Println("start", job.ID)
		<-ctx.Done()
		fmt.Println("end", job.ID)
		return ctx.Err()
	}
	childMust(c.Register(redeq.ListenerFunc(os.Getenv("REDEQ_TEST_TOPIC"), h, redeq.WithWorkers(4), redeq.WithMaxRunning(n))))
	childMust(c.Start(context.Background()))
	fmt.Println("id", c.ConsumerID())
	select {}
}

// TestKilledClientsSlotsReturn: a client holding both slots of a topic
// with MaxRunning 2 is killed with SIGKILL. While it holds them, the
// other client runs nothing; its slots return when the reaper recovers
// its jobs: the survivor then runs every job, the killed client's two
// included, never more than two at once, and the topic does not stall.
func TestKilledClientsSlotsReturn(t *testing.T) {
	testutil.FaultTier(t)
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ch := startFaultChild(t, limitedKind, e.be, e.cfg.Prefix, "t", "CHILD_MAX_RUNNING=2")
		ch.expect(t, "id ", 10*time.Second)
		for i := range 10 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
		}
		held := map[string]bool{}
		for len(held) < 2 {
			held[strings.TrimSpace(ch.expect(t, "start ", 10*time.Second))] = true
		}
		require.Equal(t, int64(2), stats(t, e.c, "t").Running)
		var g gauge
		var mu sync.Mutex
		ran := map[string]int{}
		h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			g.enter()
			time.Sleep(20 * time.Millisecond)
			g.leave()
			mu.Lock()
			ran[job.ID]++
			mu.Unlock()
			ch.Ack()
			return nil
		}
		survivor := e.another(t, nil)
		startWith(t, survivor, redeq.ListenerFunc("t", h, redeq.WithWorkers(8), redeq.WithMaxRunning(2)))
		time.Sleep(300 * time.Millisecond) // fetches that would overrun the limit had the time to
		mu.Lock()
		require.Empty(t, ran, "the child holds both slots")
		mu.Unlock()
		ch.kill()
		testutil.Eventually(t, 30*time.Second, "the killed client's jobs run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(ran) == 10
		})
		require.LessOrEqual(t, g.peak.Load(), int64(2))
		for id := range held {
			require.Equal(t, 1, ran[id], id)
		}
		testutil.Eventually(t, 10*time.Second, "every slot is free", func() bool { return stats(t, e.c, "t").Running == 0 })
	})
}

// TestRateLimitHoldsOverTime: a rate of 50 jobs a second, on a topic with
// a backlog of 1,500 jobs and 3 or 6 clients, starts 1,000 jobs in 20 s
// (and 50 at once at the start) within a few percent, whatever the number
// of clients.
func TestRateLimitHoldsOverTime(t *testing.T) {
	testutil.FaultTier(t)
	for _, clients := range []int{3, 6} {
		t.Run(fmt.Sprint(clients, "clients"), func(t *testing.T) {
			// Each case measures 20 s of its own prefix and clients: the
			// cases and deployments measure at the same time.
			t.Parallel()
			for _, be := range testutil.RealBackends(t) {
				t.Run(be.Name, func(t *testing.T) {
					t.Parallel()
					rateLimitOverTime(t, setup(t, be, testutil.Config(t)), clients)
				})
			}
		})
	}
}

// rateLimitOverTime is one case of TestRateLimitHoldsOverTime.
func rateLimitOverTime(t *testing.T, e *env, clients int) {
	ctx := context.Background()
	var mu sync.Mutex
	var starts []time.Time
	h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		ch.Ack()
		return nil
	}
	var batch []*redeq.Job
	for i := range 1500 {
		batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)})
	}
	require.NoError(t, e.c.AddBatch(ctx, batch))
	for i := range clients {
		c := e.c
		if i > 0 {
			c = e.another(t, nil)
		}
		startWith(t, c, redeq.ListenerFunc("t", h, redeq.WithWorkers(16), redeq.WithRateLimit(50, time.Second)))
	}
	testutil.Eventually(t, 10*time.Second, "the first start", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) > 0
	})
	mu.Lock()
	first := starts[0]
	mu.Unlock()
	time.Sleep(time.Until(first.Add(20*time.Second + 500*time.Millisecond)))
	mu.Lock()
	n := 0
	for _, s := range starts {
		if s.Before(first.Add(20 * time.Second)) {
			n++
		}
	}
	mu.Unlock()
	// 50 at once, then 50 per second: 1,000 within 20 s (the
	// window's edge may let the 21st second's first in).
	t.Logf("%d clients: %d starts in 20 s", clients, n)
	require.InDelta(t, 1000, n, 40, "starts in 20 s")
}

// TestLimitHoldsAcrossRedisRestart: Redis (with an fsync'd AOF) restarts
// while two jobs hold both slots of a MaxRunning 2 topic. The slots come
// back with the data: the other jobs still wait, and once the two finish
// every job runs, never more than two at once.
func TestLimitHoldsAcrossRedisRestart(t *testing.T) {
	testutil.FaultTier(t)
	srv, be := privateServer(t, "--appendonly", "yes", "--appendfsync", "always")
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	var g gauge
	release := make(chan struct{})
	var mu sync.Mutex
	ran := map[string]int{}
	h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		g.enter()
		select {
		case <-release:
		case <-ctx.Done():
		}
		g.leave()
		mu.Lock()
		ran[job.ID]++
		mu.Unlock()
		ch.Ack()
		return nil
	}
	for i := range 10 {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	w := e.another(t, func(c *config.Config) { c.ConsumeTimeout = time.Minute })
	startWith(t, w, redeq.ListenerFunc("t", h, redeq.WithWorkers(8), redeq.WithMaxRunning(2)))
	testutil.Eventually(t, 10*time.Second, "two jobs run", func() bool { return g.now.Load() == 2 })
	srv.Stop()
	srv.Start()
	testutil.Eventually(t, 10*time.Second, "the slots are back with the data", func() bool {
		st, err := e.c.Stats(ctx, "t")
		return err == nil && st.Running == 2 && st.Ready == 8
	})
	time.Sleep(300 * time.Millisecond) // fetches that would overrun the limit had the time to
	require.Equal(t, int64(2), g.peak.Load())
	close(release)
	testutil.Eventually(t, 30*time.Second, "every job ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 10
	})
	require.Equal(t, int64(2), g.peak.Load())
	testutil.Eventually(t, 10*time.Second, "every slot is free", func() bool { return stats(t, e.c, "t").Running == 0 })
}

// holdGate is a handler that runs each job until its gate opens (or its
// ctx ends), measuring the handlers running at once (per tenant header
// too) and counting each job's runs.
type holdGate struct {
	mu     sync.Mutex
	open   map[string]bool // ids whose runs end at once
	all    bool            // every run ends at once
	wake   chan struct{}   // closed and replaced when the gates change
	ran    map[string]int
	g      gauge
	tenant map[string]*gauge
}

func newHoldGate() *holdGate {
	return &holdGate{open: map[string]bool{}, wake: make(chan struct{}), ran: map[string]int{}, tenant: map[string]*gauge{}}
}

// release opens the gate of ids, or of every job for none.
func (h *holdGate) release(ids ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(ids) == 0 {
		h.all = true
	}
	for _, id := range ids {
		h.open[id] = true
	}
	close(h.wake)
	h.wake = make(chan struct{})
}

func (h *holdGate) tenantGauge(v string) *gauge {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tenant[v] == nil {
		h.tenant[v] = &gauge{}
	}
	return h.tenant[v]
}

func (h *holdGate) handle(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	tg := h.tenantGauge(job.Headers["tenant"])
	h.g.enter()
	tg.enter()
	defer h.g.leave()
	defer tg.leave()
	for {
		h.mu.Lock()
		open, wake := h.all || h.open[job.ID], h.wake
		h.mu.Unlock()
		if open {
			break
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h.mu.Lock()
	h.ran[job.ID]++
	h.mu.Unlock()
	ch.Ack()
	return nil
}

func (h *holdGate) runs(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ran[id]
}

// addTenantJobs adds jobs prefix0..prefix<n-1> of header tenant v, in order.
func addTenantJobs(t *testing.T, c *redeq.Client, prefix, v string, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: fmt.Sprint(prefix, i), Headers: map[string]string{"tenant": v}}))
	}
}

// pokeFetches announces the topic's bucket a few times, so that every
// consumer with a free worker fetches again.
func pokeFetches(t *testing.T, e *env) {
	t.Helper()
	for range 5 {
		require.NoError(t, e.rdb.Publish(context.Background(), keys.ReadyChannel(e.cfg.Prefix), keys.Address("t", 0)).Err())
		time.Sleep(30 * time.Millisecond)
	}
}

// TestDeletedRunningJobKeepsItsSlotUntilItsHandlerEnds: a job deleted
// while its handler runs holds its slot until the handler ends: with
// MaxRunning 2, deleting one of the two running jobs lets no third one
// start (measured by the handlers); once the handler ends the slot is
// free again, and the topic runs two at once afterwards.
func TestDeletedRunningJobKeepsItsSlotUntilItsHandlerEnds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		h := newHoldGate()
		for i := range 8 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
		}
		mod := func(c *config.Config) { c.ConsumeTimeout = time.Minute }
		for range 2 {
			startWith(t, e.another(t, mod), redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(4), redeq.WithMaxRunning(2)))
		}
		testutil.Eventually(t, 10*time.Second, "two jobs run", func() bool { return h.g.now.Load() == 2 })
		running := ""
		for i := range 8 {
			j, err := e.c.Get(ctx, "t", fmt.Sprint("j", i))
			require.NoError(t, err)
			if j.State == redeq.StateInFlight {
				running = j.ID
				break
			}
		}
		require.NotEmpty(t, running)
		_, err := e.c.Delete(ctx, "t", running)
		require.NoError(t, err)
		pokeFetches(t, e)
		require.Equal(t, int64(2), h.g.peak.Load(), "a deleted job's handler still holds its slot")
		require.Equal(t, int64(2), stats(t, e.c, "t").Running)
		// The deleted job's handler ends: its slot frees, and one job more runs.
		h.release(running)
		testutil.Eventually(t, 10*time.Second, "a job takes the freed slot", func() bool {
			return h.g.now.Load() == 2 && h.runs(running) == 1
		})
		pokeFetches(t, e)
		require.Equal(t, int64(2), h.g.peak.Load())
		h.release()
		testutil.Eventually(t, 30*time.Second, "every other job ran", func() bool {
			for i := range 8 {
				if id := fmt.Sprint("j", i); id != running && h.runs(id) != 1 {
					return false
				}
			}
			return true
		})
		require.Equal(t, int64(2), h.g.peak.Load())
		testutil.Eventually(t, 10*time.Second, "every slot is free", func() bool { return stats(t, e.c, "t").Running == 0 })
		// No slot leaked: the topic runs at its limit again.
		h.mu.Lock()
		h.all = false
		h.mu.Unlock()
		for i := range 4 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("k", i)}))
		}
		testutil.Eventually(t, 10*time.Second, "two jobs run again", func() bool { return h.g.now.Load() == 2 })
		h.release()
	})
}

// parkFive starts a client whose listener runs one job at a time per
// tenant (MaxRunning 1, limit key "tenant"), adds five jobs of tenant x
// (x0 runs and holds, x1..x4 wait for its slot), and returns the client.
func parkFive(t *testing.T, e *env, h *holdGate) *redeq.Client {
	t.Helper()
	a := e.another(t, func(c *config.Config) { c.ConsumeTimeout = time.Minute })
	startWith(t, a, redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(4), redeq.WithMaxRunning(1), redeq.WithLimitKey("tenant")))
	addTenantJobs(t, e.c, "x", "x", 5)
	testutil.Eventually(t, 10*time.Second, "x0 runs, the others wait for its slot", func() bool {
		return h.g.now.Load() == 1 && stats(t, e.c, "t").Waiting == 4
	})
	return a
}

// shutdownCanceling shuts c down within 300 ms, canceling the handlers
// still running then (their jobs are rolled back).
func shutdownCanceling(t *testing.T, c *redeq.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		require.ErrorContains(t, err, "canceled handlers")
	}
}

// TestParkedJobsRunOnceTheirLimitIsLifted: jobs waiting for a slot of
// their key value run once no limit holds them: when the listener that
// parked them is replaced by one without limits, or with a topic-wide
// limit instead of the key's, or when a listener limited per another
// header or with a higher limit starts beside it. Nothing waits for a
// slot no limit guards.
func TestParkedJobsRunOnceTheirLimitIsLifted(t *testing.T) {
	t.Parallel()
	t.Run("ListenerWithoutLimits", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			h := newHoldGate()
			a := parkFive(t, e, h)
			shutdownCanceling(t, a)
			h.release()
			startWith(t, e.another(t, nil), redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(4)))
			testutil.Eventually(t, 10*time.Second, "every job ran", func() bool {
				for i := range 5 {
					if h.runs(fmt.Sprint("x", i)) == 0 {
						return false
					}
				}
				return true
			})
		})
	})
	t.Run("KeyDropped", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			h := newHoldGate()
			a := parkFive(t, e, h)
			shutdownCanceling(t, a)
			h.release()
			startWith(t, e.another(t, nil), redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(4), redeq.WithMaxRunning(2)))
			testutil.Eventually(t, 10*time.Second, "every job ran", func() bool {
				for i := range 5 {
					if h.runs(fmt.Sprint("x", i)) == 0 {
						return false
					}
				}
				return true
			})
			require.Equal(t, 0, int(stats(t, e.c, "t").Waiting))
		})
	})
	t.Run("KeyChanged", func(t *testing.T) {
		// A listener limited per value of another header (which the jobs
		// lack: they share the value "") starts beside the one that
		// parked them: x0, running under tenant x's slot, is a job of
		// partner "" too, so it runs none of them beside it; once x0
		// ends, it runs them all.
		each(t, func(t *testing.T, e *env) {
			h := newHoldGate()
			parkFive(t, e, h)
			startWith(t, e.another(t, func(c *config.Config) { c.ConsumeTimeout = time.Minute }),
				redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(4), redeq.WithMaxRunning(1), redeq.WithLimitKey("partner")))
			for range 10 {
				require.NoError(t, e.rdb.Publish(context.Background(), keys.ReadyChannel(e.cfg.Prefix), keys.Address("t", 0)).Err())
				time.Sleep(30 * time.Millisecond)
			}
			require.Equal(t, int64(1), h.g.now.Load(), "x0 alone runs")
			h.release()
			testutil.Eventually(t, 10*time.Second, "every job ran", func() bool {
				for i := range 5 {
					if h.runs(fmt.Sprint("x", i)) == 0 {
						return false
					}
				}
				return true
			})
			testutil.Eventually(t, 10*time.Second, "nothing waits", func() bool {
				st := stats(t, e.c, "t")
				return st.Waiting == 0 && st.Running == 0
			})
		})
	})
	t.Run("LimitRaised", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			h := newHoldGate()
			parkFive(t, e, h)
			startWith(t, e.another(t, func(c *config.Config) { c.ConsumeTimeout = time.Minute }),
				redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(4), redeq.WithMaxRunning(3), redeq.WithLimitKey("tenant")))
			testutil.Eventually(t, 10*time.Second, "three of x run", func() bool { return h.g.now.Load() == 3 })
			h.release()
			testutil.Eventually(t, 10*time.Second, "every job ran", func() bool {
				for i := range 5 {
					if h.runs(fmt.Sprint("x", i)) == 0 {
						return false
					}
				}
				return true
			})
			require.LessOrEqual(t, h.g.peak.Load(), int64(3))
		})
	})
}

// TestTakingAParkedJobOutStrandsNoOther: taking the first of the jobs
// that wait for a slot of their key value out of the topic (Delete,
// Reschedule, Put, DeleteJobs) leaves the others waiting for the slot:
// once it frees, they all run, one at a time.
func TestTakingAParkedJobOutStrandsNoOther(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		take func(t *testing.T, c *redeq.Client)
	}{
		{"Delete", func(t *testing.T, c *redeq.Client) {
			_, err := c.Delete(context.Background(), "t", "x1")
			require.NoError(t, err)
		}},
		{"Reschedule", func(t *testing.T, c *redeq.Client) {
			require.NoError(t, c.RescheduleIn(context.Background(), "t", "x1", time.Hour))
		}},
		{"Put", func(t *testing.T, c *redeq.Client) {
			require.NoError(t, c.Put(context.Background(), &redeq.Job{Topic: "t", ID: "x1", Delay: time.Hour, Headers: map[string]string{"tenant": "x"}}))
		}},
		{"DeleteJobs", func(t *testing.T, c *redeq.Client) {
			res, err := c.DeleteJobs(context.Background(), "t", redeq.StateReady, []string{"x1"})
			require.NoError(t, err)
			require.Equal(t, 1, res.Done, "%+v", res)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				h := newHoldGate()
				parkFive(t, e, h)
				tc.take(t, e.c)
				h.release()
				testutil.Eventually(t, 10*time.Second, "the other waiting jobs run", func() bool {
					for _, id := range []string{"x0", "x2", "x3", "x4"} {
						if h.runs(id) != 1 {
							return false
						}
					}
					return true
				})
				require.Equal(t, 0, h.runs("x1"))
				require.Equal(t, int64(1), h.g.peak.Load())
			})
		})
	}
}

// TestStatsCountsNoParkedJobTakenOut: a job taken out of the topic
// (Delete, Reschedule, Put, DeleteJobs, Update, RequeueJobs) while it
// waits for a slot of its key value is no longer counted in
// Stats.Waiting, at once, though its slot has not freed: List(ready) and
// Waiting show the same jobs, and Pool is the sum of the states
// (Scheduled + Ready + Waiting + InFlight + UnAck + Dead).
func TestStatsCountsNoParkedJobTakenOut(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		take func(t *testing.T, c *redeq.Client)
	}{
		{"Delete", func(t *testing.T, c *redeq.Client) {
			_, err := c.Delete(ctx, "t", "x1")
			require.NoError(t, err)
		}},
		{"Reschedule", func(t *testing.T, c *redeq.Client) {
			require.NoError(t, c.RescheduleIn(ctx, "t", "x1", time.Hour))
		}},
		{"Put", func(t *testing.T, c *redeq.Client) {
			require.NoError(t, c.Put(ctx, &redeq.Job{Topic: "t", ID: "x1", Delay: time.Hour, Headers: map[string]string{"tenant": "x"}}))
		}},
		{"DeleteJobs", func(t *testing.T, c *redeq.Client) {
			res, err := c.DeleteJobs(ctx, "t", redeq.StateReady, []string{"x1"})
			require.NoError(t, err)
			require.Equal(t, 1, res.Done, "%+v", res)
		}},
		{"Update", func(t *testing.T, c *redeq.Client) {
			require.NoError(t, c.Update(ctx, "t", "x1", func(j *redeq.Job) error {
				j.Delay = time.Hour
				return nil
			}))
		}},
		{"RequeueJobs", func(t *testing.T, c *redeq.Client) {
			res, err := c.RequeueJobs(ctx, "t", redeq.StateReady, []string{"x1"}, time.Hour)
			require.NoError(t, err)
			require.Equal(t, 1, res.Done, "%+v", res)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				h := newHoldGate()
				parkFive(t, e, h)
				t.Cleanup(func() { h.release() }) // before the client's shutdown, even on a failure
				tc.take(t, e.c)
				page, err := e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{Limit: 100})
				require.NoError(t, err)
				var ready []string
				for _, j := range page.Jobs {
					ready = append(ready, j.ID)
				}
				require.Equal(t, []string{"x2", "x3", "x4"}, ready)
				st := stats(t, e.c, "t")
				require.Equal(t, int64(3), st.Waiting, "%+v", st)
				require.Equal(t, st.Pool, st.Scheduled+st.Ready+st.Waiting+st.InFlight+st.UnAck+st.Dead, "%+v", st)
				require.Equal(t, int64(1), st.InFlight, "%+v", st)
			})
		})
	}
}

// TestStatsParkedCountIsBounded: Stats reads the set-aside ids of a key
// value in a bounded step: of 100,000 entries it checks the first 1,000
// (a second entry of an id counts once, a stale one not at all) and
// counts the rest as they are; of many values it checks 4,000 entries
// per bucket in all. It writes nothing, so a rerun gives the same count,
// and a list it cannot read fails it with Redis's error.
func TestStatsParkedCountIsBounded(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a", Delay: time.Hour}))
		k := keys.ForBucket(e.cfg.Prefix, "t", 0)
		pipe := e.rdb.Pipeline()
		pipe.HSet(ctx, k.State(), "live1", "r", "live2", "r5")
		// Value "hot": live1 twice, live2, 997 stale, then 99,000 more.
		pipe.RPush(ctx, k.LimitPark("hot"), "live1", "live1", "live2")
		for i := 3; i < 100_000; i += 1000 {
			chunk := make([]any, 0, 1000)
			for j := i; j < min(i+1000, 100_000); j++ {
				chunk = append(chunk, fmt.Sprint("gone", j))
			}
			pipe.RPush(ctx, k.LimitPark("hot"), chunk...)
		}
		pipe.ZAdd(ctx, k.LimitParked(), redis.Z{Score: 0, Member: "hot"})
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2+99_000), stats(t, e.c, "t").Waiting, "1,000 checked, 99,000 counted unchecked")
		before := testutil.DumpUnder(t, e.rdb, e.cfg.Prefix)
		require.Equal(t, int64(2+99_000), stats(t, e.c, "t").Waiting, "a rerun counts the same")
		require.Equal(t, before, testutil.DumpUnder(t, e.rdb, e.cfg.Prefix), "Stats writes nothing")
		// 20 more values of 1,000 stale entries each: the bucket's 4,000
		// checks are spent on "hot" and the first 3 of them.
		pipe = e.rdb.Pipeline()
		for v := range 20 {
			chunk := make([]any, 0, 1000)
			for j := range 1000 {
				chunk = append(chunk, fmt.Sprintf("v%02d-%d", v, j))
			}
			pipe.RPush(ctx, k.LimitPark(fmt.Sprintf("v%02d", v)), chunk...)
			pipe.ZAdd(ctx, k.LimitParked(), redis.Z{Score: 1, Member: fmt.Sprintf("v%02d", v)})
		}
		_, err = pipe.Exec(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2+99_000+17*1000), stats(t, e.c, "t").Waiting)
		// A park list it cannot read fails Stats with Redis's error.
		require.NoError(t, e.rdb.Set(ctx, k.LimitPark("bad"), "not a list", 0).Err())
		require.NoError(t, e.rdb.ZAdd(ctx, k.LimitParked(), redis.Z{Score: 0, Member: "bad"}).Err())
		_, err = e.c.Stats(ctx, "t")
		require.ErrorContains(t, err, "WRONGTYPE")
	})
}

// TestParkedJobsAreVisible: jobs that wait for a slot of their key value
// are ready jobs to every reader: Get shows them ready, List(ready) lists
// them (after the ready list, value by value, each value's in the order
// they will run), page by page, and Stats counts them in Waiting.
func TestParkedJobsAreVisible(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		h := newHoldGate()
		parkFive(t, e, h)
		addTenantJobs(t, e.c, "y", "y", 3)
		testutil.Eventually(t, 10*time.Second, "y0 runs, y1 and y2 wait", func() bool {
			return h.g.now.Load() == 2 && stats(t, e.c, "t").Waiting == 6
		})
		for i := 1; i < 5; i++ {
			j, err := e.c.Get(ctx, "t", fmt.Sprint("x", i))
			require.NoError(t, err)
			require.Equal(t, redeq.StateReady, j.State, j.ID)
		}
		var ids []string
		for cur := ""; ; {
			page, err := e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{Limit: 2, Cursor: cur})
			require.NoError(t, err)
			for _, j := range page.Jobs {
				require.Equal(t, redeq.StateReady, j.State)
				ids = append(ids, j.ID)
			}
			if cur = page.Next; cur == "" {
				break
			}
		}
		require.Equal(t, []string{"x1", "x2", "x3", "x4", "y1", "y2"}, ids)
		h.release()
	})
}

// TestConfigLimitsApplyToListeners: the limits of a topic's section in
// Config.Listeners hold for a listener of the topic that sets none of its
// own (at most 2 running, measured by the handlers; Stats shows them),
// and a listener's own limit options replace them.
func TestConfigLimitsApplyToListeners(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		h := newHoldGate()
		for i := range 6 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
		}
		mod := func(c *config.Config) {
			c.ConsumeTimeout = time.Minute
			c.Listeners = []config.Listener{{Topic: "t", MaxRunning: 2}, {Topic: "u", Rate: 1}}
		}
		startWith(t, e.another(t, mod), redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(8)))
		testutil.Eventually(t, 10*time.Second, "two jobs run", func() bool { return h.g.now.Load() == 2 })
		pokeFetches(t, e)
		require.Equal(t, int64(2), h.g.peak.Load(), "the config's MaxRunning holds")
		require.Equal(t, redeq.Limits{MaxRunning: 2}, stats(t, e.c, "t").Limits)
		// A listener with a limit of its own replaces the section's.
		startWith(t, e.another(t, mod), redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(8), redeq.WithMaxRunning(3)))
		testutil.Eventually(t, 10*time.Second, "three jobs run", func() bool { return h.g.now.Load() == 3 })
		h.release()
	})
}

// TestStalledClientRunsNothingBesideTheLimit: a client holding both slots
// of a MaxRunning 2 topic stalls (SIGSTOP) past ConsumerTimeout; its jobs
// are recovered, and another client runs two jobs in the freed slots.
// Once resumed (SIGCONT), the stalled client's handlers of the recovered
// jobs end at once, and it starts nothing while the others hold both
// slots: the handlers running never number more than two after the
// resume.
func TestStalledClientRunsNothingBesideTheLimit(t *testing.T) {
	testutil.FaultTier(t)
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ch := startFaultChild(t, limitedKind, e.be, e.cfg.Prefix, "t", "CHILD_MAX_RUNNING=2",
			fmt.Sprintf("%s=%d", childConsumerTimeoutEnv, e.cfg.ConsumerTimeout.Milliseconds()),
			fmt.Sprintf("%s=%d", childHeartbeatEnv, e.cfg.HeartbeatInterval.Milliseconds()))
		ch.expect(t, "id ", 10*time.Second)
		for i := range 10 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
		}
		// The jobs the child runs when it is stopped: a handler canceled
		// before (its lease renewals late on a loaded machine) ends, and
		// its end line must not be lost.
		held := map[string]bool{}
		wait := time.After(10 * time.Second)
		for len(held) < 2 {
			select {
			case l := <-ch.lines:
				if id, ok := strings.CutPrefix(l, "start "); ok {
					held[strings.TrimSpace(id)] = true
				}
				if id, ok := strings.CutPrefix(l, "end "); ok {
					delete(held, strings.TrimSpace(id))
				}
			case <-wait:
				t.Fatalf("the child runs %v, not two jobs", held)
			}
		}
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
		h := newHoldGate()
		survivor := e.another(t, func(c *config.Config) { c.ConsumeTimeout = time.Minute })
		startWith(t, survivor, redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(8), redeq.WithMaxRunning(2)))
		testutil.Eventually(t, 30*time.Second, "the stalled client's slots are recovered and taken", func() bool {
			return h.g.now.Load() == 2
		})
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
		resumed := time.Now()
		// The resumed client's handlers of the recovered jobs end, and it
		// takes no job: the survivor holds both slots.
		ended := map[string]bool{}
		deadline := time.After(5 * time.Second)
		for len(ended) < len(held) {
			select {
			case l, open := <-ch.lines:
				require.True(t, open, "the child ended")
				if id, ok := strings.CutPrefix(l, "end "); ok && held[strings.TrimSpace(id)] {
					ended[strings.TrimSpace(id)] = true
				}
				require.False(t, strings.HasPrefix(l, "start "), "the resumed client started %q beside two running jobs", l)
			case <-deadline:
				t.Fatalf("the resumed client still runs recovered jobs %v %v after SIGCONT, beside the two others: %d running under MaxRunning 2",
					held, time.Since(resumed).Round(time.Millisecond), 2+len(held)-len(ended))
			}
		}
		pokeFetches(t, e)
		settle := time.After(time.Second)
		for done := false; !done; {
			select {
			case l := <-ch.lines:
				require.False(t, strings.HasPrefix(l, "start "), "the resumed client started %q beside two running jobs", l)
			case <-settle:
				done = true
			}
		}
		require.Equal(t, int64(2), h.g.peak.Load())
		h.release()
	})
}

// TestLimitHoldsAcrossAFailover: on a cluster of 3 masters with replicas,
// the master of a MaxRunning 2 topic's bucket is killed (and comes back
// as a replica) while two jobs hold both slots; its replica takes over
// with the leases (they are
// written with the deliveries they count, in one script): the other jobs
// still wait, and once the two finish every job runs, never more than two
// at once, and every slot is free in the end.
func TestLimitHoldsAcrossAFailover(t *testing.T) {
	testutil.FaultTier(t)
	rc, be := privateCluster(t, 3)
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	h := newHoldGate()
	for i := range 10 {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	w := e.another(t, func(c *config.Config) { c.ConsumeTimeout = time.Minute })
	startWith(t, w, redeq.ListenerFunc("t", h.handle, redeq.WithWorkers(8), redeq.WithMaxRunning(2)))
	testutil.Eventually(t, 10*time.Second, "two jobs run", func() bool { return h.g.now.Load() == 2 })
	master := nodeOf(t, e.rdb, keys.ForBucket(e.cfg.Prefix, "t", 0).Pool())
	replica := rc.ReplicaOf(master)
	require.NotNil(t, replica)
	testutil.Eventually(t, 10*time.Second, "the replica is in sync", func() bool { return rc.InSync(replica.Addr) })
	down := rc.Node(master)
	down.Kill()
	testutil.Eventually(t, 30*time.Second, "the replica takes over", func() bool { return rc.Promoted(replica.Addr, down) })
	// The old master comes back (empty) as the new one's replica: until it
	// answers, go-redis keeps sending it the bucket's commands.
	down.Start()
	testutil.Eventually(t, 30*time.Second, "the old master is back as a replica", func() bool {
		return rc.ReplicaOf(replica.Addr) == down && rc.InSync(down.Addr)
	})
	testutil.Eventually(t, 20*time.Second, "the slots are on the new master", func() bool {
		st, err := e.c.Stats(ctx, "t")
		return err == nil && st.Running == 2 && st.Ready == 8
	})
	pokeFetches(t, e)
	require.Equal(t, int64(2), h.g.peak.Load())
	h.release()
	testutil.Eventually(t, 30*time.Second, "every job ran", func() bool {
		for i := range 10 {
			if h.runs(fmt.Sprint("j", i)) == 0 {
				return false
			}
		}
		return true
	})
	require.Equal(t, int64(2), h.g.peak.Load())
	testutil.Eventually(t, 10*time.Second, "every slot is free", func() bool { return stats(t, e.c, "t").Running == 0 })
}

// startLog records when handlers start, per key value.
type startLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (s *startLog) add(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string][]time.Time{}
	}
	s.at[v] = append(s.at[v], time.Now())
}

// worst is, per value, the most starts within any span of per - tol
// (tol covers the handler's dispatch delay after the fetch), and where.
func (s *startLog) worst(per, tol time.Duration) (string, int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wv, wn, wat := "", 0, time.Time{}
	for v, ts := range s.at {
		ts = append([]time.Time(nil), ts...)
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		j := 0
		for i := range ts {
			for ts[i].Sub(ts[j]) >= per-tol {
				j++
			}
			if i-j+1 > wn {
				wv, wn, wat = v, i-j+1, ts[j]
			}
		}
	}
	return wv, wn, wat
}

func (s *startLog) addAt(v string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string][]time.Time{}
	}
	s.at[v] = append(s.at[v], at)
}

func (s *startLog) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ts := range s.at {
		n += len(ts)
	}
	return n
}

// TestRateLogOfManyExpiredEntriesHoldsNothingBack: a topic's start log
// holding 100,000 entries that all left the window (a busy period long
// past, the log key not yet expired) holds no job back: a rate of 50
// per second starts 50 ready jobs at once, within 500 ms.
func TestRateLogOfManyExpiredEntriesHoldsNothingBack(t *testing.T) {
	testutil.FaultTier(t)
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		now, err := e.rdb.Time(ctx).Result()
		require.NoError(t, err)
		ms := now.UnixMilli() - 10_000
		lg := keys.ForBucket(e.cfg.Prefix, "t", 0).LimitPrefix() + "rlog"
		exp := now.UnixMilli() + 60_000
		const entries = 100_000
		for from := 0; from < entries; from += 1000 {
			var es []any
			for i := from; i < from+1000; i++ {
				es = append(es, fmt.Sprintf("%d:%d:1:0:0:%d", ms, i, exp))
			}
			require.NoError(t, e.rdb.RPush(ctx, lg, es...).Err())
		}
		require.NoError(t, e.rdb.PExpireAt(ctx, lg, time.UnixMilli(exp)).Err())
		var batch []*redeq.Job
		for i := range 50 {
			batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)})
		}
		require.NoError(t, e.c.AddBatch(ctx, batch))
		var log startLog
		h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			log.add("")
			ch.Ack()
			return nil
		}
		start := time.Now()
		startWith(t, e.c, redeq.ListenerFunc("t", h, redeq.WithWorkers(64), redeq.WithRateLimit(50, time.Second)))
		testutil.Eventually(t, 30*time.Second, "the 50 start", func() bool { return log.total() == 50 })
		t.Logf("50 started after %v", time.Since(start))
		require.Less(t, time.Since(start), 500*time.Millisecond, "the expired entries hold the jobs back")
	})
}

// startOldRateClient starts the previous version's client (the binary at
// $REDEQ_OLD_CLIENT, built from commit 3e09a55 with testdata/oldrate.go.txt as its cmd/oldrate) on e's keys, listening
// to "t" at n per per, and logs its handler starts in log.
func startOldRateClient(t *testing.T, e *env, n int, per time.Duration, log *startLog) {
	t.Helper()
	bin := os.Getenv("REDEQ_OLD_CLIENT")
	if bin == "" {
		if os.Getenv(testutil.RequireServerEnv) != "" {
			t.Fatalf("REDEQ_OLD_CLIENT names no client of the previous version, and %s is set (.ci/run builds one)", testutil.RequireServerEnv)
		}
		t.Skip("REDEQ_OLD_CLIENT names no client of the previous version (.ci/run builds one)")
	}
	cmd := exec.Command(bin)
	addrs, cluster := os.Getenv("REDIS_ADDR"), ""
	if e.be.Name == "cluster" {
		addrs, cluster = os.Getenv("REDIS_CLUSTER_ADDRS"), "1"
	}
	cmd.Env = append(os.Environ(), "REDEQ_TEST_ADDRS="+addrs, "REDEQ_TEST_CLUSTER="+cluster,
		"REDEQ_TEST_PREFIX="+e.cfg.Prefix, fmt.Sprint("RATE_N=", n), fmt.Sprint("RATE_PER_MS=", per.Milliseconds()))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) == 1 && f[0] == "ready":
				close(ready)
			case len(f) == 3 && f[0] == "start":
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				log.addAt("", time.Unix(0, ns))
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the old client did not start")
	}
}

// rollingUpgradeRun adds jobs to topic "t" of e, starts a client of this
// version at n per per, and once it started its first n, a client of the
// previous version beside it; it returns the starts both made when every
// job ran, and when the old client was started.
func rollingUpgradeRun(t *testing.T, e *env, n int, per time.Duration, jobs int) (*startLog, time.Time) {
	t.Helper()
	ctx := context.Background()
	log := &startLog{}
	h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		log.add("")
		ch.Ack()
		return nil
	}
	var batch []*redeq.Job
	for i := range jobs {
		batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)})
	}
	require.NoError(t, e.c.AddBatch(ctx, batch))
	startWith(t, e.c, redeq.ListenerFunc("t", h, redeq.WithWorkers(16), redeq.WithRateLimit(n, per)))
	testutil.Eventually(t, 10*time.Second, "the new client starts its first ten", func() bool { return log.total() == n })
	startOldRateClient(t, e, n, per, log)
	joined := time.Now()
	testutil.Eventually(t, 40*time.Second, "every job runs", func() bool { return log.total() >= jobs })
	return log, joined
}

// TestRateHoldsAcrossARollingUpgrade: a client of this version and one
// of the previous version (main) listening to the same topic at 10 per
// 2 s, the new one first, never start more than 10 jobs within any 2 s
// (100 ms tolerance), and every job runs.
func TestRateHoldsAcrossARollingUpgrade(t *testing.T) {
	testutil.FaultTier(t)
	eachRealBeside(t, func(t *testing.T, e *env) {
		const n, per, tol = 10, 2 * time.Second, 100 * time.Millisecond
		log, _ := rollingUpgradeRun(t, e, n, per, 60)
		_, worst, _ := log.worst(per, tol)
		t.Logf("%d starts; most in %v: %d", log.total(), per-tol, worst)
		require.LessOrEqual(t, worst, n, "starts within one period")
	})
}

// TestRateHoldsAcrossARollingUpgradeOnceBothRun: from a period after a
// client of the previous version joined a client of this version on a
// topic at 10 per 2 s (the documented exception: the new client's starts
// before the old one's first), never more than 10 jobs start within any
// 2 s (100 ms tolerance), and every job runs.
func TestRateHoldsAcrossARollingUpgradeOnceBothRun(t *testing.T) {
	testutil.FaultTier(t)
	eachRealBeside(t, func(t *testing.T, e *env) {
		const n, per, tol = 10, 2 * time.Second, 100 * time.Millisecond
		log, joined := rollingUpgradeRun(t, e, n, per, 90)
		from := joined.Add(per)
		var late startLog
		log.mu.Lock()
		for _, at := range log.at[""] {
			if at.After(from) {
				late.addAt("", at)
			}
		}
		log.mu.Unlock()
		_, worst, _ := late.worst(per, tol)
		t.Logf("%d starts, %d a period after the old client joined; most in %v: %d", log.total(), late.total(), per-tol, worst)
		require.LessOrEqual(t, worst, n, "starts within one period")
	})
}

// TestRateHoldsInEveryWindowUnderChurn: with a rate of 20 per 400 ms
// (topic-wide, or per tenant), four clients of 1, 4, 16 and 64 workers
// draining a burst of due jobs of which some fail once (retried at once)
// and some rejoin at once, while one client shuts down, another joins,
// and the topic pauses and resumes, never start more than 20 jobs (of a
// tenant) within any 400 ms, measured by the handlers with 100 ms for
// their dispatch; and every job ends.
func TestRateHoldsInEveryWindowUnderChurn(t *testing.T) {
	testutil.FaultTier(t)
	for _, header := range []string{"", "tenant"} {
		t.Run("key="+header, func(t *testing.T) {
			eachRealBeside(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				const n, per, tol = 20, 400 * time.Millisecond, 100 * time.Millisecond
				var log startLog
				var mu sync.Mutex
				seen := map[string]int{}
				done := map[string]bool{}
				h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					v := ""
					if header != "" {
						v = job.Headers[header]
					}
					log.add(v)
					mu.Lock()
					seen[job.ID]++
					k := seen[job.ID]
					mu.Unlock()
					var id int
					fmt.Sscanf(job.ID, "j%d", &id)
					if k == 1 && id%3 == 0 {
						return errors.New("fail once")
					}
					if k == 1 && id%5 == 1 {
						ch.Rejoin(time.Millisecond)
						return nil
					}
					mu.Lock()
					done[job.ID] = true
					mu.Unlock()
					ch.Ack()
					return nil
				}
				const jobs = 600
				var batch []*redeq.Job
				for i := range jobs {
					batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i), Headers: map[string]string{"tenant": fmt.Sprint("v", i%3)}})
				}
				require.NoError(t, e.c.AddBatch(ctx, batch))
				opts := func(w int) []redeq.ListenerOption {
					o := []redeq.ListenerOption{redeq.WithWorkers(w), redeq.WithRateLimit(n, per), redeq.WithRetry(3, time.Millisecond)}
					if header != "" {
						o = append(o, redeq.WithLimitKey(header))
					}
					return o
				}
				t0 := time.Now()
				var cs []*redeq.Client
				for i, w := range []int{1, 4, 16, 64} {
					c := e.c
					if i > 0 {
						c = e.another(t, nil)
					}
					startWith(t, c, redeq.ListenerFunc("t", h, opts(w)...))
					cs = append(cs, c)
				}
				time.Sleep(1500 * time.Millisecond)
				tShut := time.Since(t0)
				require.NoError(t, cs[2].Shutdown(ctx))
				startWith(t, e.another(t, nil), redeq.ListenerFunc("t", h, opts(32)...))
				time.Sleep(700 * time.Millisecond)
				tPause := time.Since(t0)
				require.NoError(t, e.c.Pause(ctx, "t"))
				time.Sleep(300 * time.Millisecond)
				require.NoError(t, e.c.Resume(ctx, "t"))
				testutil.Eventually(t, 60*time.Second, "every job ends", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(done) == jobs
				})
				v, worst, at := log.worst(per, tol)
				t.Logf("%d starts; most in %v: %d (value %q at +%v; shutdown at +%v, pause at +%v)", log.total(), per-tol, worst, v, at.Sub(t0), tShut, tPause)
				require.LessOrEqual(t, worst, n, "starts within one period")
			})
		})
	}
}

// TestRateStartsReachThePreviousZSetUntilTheStartLogFormat: in a
// namespace the version before switched to its format (2), a rated
// listener writes every start to that version's ZSET of starts too,
// though it holds none of an old client's (a client of that version
// counts them all); once UpgradeFormat switched the namespace to the
// start log (3, no older client alive), the clients write the log only
// from their next announcement.
func TestRateStartsReachThePreviousZSetUntilTheStartLogFormat(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.rdb.Set(ctx, keys.MoversFormat(e.cfg.Prefix), keys.FormatDueInState, 0).Err())
		var batch []*redeq.Job
		for i := range 5 {
			batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("a", i)})
		}
		require.NoError(t, e.c.AddBatch(ctx, batch))
		var started atomic.Int64
		h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			started.Add(1)
			ch.Ack()
			return nil
		}
		startWith(t, e.c, redeq.ListenerFunc("t", h, redeq.WithWorkers(4), redeq.WithRateLimit(1000, time.Minute)))
		testutil.Eventually(t, 10*time.Second, "the five start", func() bool { return started.Load() == 5 })
		old := keys.ForBucket(e.cfg.Prefix, "t", 0).LimitPrefix() + "rate"
		require.Equal(t, int64(5), e.rdb.ZCard(ctx, old).Val(), "every start is in the ZSET")

		require.NoError(t, e.c.UpgradeFormat(ctx))
		require.Equal(t, keys.FormatStartLog, e.rdb.Get(ctx, keys.MoversFormat(e.cfg.Prefix)).Val())
		time.Sleep(3 * e.cfg.ScanInterval) // the client's next announcement
		batch = batch[:0]
		for i := range 5 {
			batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("b", i)})
		}
		require.NoError(t, e.c.AddBatch(ctx, batch))
		testutil.Eventually(t, 10*time.Second, "the five more start", func() bool { return started.Load() == 10 })
		require.Equal(t, int64(5), e.rdb.ZCard(ctx, old).Val(), "after the switch, nothing more is written there")
	})
}

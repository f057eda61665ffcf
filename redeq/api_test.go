package redeq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

type order struct {
	ID    int    `json:"id"`
	Email string `json:"email"`
}

// TestTypedListener: a typed handler gets the decoded value; nil acks, an
// error retries, an undecodable body goes dead at once with the reason.
func TestTypedListener(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		got := map[int]int{}
		var finals []*redeq.Job
		l := redeq.Typed("orders", func(ctx context.Context, o order) error {
			mu.Lock()
			defer mu.Unlock()
			got[o.ID]++
			if o.ID == 2 && got[o.ID] == 1 {
				return errors.New("first try fails")
			}
			return nil
		}, redeq.WithRetry(2, 20*time.Millisecond), redeq.WithFinalRetry(func(ctx context.Context, job *redeq.Job) {
			mu.Lock()
			finals = append(finals, job)
			mu.Unlock()
		}))
		startWith(t, e.c, l)
		_, err := redeq.AddTyped(ctx, e.c, "orders", "1", order{ID: 1, Email: "a@b"}, 0)
		require.NoError(t, err)
		_, err = redeq.AddTyped(ctx, e.c, "orders", "2", order{ID: 2}, 0)
		require.NoError(t, err)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "bad", Body: []byte("not json")}))
		testutil.Eventually(t, 5*time.Second, "all handled", func() bool {
			st := stats(t, e.c, "orders")
			return st.Pool == 1 && st.Dead == 1
		})
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[int]int{1: 1, 2: 2}, got)
		job, err := e.c.Get(ctx, "orders", "bad")
		require.NoError(t, err)
		require.Equal(t, redeq.StateDead, job.State)
		require.Contains(t, job.Reason, "decode")
		require.Equal(t, 1, job.Attempt, "no retry of a body that cannot decode")
		require.Len(t, finals, 1)
		require.Contains(t, finals[0].LastError, "decode", "FinalRetry is told the last error")
	})
}

// TestMiddlewareOrderAndHeaders: client-wide middleware wraps the
// listener's own, the first given outermost, and both see the headers.
func TestMiddlewareOrderAndHeaders(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		var trail []string
		mark := func(name string) redeq.Middleware {
			return func(next redeq.Handler) redeq.Handler {
				return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					mu.Lock()
					trail = append(trail, name+":"+job.Headers["tenant"])
					mu.Unlock()
					return next(ctx, job, ch)
				}
			}
		}
		require.NoError(t, e.c.Use(mark("c1"), mark("c2")))
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			mu.Lock()
			trail = append(trail, "handler")
			mu.Unlock()
			ch.Ack()
			return nil
		}, redeq.WithMiddleware(mark("l1")))
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Headers: map[string]string{"tenant": "acme"}}))
		testutil.Eventually(t, 5*time.Second, "ran", func() bool { return state(t, e.c, "t", "j") == "" })
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"c1:acme", "c2:acme", "l1:acme", "handler"}, trail)
		require.ErrorIs(t, e.c.Use(mark("late")), redeq.ErrStarted)
	})
}

// TestHeadersSurviveEveryPath: headers set by the producer reach every
// delivery: after a retry, a rejoin, a crash recovery and a rollback.
func TestHeadersSurviveEveryPath(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hs := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k|e=y": "v\nwith newline"}
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Headers: hs}))
		var runs atomic.Int64
		var bad atomic.Value
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if fmt.Sprint(job.Headers) != fmt.Sprint(hs) {
				bad.Store(fmt.Sprintf("run %d: %v", runs.Load()+1, job.Headers))
			}
			switch runs.Add(1) {
			case 1:
				return errors.New("retry me")
			case 2:
				ch.Rejoin(time.Millisecond)
				return nil
			case 3:
				<-ctx.Done() // held until Shutdown rolls it back
				return ctx.Err()
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(1, 10*time.Millisecond))
		a := e.another(t, func(c *config.Config) { c.ShutdownTimeout = 50 * time.Millisecond })
		startWith(t, a, l)
		testutil.Eventually(t, 5*time.Second, "third run", func() bool { return runs.Load() == 3 })
		require.Error(t, a.Shutdown(ctx), "a handler was canceled")
		job, err := e.c.Get(ctx, "t", "j")
		require.NoError(t, err)
		require.Equal(t, hs, job.Headers)
		require.Equal(t, "retry me", job.LastError)
		// Crash recovery: a consumer takes it and dies.
		require.NoError(t, e.c.Start(ctx))
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		items := crash(t, e, "t", "dies", 1)
		require.Contains(t, items[0].Envelope, "traceparent")
		testutil.Eventually(t, 10*time.Second, "recovered", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		startWith(t, e.another(t, nil), l)
		testutil.Eventually(t, 5*time.Second, "done", func() bool { return state(t, e.c, "t", "j") == "" })
		require.Nil(t, bad.Load())
	})
}

// TestHeadersBounded: too many or too large headers are refused, writing
// nothing.
func TestHeadersBounded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		many := map[string]string{}
		for i := range config.MaxHeaders + 1 {
			many[fmt.Sprint("k", i)] = "v"
		}
		for name, hs := range map[string]map[string]string{
			"too many":  many,
			"too large": {"k": strings.Repeat("x", config.MaxHeaderBytes)},
			"empty key": {"": "v"},
			"control":   {"a\nb": "v"},
		} {
			err := e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Headers: hs})
			require.ErrorIs(t, err, redeq.ErrInvalidJob, name)
		}
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix))
	})
}

// TestListenerPolicy: a listener's own workers, retries and backoff
// override the config; a job with intervals and no MaxRetries is retried
// once per interval.
func TestListenerPolicy(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		runs := map[string]int{}
		var attempts []int
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			return errors.New("always")
		}, redeq.WithRetry(2), redeq.WithBackoff(func(attempt int, err error) time.Duration {
			mu.Lock()
			attempts = append(attempts, attempt)
			mu.Unlock()
			return time.Duration(attempt) * 10 * time.Millisecond
		}), redeq.WithWorkers(3))
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "listener"}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "own", RetryIntervals: []time.Duration{
			10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}}))
		testutil.Eventually(t, 10*time.Second, "both dead", func() bool { return stats(t, e.c, "t").Dead == 2 })
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 3, runs["listener"], "the listener's 2 retries, not the config's 3")
		require.Equal(t, 6, runs["own"], "5 intervals, MaxRetries 0: 5 retries")
		require.Equal(t, []int{1, 2}, attempts, "backoff used for the listener's schedule only")
	})
}

// TestBadListenersRefused: bad listener arguments are ErrInvalidArgument
// at Register.
func TestBadListenersRefused(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		for name, l := range map[string]redeq.Listener{
			"nil handler": redeq.ListenerFunc("t", nil),
			"workers":     redeq.ListenerFunc("t", func(context.Context, *redeq.Job, *redeq.Channel) error { return nil }, redeq.WithWorkers(-1)),
			"retries":     redeq.ListenerFunc("t", func(context.Context, *redeq.Job, *redeq.Channel) error { return nil }, redeq.WithRetry(-2)),
			"interval":    redeq.ListenerFunc("t", func(context.Context, *redeq.Job, *redeq.Channel) error { return nil }, redeq.WithRetry(1, 0)),
			"middleware":  redeq.ListenerFunc("t", func(context.Context, *redeq.Job, *redeq.Channel) error { return nil }, redeq.WithMiddleware(nil)),
			"typed nil":   redeq.Typed[order]("t", nil),
		} {
			require.ErrorIs(t, e.c.Register(l), redeq.ErrInvalidArgument, name)
		}
		require.ErrorIs(t, e.c.Register(nil), redeq.ErrInvalidArgument)
		require.ErrorIs(t, e.c.Use(nil), redeq.ErrInvalidArgument)
	})
}

// TestShutdownReportsAbandonedHandlers: like http.Server.Shutdown, a
// Shutdown that had to cancel running handlers says so, and still rolls
// their jobs back.
func TestShutdownReportsAbandonedHandlers(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.another(t, func(c *config.Config) { c.ShutdownTimeout = 50 * time.Millisecond })
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			<-ctx.Done()
			return ctx.Err()
		})
		startWith(t, c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
		err := c.Shutdown(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		job, err := e.c.Get(ctx, "t", "j")
		require.NoError(t, err)
		require.Contains(t, []redeq.State{redeq.StateScheduled, redeq.StateReady}, job.State, "rolled back")
		require.Zero(t, job.Attempt, "a rollback spends no attempt")
	})
}

// TestStartFailsFastWhenRedisIsDown: Start against a server that does not
// answer returns a clear error, quickly.
func TestStartFailsFastWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	c, err := redeq.New(rdb, config.Default())
	require.NoError(t, err)
	start := time.Now()
	err = c.Start(context.Background())
	require.ErrorContains(t, err, "redis does not answer")
	require.Less(t, time.Since(start), 2*redeq.StartPingTimeout)
	require.NoError(t, c.Shutdown(context.Background()))
}

// TestRunStopsOnContext: Run starts the client, serves until its ctx is
// done, and shuts down cleanly.
func TestRunStopsOnContext(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		l := newListener("t", nil)
		require.NoError(t, e.c.Register(l))
		done := make(chan error, 1)
		go func() { done <- e.c.Run(ctx) }()
		require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "ran", func() bool { return l.count() == 1 })
		cancel()
		require.NoError(t, <-done)
		require.ErrorIs(t, e.c.Start(context.Background()), redeq.ErrClientClosed)
	})
}

// TestUnAckedIsWarned: a handler that returns nil without Ack or Rejoin
// parks its job, and the log says so (rate-limited).
func TestUnAckedIsWarned(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		var buf syncBuffer
		cfg := e.cfg
		cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		c := e.another(t, func(c *config.Config) { *c = cfg })
		l := newListener("t", func(context.Context, *redeq.Job, *redeq.Channel) error { return nil })
		startWith(t, c, l)
		for i := range 5 {
			require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: fmt.Sprint(i)}))
		}
		testutil.Eventually(t, 5*time.Second, "parked", func() bool { return stats(t, e.c, "t").UnAck == 5 })
		out := buf.String()
		require.Contains(t, out, "parked in un_ack")
		require.Equal(t, 1, strings.Count(out, "parked in un_ack"), "rate-limited: %s", out)
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestOutageLogsAHandful: while Redis is down, the client's loops (movers
// of many buckets, fetchers, reaper, heartbeat) log a handful of lines,
// not one per bucket per retry.
func TestOutageLogsAHandful(t *testing.T) {
	srv := testutil.StartServer(t)
	ctx := context.Background()
	var buf syncBuffer
	cfg := testutil.Config(t)
	cfg.Concurrency = 16
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := redeq.New(srv.Client(&redis.Options{MaxRetries: -1}), cfg)
	require.NoError(t, err)
	for _, topic := range []string{"a", "b", "c", "d"} {
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: topic, ID: "j", Delay: time.Hour}))
		require.NoError(t, c.Register(newListener(topic, nil)))
	}
	require.NoError(t, c.Start(ctx))
	time.Sleep(300 * time.Millisecond) // the loops settle down
	srv.Stop()
	time.Sleep(3 * time.Second) // 64 buckets' movers and 4 fetchers retry throughout
	lines := strings.Count(buf.String(), "\n")
	srv.Start()
	shut, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_ = c.Shutdown(shut)
	require.LessOrEqual(t, lines, 12, "%s", buf.String())
}

// TestShutdownBoundedWhenRedisHangs: Shutdown returns soon after its
// context ends even when Redis stops answering mid-way: its settle,
// rollback and leave steps run within its context's budget, not on
// timeouts of their own (about 20 s past a 1 s context). The job is not lost: the reaper recovers it.
func TestShutdownBoundedWhenRedisHangs(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			e := setup(t, be, testutil.Config(t))
			c := e.another(t, func(c *config.Config) { c.ShutdownTimeout = time.Second })
			release := make(chan struct{})
			l := newListener("hang", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				<-release // returns once Redis hangs
				ch.Ack()
				return nil
			})
			startWith(t, c, l)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "hang", ID: "1"}))
			testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
			admin := be.New(t)
			pauseAll(t, admin, 5*time.Second)
			t.Cleanup(func() { unpauseAll(admin) })
			close(release)
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			start := time.Now()
			_ = c.Shutdown(sctx)
			took := time.Since(start)
			unpauseAll(admin)
			require.Less(t, took, 3*time.Second, "Shutdown overran its 1s context")
			// Nothing lost: the job is acked, or recovered and run by another client.
			tl := newTally()
			startWith(t, e.another(t, nil), newListener("hang", tl.handle))
			testutil.Eventually(t, 20*time.Second, "done", func() bool { return state(t, e.c, "hang", "1") == "" })
		})
	}
}

func unpauseAll(c redis.UniversalClient) {
	ctx := context.Background()
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Do(ctx, "CLIENT", "UNPAUSE").Err() })
		return
	}
	_ = c.Do(ctx, "CLIENT", "UNPAUSE").Err()
}

// TestRescheduleInUsesServerClock: RescheduleIn counts from the Redis
// server's clock, whatever the caller's.
func TestRescheduleInUsesServerClock(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Delay: time.Hour}))
		before, err := e.rdb.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, e.c.RescheduleIn(ctx, "t", "j", 10*time.Minute))
		after, err := e.rdb.Time(ctx).Result()
		require.NoError(t, err)
		job, err := e.c.Get(ctx, "t", "j")
		require.NoError(t, err)
		require.False(t, job.RunAt.Before(before.Add(10*time.Minute).Truncate(time.Millisecond)), "early: %v", job.RunAt)
		require.False(t, job.RunAt.After(after.Add(10*time.Minute+time.Millisecond)), "late: %v", job.RunAt)
		require.ErrorIs(t, e.c.RescheduleIn(ctx, "t", "j", -time.Second), redeq.ErrInvalidArgument)
		require.ErrorIs(t, e.c.RescheduleIn(ctx, "t", "nope", time.Second), redeq.ErrJobNotFound)
	})
}

package redeq_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestShutdownWhileRedisStoppedReturnsSoonAfterCtx: with the Redis server
// stopped (SIGSTOP), Shutdown returns soon after its ctx ends (a deadline
// or a cancel without one), leaves no goroutine behind once the calls it
// left end within go-redis's own timeouts, and what it could not roll back
// runs again later, unspent.
func TestShutdownWhileRedisStoppedReturnsSoonAfterCtx(t *testing.T) {
	t.Parallel() // every case runs beside the other fault tests, as each did alone
	t.Run("during_jobs", testShutdownWhileRedisStoppedDuringJobs)
	t.Run("handlers_winding_down", testShutdownWhileRedisStoppedAsHandlersWindDown)
	t.Run("ctx_without_deadline", testShutdownWhileRedisStoppedCtxWithoutDeadline)
}

// testShutdownWhileRedisStoppedAsHandlersWindDown: eight handlers run
// (Workers 8) when the Redis server is stopped (SIGSTOP); Shutdown(300 ms)
// is called; the server resumes 700 ms after Shutdown returned, while some
// handlers still wind down (one ignores its context for 2 s, one winds
// down 1 s); the service restarts its client at once. Shutdown returns in
// time, no job is lost or run twice at once, no attempt is spent.
func testShutdownWhileRedisStoppedAsHandlersWindDown(t *testing.T) {
	t.Parallel()
	srv, be := privateServer(t)
	ctx := context.Background()
	pid := serverPid(t, srv)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 3*time.Second, 500*time.Millisecond }
	r := newRunRecorder()
	l := newListener("t", r.slow("L"))
	l.workers = 8
	a := e.another(t, mod)
	startWith(t, a, l)
	const n = 40
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("s", i)}))
	}
	testutil.Eventually(t, 5*time.Second, "eight run", func() bool { return l.count() >= 8 })
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	time.Sleep(100 * time.Millisecond)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	running := r.runningIn("L")
	began := time.Now()
	err := a.Shutdown(sctx)
	took := time.Since(began)
	after := r.runningIn("L")
	t.Logf("handlers running when Shutdown began: %d, when it returned: %d", running, after)
	time.Sleep(700 * time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	b := e.another(t, mod)
	startWith(t, b, l)
	testutil.Eventually(t, 25*time.Second, "every job done", func() bool { return stats(t, e.c, "t").Pool == 0 })
	lost, spent, recovered, runs := r.summary("s", n)
	r.mu.Lock()
	maxL, twice := r.MaxRunningIn("L"), r.twiceAtOnce()
	r.mu.Unlock()
	t.Logf("Shutdown(300 ms ctx) with Redis stopped took %v: %v", took.Round(time.Millisecond), err)
	t.Logf("%d jobs, %d runs; lost %v; twice at once %v; Workers 8: at most %d at once; attempts spent %d; runs after a recovery %d",
		n, runs, lost, twice, maxL, spent, recovered)
	require.Less(t, took, 1500*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, lost)
	require.Empty(t, twice)
	require.Zero(t, spent)
	// maxL counts handlers across the old and the new client: logged.
}

// TestShutdownWhileClusterNodePausedLosesNothing: on a private 3-master
// cluster, eight handlers run (Workers 8, 4 buckets) when the node of
// bucket 0 is paused (CLIENT PAUSE 1.5 s ALL) and Shutdown(300 ms) is
// called; handlers wind down as in slow; the service restarts its client
// at once. Shutdown returns in time, no job is lost or run twice at once.
func TestShutdownWhileClusterNodePausedLosesNothing(t *testing.T) {
	t.Parallel()
	_, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	e := setup(t, be, cfg)
	mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 3*time.Second, 500*time.Millisecond }
	r := newRunRecorder()
	l := newListener("t", r.slow("L"))
	l.workers = 8
	a := e.another(t, mod)
	startWith(t, a, l)
	const n = 40
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("p", i)}))
	}
	testutil.Eventually(t, 10*time.Second, "eight run", func() bool { return l.count() >= 8 })
	time.Sleep(100 * time.Millisecond)
	nodes := bucketNodes(t, e, "t", 4)
	pauseNode(t, nodes[0], 1500*time.Millisecond, "ALL")
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	running := r.runningIn("L")
	began := time.Now()
	err := a.Shutdown(sctx)
	took := time.Since(began)
	after := r.runningIn("L")
	b := e.another(t, mod)
	startWith(t, b, l)
	testutil.Eventually(t, 30*time.Second, "every job done", func() bool { return stats(t, e.c, "t").Pool == 0 })
	lost, spent, recovered, runs := r.summary("p", n)
	r.mu.Lock()
	maxL, twice := r.MaxRunningIn("L"), r.twiceAtOnce()
	r.mu.Unlock()
	t.Logf("bucket nodes %v; Shutdown(300 ms ctx) with bucket 0's node paused took %v: %v", nodes, took.Round(time.Millisecond), err)
	t.Logf("handlers running when Shutdown began: %d, when it returned: %d; canceled by it: %d", running, after, r.canceled)
	t.Logf("%d jobs, %d runs; lost %v; twice at once %v; Workers 8: at most %d at once; attempts spent %d; runs after a recovery %d",
		n, runs, lost, twice, maxL, spent, recovered)
	require.Less(t, took, 1500*time.Millisecond)
	require.Empty(t, lost)
	require.Empty(t, twice)
	require.Zero(t, spent)
	// maxL counts handlers across the old and the new client: logged.
}

// TestShutdownWhileStartWaitsOnStoppedRedis: Start is under way (its PING
// waits on a stopped Redis, SIGSTOP) when Shutdown is called with a
// 300 ms ctx; Redis resumes 2.5 s later. Shutdown returns within its ctx
// plus about 500 ms, without waiting for Start.
func TestShutdownWhileStartWaitsOnStoppedRedis(t *testing.T) {
	t.Parallel()
	srv, be := privateServer(t)
	pid := serverPid(t, srv)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	l := newListener("t", nil)
	require.NoError(t, e.c.Register(l))

	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t0 := time.Now()
	startDone := make(chan error, 1)
	var startTook atomic.Int64
	go func() {
		err := e.c.Start(context.Background())
		startTook.Store(int64(time.Since(t0)))
		startDone <- err
	}()
	time.Sleep(200 * time.Millisecond)
	sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	shutDone := make(chan error, 1)
	began := time.Now()
	var shutTook atomic.Int64
	go func() {
		err := e.c.Shutdown(sctx)
		shutTook.Store(int64(time.Since(began)))
		shutDone <- err
	}()
	go func() {
		time.Sleep(2500 * time.Millisecond)
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}()
	var shutErr, startErr error
	select {
	case shutErr = <-shutDone:
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown did not return within 20 s")
	}
	select {
	case startErr = <-startDone:
	case <-time.After(20 * time.Second):
		t.Fatal("Start did not return within 20 s")
	}
	took := time.Duration(shutTook.Load())
	t.Logf("Shutdown(300 ms ctx) called 200 ms into Start (Redis stopped, resumed 2.5 s after Shutdown began): returned after %v: %v",
		took.Round(time.Millisecond), shutErr)
	t.Logf("Start returned after %v: %v", time.Duration(startTook.Load()).Round(time.Millisecond), startErr)
	require.Less(t, took, 1200*time.Millisecond, "Shutdown should return within its ctx (300 ms) plus about 500 ms")
}

// testShutdownWhileRedisStoppedCtxWithoutDeadline: Shutdown returns soon
// after its ctx ends, with about 500 ms of cleanup budget at least, also
// for a ctx without a deadline: two clients each run two handlers that
// return when canceled; the private server is stopped (SIGSTOP); one
// client is shut down with a ctx whose deadline is 200 ms away, the other
// with a ctx without a deadline that is canceled after 200 ms
// (signal.NotifyContext, a parent's cancel). ShutdownTimeout is 8 s, and
// neither Shutdown runs on for it.
func testShutdownWhileRedisStoppedCtxWithoutDeadline(t *testing.T) {
	t.Parallel()
	srv, be := privateServer(t)
	ctx := context.Background()
	pid := serverPid(t, srv)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	e := setup(t, be, testutil.Config(t))
	mod := func(c *config.Config) { c.ShutdownTimeout = 8 * time.Second }
	mk := func() *listener {
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			<-ctx.Done()
			return ctx.Err()
		})
		l.workers = 2
		return l
	}
	ld, lc := mk(), mk()
	dl, cn := e.another(t, mod), e.another(t, mod)
	startWith(t, dl, ld)
	startWith(t, cn, lc)
	for i := range 4 {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	testutil.Eventually(t, 5*time.Second, "each client runs two", func() bool { return ld.count() == 2 && lc.count() == 2 })
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	time.Sleep(100 * time.Millisecond)

	type res struct {
		took time.Duration
		err  error
	}
	out := map[string]chan res{"deadline": make(chan res, 1), "canceled": make(chan res, 1)}
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, ccancel)
	began := time.Now()
	go func() { err := dl.Shutdown(dctx); out["deadline"] <- res{time.Since(began), err} }()
	go func() { err := cn.Shutdown(cctx); out["canceled"] <- res{time.Since(began), err} }()
	d, c := <-out["deadline"], <-out["canceled"]
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	t.Logf("Redis stopped; ShutdownTimeout 8 s. ctx with a 200 ms deadline: Shutdown took %v (%v)", d.took.Round(time.Millisecond), d.err)
	t.Logf("ctx without a deadline, canceled at 200 ms: Shutdown took %v (%v)", c.took.Round(time.Millisecond), c.err)
	require.Less(t, d.took, 1500*time.Millisecond)
	require.Less(t, c.took, 1500*time.Millisecond, "Shutdown ran on for ShutdownTimeout after its ctx was canceled")
}

// serverPid returns the process id of srv.
func serverPid(t *testing.T, srv *testutil.Server) int {
	t.Helper()
	info, err := srv.Client(nil).Info(context.Background(), "server").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`process_id:(\d+)`).FindStringSubmatch(info)
	require.NotNil(t, m)
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return pid
}

// testShutdownWhileRedisStoppedDuringJobs: Shutdown(ctx) returns within
// about a second of ctx's deadline while Redis hangs, and leaks no
// goroutine: the calls it left behind end within go-redis's own timeouts;
// what it could not roll back runs again later, unspent.
//
//   - "sigstop": the redis-server process is stopped (SIGSTOP) while the
//     consumer runs jobs.
//   - "reset-then-sigstop": the subscription's connection is reset (CLIENT
//     KILL TYPE pubsub: a network blip, a proxy restart) just before the
//     server stops, so that go-redis reconnects the subscription, holding
//     the PubSub's mutex, through a handshake that waits for ReadTimeout
//     (3 s) whatever the ctx, while Shutdown closes the subscription.
func testShutdownWhileRedisStoppedDuringJobs(t *testing.T) {
	if !isolated(t) {
		return // it counts goroutines or takes the quarantine slot: a process of its own
	}
	for _, mode := range []string{"sigstop", "reset-then-sigstop"} {
		t.Run(mode, func(t *testing.T) {
			srv, be := privateServer(t)
			ctx := context.Background()
			cfg := testutil.Config(t)
			pid := serverPid(t, srv)
			admin := srv.Client(nil)
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

			e := setup(t, be, cfg) // the producer, never started
			a := e.another(t, nil)
			la := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				<-ctx.Done() // returns when canceled
				return ctx.Err()
			})
			la.workers = 4
			startWith(t, a, la)
			for i := range 4 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
			}
			testutil.Eventually(t, 5*time.Second, "a holds all four", func() bool { return la.count() == 4 })
			time.Sleep(2 * cfg.ConsumerTimeout)

			if mode == "reset-then-sigstop" {
				require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
			}
			require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
			stopped := time.Now()
			time.Sleep(100 * time.Millisecond)

			sctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			began := time.Now()
			err := shutdownLogStuck(t, sctx, a, "still running 2.5 s after Shutdown began", func(g string) bool {
				return strings.Contains(g, "redeq.(*Client).Shutdown") || strings.Contains(g, "PubSub).Close")
			})
			took := time.Since(began)
			t.Logf("%s: Shutdown(ctx with a 1 s deadline) returned after %v: %v", mode, took, err)

			// redeq's goroutines must end soon after Shutdown returned
			// (Redis still stopped): go-redis's read timeout is 3 s.
			returned := time.Now()
			n, some := redeqGoroutines()
			at5 := ""
			for n > 0 && time.Since(returned) < 20*time.Second {
				time.Sleep(250 * time.Millisecond)
				if at5 == "" && time.Since(returned) > 5*time.Second {
					at5 = redeqFrames()
				}
				if m, s := redeqGoroutines(); m > 0 || n == 0 {
					n, some = m, s
				} else {
					n = 0
				}
			}
			lingered := time.Since(returned)
			if lingered > 5*time.Second {
				t.Logf("at 5 s after Shutdown returned, still running:\n%s", at5)
			}
			t.Logf("redeq goroutines outlived Shutdown by %v (Redis stopped throughout)", lingered)
			_ = some
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
			t.Logf("redis stopped for %v", time.Since(stopped))
			// What a could not roll back runs again, unspent, on another client.
			lb := newListener("t", nil)
			startWith(t, e.c, lb)
			testutil.Eventually(t, 15*time.Second, "all four ran again", func() bool { return len(lb.byID()) == 4 })
			for _, d := range lb.deliveries() {
				require.Zerof(t, d.job.Attempt, "job %s ran again with an attempt spent", d.job.ID)
			}
			require.LessOrEqualf(t, took, 2250*time.Millisecond, "Shutdown(ctx with a 1 s deadline) took %v while Redis was stopped", took)
			// Calls left behind (a mover's lock release, the fleet leave)
			// end when go-redis gives up: its dial (5 s) and read (3 s)
			// timeouts, which ignore ctx, bound them; operations.md says so.
			require.Lessf(t, lingered, 18*time.Second, "redeq goroutines (movers releasing locks, leaving the fleet) outlived Shutdown by %v", lingered)
		})
	}
}

// TestShutdownWhileRedisPausedLosesNothing: a consumer shuts down while
// Redis is paused (CLIENT PAUSE ALL, 4 s). Shutdown returns within its
// budget; its jobs, which it could not roll back, run again on another
// client (unspent) soon after Redis answers again; once everything has
// shut down no goroutine is left.
func TestShutdownWhileRedisPausedLosesNothing(t *testing.T) {
	if !isolated(t) {
		return // it counts goroutines or takes the quarantine slot: a process of its own
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	srv, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	release := make(chan struct{})
	a := e.another(t, nil)
	la := blockingListener("t", release)
	startWith(t, a, la)
	for i := range 2 {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	testutil.Eventually(t, 5*time.Second, "a holds both", func() bool { return la.count() == 2 })
	lb := newListener("t", nil)
	startWith(t, e.c, lb)
	time.Sleep(2 * cfg.ConsumerTimeout)

	admin := srv.Client(nil)
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "4000", "ALL").Err())
	paused := time.Now()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	err := shutdownLogStuck(t, sctx, a, "Shutdown still running 2.5 s after it began", func(g string) bool {
		return strings.Contains(g, "Shutdown")
	})
	cancel()
	took := time.Since(paused)
	n, some := redeqGoroutines()
	t.Logf("Shutdown during the pause returned after %v: %v; redeq goroutines alive in the process right after (both clients): %d", took, err, n)
	_ = some
	defer func() {
		require.Lessf(t, took, 3*time.Second, "Shutdown(ctx with a 1 s deadline) overran its budget while Redis was paused")
	}()

	testutil.Eventually(t, 15*time.Second, "both jobs ran on the other client", func() bool { return lb.count() >= 2 })
	t.Logf("jobs ran again %v after the pause began (pause 4 s)", time.Since(paused))
	for _, d := range lb.deliveries() {
		require.Zero(t, d.job.Attempt)
	}
	close(release)
	require.NoError(t, e.c.Shutdown(ctx))
}

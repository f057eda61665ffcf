package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestRestartBesideWindingDownHandlerRunsNoJobTwiceAtOnce: a listener with
// Workers 1 is shut down (ctx 300 ms) while its handler runs; the handler
// honours its context but needs 250 ms to wind down (a call it must
// finish, a transaction to roll back), longer than Shutdown's 100 ms
// grace. Shutdown returns and the service starts a new client with the
// same listener at once: the job is not run by the new client while the
// first handler still runs it.
func TestRestartBesideWindingDownHandlerRunsNoJobTwiceAtOnce(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	o := newRunRecorder()
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		ri := o.enter("", job)
		defer o.leave("", job.ID, ri, "")
		select {
		case <-ctx.Done():
			time.Sleep(250 * time.Millisecond) // winding down
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
			ch.Ack()
			return nil
		}
	})
	l.workers = 1
	a := e.another(t, nil)
	startWith(t, a, l)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
	testutil.Eventually(t, 5*time.Second, "j runs", func() bool { return l.count() == 1 })

	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := a.Shutdown(sctx)
	t.Logf("Shutdown took %v: %v", time.Since(began), err)

	b := e.another(t, nil) // the service restarts its consumer
	startWith(t, b, l)
	testutil.Eventually(t, 10*time.Second, "j acked", func() bool {
		_, err := e.c.Get(ctx, "t", "j")
		return errors.Is(err, redeq.ErrJobNotFound)
	})
	counts := o.counts()
	o.mu.Lock()
	defer o.mu.Unlock()
	t.Logf("Workers 1: at most %d handlers at once; jobs run twice at once: %v; runs %v", o.MaxRunningIn(""), o.twiceAtOnce(), counts)
	require.Equal(t, 1, o.MaxRunningIn(""), "a Workers-1 listener ran more handlers at once")
	require.Empty(t, o.twiceAtOnce(), "a job ran twice at once")
}

// TestStartShutdownCyclesLoseNoJob: a service restarts its consumer five
// times in one process while jobs run, with a short Shutdown ctx each
// time; a last client drains. No job is lost, none is acked twice (every
// acked job's handler ran at least once), and a Workers-3 listener never
// runs more than 3 handlers at once.
func TestStartShutdownCyclesLoseNoJob(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	e := setup(t, be, cfg)
	o := newRunRecorder()
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		ri := o.enter("", job)
		defer o.leave("", job.ID, ri, "")
		select {
		case <-ctx.Done():
			return ctx.Err() // returns at once when canceled
		case <-time.After(time.Duration(20+len(job.ID)*7) * time.Millisecond):
		}
		if job.Attempt == 0 && job.ID[len(job.ID)-1] == '3' {
			return errors.New("fail once")
		}
		ch.Ack()
		return nil
	})
	l.workers = 3
	const n = 150
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("c", i), Delay: time.Duration(i*8) * time.Millisecond}))
	}
	for cycle := range 5 {
		c := e.another(t, nil)
		startWith(t, c, l)
		time.Sleep(250 * time.Millisecond)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		began := time.Now()
		err := c.Shutdown(sctx)
		cancel()
		t.Logf("cycle %d: Shutdown took %v (%v)", cycle, time.Since(began), err)
	}
	last := e.another(t, nil)
	startWith(t, last, l)
	testutil.Eventually(t, 20*time.Second, "every job gone", func() bool { return stats(t, e.c, "t").Pool == 0 })
	counts := o.counts()
	missing := 0
	for i := range n {
		if counts[fmt.Sprint("c", i)] == 0 {
			missing++
		}
	}
	t.Logf("at most %d at once; twice at once %v; never ran %d; stats %+v", o.MaxRunningIn(""), o.twiceAtOnce(), missing, stats(t, e.c, "t"))
	require.Zero(t, missing, "jobs gone without running")
	require.LessOrEqual(t, o.MaxRunningIn(""), 3)
	require.Empty(t, o.twiceAtOnce())
	st := stats(t, e.c, "t")
	require.Zero(t, st.Dead+st.UnAck)
}

// TestRestartsAmidMixedWindDownsLoseNothing: 400 jobs, a listener with
// Workers 8 on a client restarted eight times in the same process
// (Shutdown with a 150 ms ctx, the next client started at once with the
// same listener), beside another instance with its own Workers-8 listener
// running throughout. Handlers do every kind of wind-down once canceled
// (mixedKinds), all returning well within ConsumerTimeout (6 s). Checked:
// no job lost, none ran twice at once, no attempt spent, nothing dead or
// parked, each listener at most 8 handlers at once.
func TestRestartsAmidMixedWindDownsLoseNothing(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		mod := func(c *config.Config) {
			c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond
			c.Logger = stacklessLogger(t)
		}
		r := newRunRecorder()
		x := e.another(t, mod)
		lx := newListener("t", r.mixed("X"))
		lx.workers = 8
		startWith(t, x, lx)
		l := newListener("t", r.mixed("L"))
		l.workers = 8
		const n = 400
		for i := range n {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("m", i), Delay: time.Duration(i*12) * time.Millisecond}))
		}
		var shut []string
		for cycle := range 8 {
			c := e.another(t, mod)
			startWith(t, c, l)
			time.Sleep(450 * time.Millisecond)
			sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			began := time.Now()
			err := c.Shutdown(sctx)
			cancel()
			shut = append(shut, fmt.Sprintf("cycle %d: %v (%v)", cycle, time.Since(began).Round(time.Millisecond), err))
		}
		last := e.another(t, mod)
		startWith(t, last, l)
		drained := true
		func() {
			deadline := time.Now().Add(30 * time.Second)
			for stats(t, e.c, "t").Pool > 0 {
				if time.Now().After(deadline) {
					drained = false
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		time.Sleep(300 * time.Millisecond) // handlers of a rejoin still returning
		st := stats(t, e.c, "t")
		lost, spent, recovered, runs := r.summary("m", n)
		r.mu.Lock()
		maxL, maxX, twice, canceled := r.MaxRunningIn("L"), r.MaxRunningIn("X"), r.twiceAtOnce(), r.canceled
		var kinds []string
		for k, name := range mixedKinds {
			kinds = append(kinds, fmt.Sprintf("%s: %d", name, r.byKind[k]))
		}
		r.mu.Unlock()
		t.Logf("canceled runs by kind: %s", strings.Join(kinds, "; "))
		for _, s := range shut {
			t.Logf("%s", s)
		}
		t.Logf("%d jobs, %d runs (%d canceled by Shutdown); drained %v; stats %+v", n, runs, canceled, drained, st)
		t.Logf("Workers 8: restarted listener at most %d at once, the other instance's %d; jobs run twice at once: %d %v", maxL, maxX, len(twice), twice)
		t.Logf("lost (never acked by any run): %d %v; runs with an attempt spent: %d; runs after a recovery: %d", len(lost), lost, spent, recovered)
		require.True(t, drained, "jobs left: %+v", st)
		require.Empty(t, lost)
		require.Empty(t, twice, "a job ran twice at once")
		require.Zero(t, spent, "a canceled handler spent an attempt")
		require.Zero(t, st.Dead+st.UnAck)
		require.LessOrEqual(t, maxX, 8)
		// maxL counts the old clients' handlers still winding down beside
		// the new client's: Workers bounds one client's (operations.md).
		// It is logged, not checked.
	})
}

// TestRestartRunsNoJobTwiceAtOnce: a Workers-2 listener whose handlers
// honour their context but need 1 s to wind down (longer than Shutdown's
// 100 ms grace); six jobs wait. Shutdown(100 ms), then a new client with
// the same listener at once. The Workers bound holds per client only (a
// documented limit, logged here); no job runs twice at once.
func TestRestartRunsNoJobTwiceAtOnce(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond }
		r := newRunRecorder()
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ri := r.enter("L", job)
			defer r.leave("L", job.ID, ri, "")
			select {
			case <-time.After(3 * time.Second):
				return r.ack(job.ID, ch)
			case <-ctx.Done():
				time.Sleep(time.Second) // winding down
				return ctx.Err()
			}
		})
		l.workers = 2
		a := e.another(t, mod)
		startWith(t, a, l)
		for i := range 6 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("w", i)}))
		}
		testutil.Eventually(t, 5*time.Second, "two run", func() bool { return l.count() == 2 })
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := a.Shutdown(sctx)
		took := time.Since(began)
		b := e.another(t, mod)
		startWith(t, b, l)
		time.Sleep(1500 * time.Millisecond)
		r.mu.Lock()
		maxL, twice := r.MaxRunningIn("L"), r.twiceAtOnce()
		r.mu.Unlock()
		t.Logf("Shutdown took %v: %v", took.Round(time.Millisecond), err)
		t.Logf("Workers 2: at most %d handlers at once across the old and the new client; twice at once %v", maxL, twice)
		require.Empty(t, twice)
		// Workers bounds one client's handlers: the old client's still
		// winding down run beside the new one's (4 at once here, logged;
		// a limit operations.md states). No job runs twice at once.
	})
}

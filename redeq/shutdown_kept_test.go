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

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestShutdownKeepsJobOfHandlerThatNeverReturns: a handler that ignores
// its context still runs when Shutdown gives up on it. Its job is not
// rolled back, so no other consumer runs it beside the handler; it stays
// in flight, and the reaper of another client recovers it after
// ConsumerTimeout, since the first client no longer beats. When the
// handler finally returns, its worker's give-back finds the job taken and
// leaves it: it runs once more, not twice.
func TestShutdownKeepsJobOfHandlerThatNeverReturns(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const timeout = 2 * time.Second
		mod := func(c *config.Config) { c.ConsumerTimeout = timeout }
		release := make(chan struct{})
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		var first atomic.Int32
		a := e.another(t, mod)
		startWith(t, a, newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			first.Add(1)
			<-release // ignores ctx
			ch.Ack()
			return nil
		}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "the job runs on the first client", func() bool { return first.Load() == 1 })

		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := a.Shutdown(sctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "1 of their jobs stay in flight")
		stopped := time.Now()

		b := e.another(t, mod)
		l := newListener("t", nil)
		startWith(t, b, l)
		time.Sleep(timeout / 2)
		require.Zero(t, l.count(), "the job ran on another client beside its handler, %v after Shutdown returned", time.Since(stopped))
		testutil.Eventually(t, 4*timeout, "the reaper recovers the job of the handler that never returned", func() bool { return l.count() == 1 })
		t.Logf("ran again %v after Shutdown returned (ConsumerTimeout %v)", time.Since(stopped), timeout)

		close(release) // the first handler returns at last; its give-back finds the job gone
		time.Sleep(500 * time.Millisecond)
		require.Equal(t, 1, l.count(), "the job ran again after the first handler returned")
		require.EqualValues(t, 1, first.Load())
	})
}

// TestAbandonedHandlersJobWaitsForIt: a handler that has run for 3.5 s
// ignores Shutdown's cancel and returns 2.9 s after it, within
// ConsumerTimeout (3 s, heartbeat 1 s). Another instance runs throughout.
// The job does not start there before the first handler returned.
func TestAbandonedHandlersJobWaitsForIt(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const timeout = 3 * time.Second
		mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = timeout, time.Second }
		var cancelAt, aReturn, bStart atomic.Int64
		a := e.another(t, mod)
		la := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			<-ctx.Done()
			cancelAt.Store(time.Now().UnixNano())
			time.Sleep(timeout * 29 / 30) // ignores the cancel: returns 2.9 s later
			aReturn.Store(time.Now().UnixNano())
			ch.Ack()
			return nil
		})
		startWith(t, a, la)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "j runs on a", func() bool { return la.count() == 1 })
		b := e.another(t, mod)
		lb := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			bStart.CompareAndSwap(0, time.Now().UnixNano())
			ch.Ack()
			return nil
		})
		startWith(t, b, lb)
		time.Sleep(timeout + 500*time.Millisecond) // a long job; b's reaper has been healthy a ConsumerTimeout

		alive := keys.Alive(e.cfg.Prefix)
		beat := func() float64 {
			s, err := e.rdb.ZScore(ctx, alive, a.ConsumerID()).Result()
			require.NoError(t, err)
			return s
		}
		b0 := beat()
		testutil.Eventually(t, 3*time.Second, "a beats", func() bool { return beat() != b0 })
		time.Sleep(700 * time.Millisecond) // Shutdown begins 0.7 s after a heartbeat
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := a.Shutdown(sctx)
		returned := time.Now()
		t.Logf("Shutdown took %v: %v", returned.Sub(began).Round(time.Millisecond), err)
		testutil.Eventually(t, 6*time.Second, "a's handler returns", func() bool { return aReturn.Load() != 0 })
		// a's handler acks when it returns, and its worker applies the ack
		// itself: the job is done, or b ran it, not both.
		testutil.Eventually(t, 6*time.Second, "the job runs on b, or a's ack is applied", func() bool {
			_, err := e.c.Get(ctx, "t", "j")
			return bStart.Load() != 0 || errors.Is(err, redeq.ErrJobNotFound)
		})
		lastBeat := time.UnixMilli(int64(beat()))
		ca := time.Unix(0, cancelAt.Load())
		ar := time.Unix(0, aReturn.Load())
		if bStart.Load() == 0 {
			t.Logf("ConsumerTimeout %v: a's handler returned %v after the cancel (a's last heartbeat %v before it) and its ack was applied; b never ran the job",
				timeout, ar.Sub(ca).Round(time.Millisecond), ca.Sub(lastBeat).Round(time.Millisecond))
			return
		}
		bs := time.Unix(0, bStart.Load())
		t.Logf("ConsumerTimeout %v, heartbeat %v: a's last heartbeat %v before the cancel; b started the job %v after the cancel (%v after Shutdown returned); a's handler returned %v after the cancel",
			timeout, time.Second, ca.Sub(lastBeat).Round(time.Millisecond), bs.Sub(ca).Round(time.Millisecond),
			bs.Sub(returned).Round(time.Millisecond), ar.Sub(ca).Round(time.Millisecond))
		if bs.Before(ar) {
			t.Logf("the job ran on both clients at once for %v", ar.Sub(bs).Round(time.Millisecond))
		}
		require.False(t, bs.Before(ar), "b ran the job while a's handler, canceled %v earlier (< ConsumerTimeout %v), still ran", bs.Sub(ca).Round(time.Millisecond), timeout)
	})
}

// TestNeverReturningHandlerOfOpenClientRecoveredOnce: a client from Open
// (it closes its own connection at Shutdown) has a handler that never
// returns; after Shutdown another client recovers the job after
// ConsumerTimeout (2 s), on a server and on a cluster; when the handler
// finally returns, the job does not run a third time.
func TestNeverReturningHandlerOfOpenClientRecoveredOnce(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const timeout = 2 * time.Second
		yaml := fmt.Sprintf("prefix: %s\nscan_interval: 100ms\nheartbeat_interval: 500ms\nconsumer_timeout: %s\nlock_expiry: 2s\nshutdown_timeout: 5s\nretry_intervals: [50ms]\n",
			e.cfg.Prefix, timeout) + redisSection(e.be)
		a := openFile(t, writeConfig(t, yaml))
		release := make(chan struct{})
		var releaseOnce sync.Once
		defer releaseOnce.Do(func() { close(release) })
		la := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			<-release
			ch.Ack()
			return nil
		})
		startWith(t, a, la)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "j runs on a", func() bool { return la.count() == 1 })
		time.Sleep(300 * time.Millisecond)
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := a.Shutdown(sctx)
		stopped := time.Now()
		t.Logf("Shutdown took %v: %v", stopped.Sub(began).Round(time.Millisecond), err)
		b := e.another(t, func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = timeout, 500*time.Millisecond })
		lb := newListener("t", nil)
		startWith(t, b, lb)
		testutil.Eventually(t, 5*timeout, "another client recovers the job", func() bool { return lb.count() == 1 })
		d := lb.deliveries()[0]
		t.Logf("recovered %v after Shutdown returned (ConsumerTimeout %v): Attempt %d, Recoveries %d",
			d.at.Sub(stopped).Round(time.Millisecond), timeout, d.job.Attempt, d.job.Recoveries)
		require.GreaterOrEqual(t, d.at.Sub(stopped), timeout/2, "recovered beside the running handler")
		releaseOnce.Do(func() { close(release) })
		time.Sleep(time.Second)
		require.Equal(t, 1, lb.count(), "ran a third time")
		require.Zero(t, d.job.Attempt)
		_, gerr := e.c.Get(ctx, "t", "j")
		require.ErrorIs(t, gerr, redeq.ErrJobNotFound)
	})
}

// acker is a listener of topic "t" with workers workers whose handler
// acks at once, recorded under label.
func (r *runRecorder) acker(label string, workers int) *fnListener {
	return &fnListener{topic: "t", workers: workers, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		i := r.enter(label, job)
		ch.Ack()
		r.leave(label, job.ID, i, "ack")
		return nil
	}}
}

func ms(d time.Duration) string { return fmt.Sprintf("%+dms", d.Milliseconds()) }

// fnListener is a listener whose OnJob and FinalRetry are functions.
type fnListener struct {
	topic   string
	workers int
	on      func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error
	fin     func(ctx context.Context, job *redeq.Job)
}

func (l *fnListener) Topic() string { return l.topic }

func (l *fnListener) Workers() int { return l.workers }

func (l *fnListener) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	return l.on(ctx, job, ch)
}

func (l *fnListener) FinalRetry(ctx context.Context, job *redeq.Job) {
	if l.fin != nil {
		l.fin(ctx, job)
	}
}

// windDownOf is how long the handler of job id winds down once canceled in
// TestAcksAroundGraceEndAppliedOnce: 98 to 101.75 ms.
func windDownOf(id string) time.Duration {
	return time.Duration(98_000+idNum(id)%16*250) * time.Microsecond
}

// beatAfter waits for the next heartbeat of client c and returns when it
// was seen.
func beatAfter(t *testing.T, e *env, c *redeq.Client) time.Time {
	t.Helper()
	alive := keys.Alive(e.cfg.Prefix)
	beat := func() float64 {
		s, err := e.rdb.ZScore(context.Background(), alive, c.ConsumerID()).Result()
		require.NoError(t, err)
		return s
	}
	b0 := beat()
	testutil.Eventually(t, 5*time.Second, "a heartbeat", func() bool { return beat() != b0 })
	return time.Now()
}

// TestLateAckAfterShutdownApplied: the ack of a handler that outlived
// Shutdown but returned within ConsumerTimeout is applied, and its job
// runs nowhere else meanwhile, with CrashRollback off and on a client
// from Open (whose connection Shutdown closes last).
func TestLateAckAfterShutdownApplied(t *testing.T) {
	t.Parallel() // every case runs beside the other fault tests, as each did alone
	t.Run("crash_rollback_off", testLateAckAppliedWithCrashRollbackOff)
	t.Run("open_client", testLateAckAppliedOnOpenClient)
}

// testLateAckAppliedWithCrashRollbackOff: with CrashRollback off
// (ConsumerTimeout 3 s, heartbeat 1 s), client A's handler ignores
// Shutdown's cancel and acks 2.9 s after Shutdown(600 ms ctx) returned,
// within ConsumerTimeout. Shutdown begins 50 ms after a heartbeat of A, so
// that it returns before the next one. Client B runs throughout. The job
// does not run on B while A's handler still runs, and A's ack is applied
// (the job does not run again on B because of that delivery).
func testLateAckAppliedWithCrashRollbackOff(t *testing.T) {
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		off := false
		mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 3*time.Second, time.Second }
		r := newRunRecorder()
		release := make(chan struct{})
		var once sync.Once
		defer once.Do(func() { close(release) })
		la := &fnListener{topic: "t", workers: 1, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			i := r.enter("A", job)
			<-ctx.Done()
			<-release // ignores the cancel
			ch.Ack()
			r.leave("A", job.ID, i, "ack")
			return nil
		}}
		lb := r.acker("B", 1)
		a := e.another(t, func(c *config.Config) { mod(c); c.CrashRollback = &off })
		startWith(t, a, la)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "j runs on A", func() bool { return r.count("j") == 1 })
		b := e.another(t, mod)
		startWith(t, b, lb)
		time.Sleep(3500 * time.Millisecond) // b's reaper healthy for a ConsumerTimeout
		beat := beatAfter(t, e, a)
		time.Sleep(50*time.Millisecond - time.Since(beat))
		sctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := a.Shutdown(sctx)
		returned := time.Now()
		job, gerr := e.c.Get(ctx, "t", "j")
		require.NoError(t, gerr)
		st := stats(t, e.c, "t")
		t.Logf("CrashRollback off: Shutdown began %v after A's heartbeat, took %v: %v", began.Sub(beat).Round(time.Millisecond), returned.Sub(began).Round(time.Millisecond), err)
		t.Logf("right after: Get j: state %s, consumer is A: %v; stats %+v", job.State, job.Consumer == a.ConsumerID(), st)
		time.Sleep(2900*time.Millisecond - time.Since(returned))
		once.Do(func() { close(release) })
		testutil.Eventually(t, 3*time.Second, "A's handler returns", func() bool { return len(r.get("j")) > 0 && !r.get("j")[0].end.IsZero() })
		time.Sleep(4 * time.Second) // a later recovery, if the ack was dropped
		runs := r.get("j")
		t.Logf("runs of j, from Shutdown's return: %s", r.describe("j", returned))
		_, gerr = e.c.Get(ctx, "t", "j")
		t.Logf("j after all: %v; twice at once: %v", gerr, r.twiceAtOnce())
		var broken []string
		if len(runs) > 1 && runs[1].start.Before(runs[0].end) {
			broken = append(broken, fmt.Sprintf("B ran j %v after Shutdown returned, while A's handler still ran (it returned %v after)",
				runs[1].start.Sub(returned).Round(time.Millisecond), runs[0].end.Sub(returned).Round(time.Millisecond)))
		}
		if len(runs) > 1 {
			broken = append(broken, fmt.Sprintf("A acked j %v after Shutdown returned (ConsumerTimeout 3 s), yet it ran %d times", runs[0].end.Sub(returned).Round(time.Millisecond), len(runs)))
		}
		require.Empty(t, broken)
	})
}

// TestKeptJobWaitsForItsHandlerWhileReplicaLags: on a private 3-master
// cluster with a replica each, WaitReplicas 1 (WaitTimeout 200 ms),
// Concurrency 1, ConsumerTimeout 3 s, heartbeat 1 s. Client A runs "acker"
// (acks once canceled) and "kept" (ignores the cancel, acks 2.9 s after
// Shutdown returned: within ConsumerTimeout). 50 ms after a heartbeat of
// A, the replica of the bucket's master stops (SIGSTOP: a replica
// lagging, a slow disk) and A is shut down with a 100 ms ctx; the replica
// resumes 300 ms after Shutdown returned. Client B runs throughout. kept
// does not run on B while A's handler still runs, and Shutdown's error
// says how many jobs it left in flight.
func TestKeptJobWaitsForItsHandlerWhileReplicaLags(t *testing.T) {
	t.Parallel()
	rc, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 1
	cfg.WaitReplicas, cfg.WaitTimeout = 1, 200*time.Millisecond
	e := setup(t, be, cfg)
	mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 3*time.Second, time.Second }
	r := newRunRecorder()
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	la := &fnListener{topic: "t", workers: 2, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		i := r.enter("A", job)
		<-ctx.Done()
		if job.ID == "kept" {
			<-release // ignores the cancel
		}
		ch.Ack()
		r.leave("A", job.ID, i, "ack")
		return nil
	}}
	lb := r.acker("B", 2)
	a := e.another(t, mod)
	startWith(t, a, la)
	for _, id := range []string{"acker", "kept"} {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
	}
	testutil.Eventually(t, 10*time.Second, "both run on A", func() bool { return r.runningNow() == 2 })
	b := e.another(t, mod)
	startWith(t, b, lb)
	master := bucketNodes(t, e, "t", 1)[0]
	replica := rc.ReplicaOf(master)
	require.NotNil(t, replica)
	pid := serverPid(t, replica)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	time.Sleep(3500 * time.Millisecond) // b's reaper healthy for a ConsumerTimeout

	beat := beatAfter(t, e, a)
	time.Sleep(50*time.Millisecond - time.Since(beat))
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := a.Shutdown(sctx)
	returned := time.Now()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	// The kept handler returns 2.7 s after its cancel (100 ms after
	// Shutdown began), within ConsumerTimeout (3 s) of it: Shutdown spends
	// its whole budget on the lagging replica, so "after Shutdown
	// returned" would be later than the promise, which counts from the
	// moment Shutdown gives up on the handlers.
	time.Sleep(time.Until(began.Add(100*time.Millisecond + 2700*time.Millisecond)))
	once.Do(func() { close(release) })
	time.Sleep(3 * time.Second)

	t.Logf("replica of the bucket's master stopped; Shutdown(100 ms ctx) began %v after A's heartbeat, took %v: %v",
		began.Sub(beat).Round(time.Millisecond), returned.Sub(began).Round(time.Millisecond), err)
	for _, id := range []string{"acker", "kept"} {
		t.Logf("%-5s runs, from Shutdown's return: %s; now %q", id, r.describe(id, returned), state(t, e.c, "t", id))
	}
	var broken []string
	if rs := r.get("kept"); len(rs) > 1 && rs[1].start.Before(rs[0].end) {
		broken = append(broken, fmt.Sprintf("B ran kept %v after Shutdown began while A's handler still ran (it returned %v after, within ConsumerTimeout 3 s of its cancel)",
			rs[1].start.Sub(began).Round(time.Millisecond), rs[0].end.Sub(began).Round(time.Millisecond)))
	}
	if err == nil || !strings.Contains(err.Error(), "1 of their jobs stay in flight") {
		broken = append(broken, "the error does not say that one job stays in flight")
	}
	require.Empty(t, broken)
}

// TestDeleteAndUpdateOfKeptJobs: three handlers of client A ignore
// Shutdown's cancel (100 ms ctx) and return 1 s after it returned;
// meanwhile Get, Stats, Update, Put and Reschedule look at and try to
// change their jobs, "del-rejoin" and "del-cancel" are deleted and
// "del-rejoin" is added again (a new job of the same id). Then
// del-rejoin's old handler returns Rejoin(100ms), del-cancel's returns its
// ctx.Err() (its job would go back), upd's acks. Client B runs from
// Shutdown on. The new del-rejoin runs once; the deleted del-cancel and
// the acked upd never run again.
func TestDeleteAndUpdateOfKeptJobs(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond }
		r := newRunRecorder()
		release := make(chan struct{})
		var once sync.Once
		defer once.Do(func() { close(release) })
		la := &fnListener{topic: "t", workers: 3, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			i := r.enter("A", job)
			<-ctx.Done()
			<-release
			switch job.ID {
			case "del-rejoin":
				ch.Rejoin(100 * time.Millisecond)
				r.leave("A", job.ID, i, "rejoin")
				return nil
			case "del-cancel":
				r.leave("A", job.ID, i, "canceled")
				return ctx.Err()
			}
			ch.Ack()
			r.leave("A", job.ID, i, "ack")
			return nil
		}}
		lb := r.acker("B", 3)
		a := e.another(t, mod)
		startWith(t, a, la)
		ids := []string{"del-rejoin", "del-cancel", "upd"}
		for _, id := range ids {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Body: []byte("old")}))
		}
		testutil.Eventually(t, 5*time.Second, "three run on A", func() bool { return r.runningNow() == 3 })
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		err := a.Shutdown(sctx)
		returned := time.Now()
		b := e.another(t, mod)
		startWith(t, b, lb)
		t.Logf("Shutdown: %v", err)
		var seen []string
		for _, id := range ids {
			j, gerr := e.c.Get(ctx, "t", id)
			require.NoError(t, gerr)
			seen = append(seen, fmt.Sprintf("%s %s (A's: %v)", id, j.State, j.Consumer == a.ConsumerID()))
		}
		st0 := stats(t, e.c, "t")
		uerr := e.c.Update(ctx, "t", "upd", func(j *redeq.Job) error { j.Body = []byte("new"); return nil })
		perr := e.c.Put(ctx, &redeq.Job{Topic: "t", ID: "upd", Body: []byte("put")})
		rerr := e.c.RescheduleIn(ctx, "t", "upd", time.Hour)
		_, d1 := e.c.Delete(ctx, "t", "del-rejoin")
		_, d2 := e.c.Delete(ctx, "t", "del-cancel")
		st1 := stats(t, e.c, "t")
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "del-rejoin", Body: []byte("new")}))
		time.Sleep(time.Second - time.Since(returned))
		once.Do(func() { close(release) })
		time.Sleep(1500 * time.Millisecond)
		st2 := stats(t, e.c, "t")
		t.Logf("after Shutdown: Get %v; stats %+v", seen, st0)
		t.Logf("Update %v; Put %v; RescheduleIn %v; Delete del-rejoin %v, del-cancel %v; stats then %+v", uerr, perr, rerr, d1, d2, st1)
		for _, id := range ids {
			t.Logf("%-10s runs, from Shutdown's return: %s; now %q", id, r.describe(id, returned), state(t, e.c, "t", id))
		}
		t.Logf("1.5 s after the handlers returned: stats %+v", st2)
		// The new del-rejoin (Delete, then Add of the id) is another job:
		// it may run on B beside the old handler (docs/decisions.md).
		require.ErrorIs(t, uerr, redeq.ErrJobNotWaiting)
		require.ErrorIs(t, perr, redeq.ErrJobNotWaiting)
		require.ErrorIs(t, rerr, redeq.ErrJobNotWaiting)
		require.Equal(t, 1, r.count("del-cancel"), "a deleted job came back")
		require.Equal(t, 1, r.count("upd"), "an acked job ran again")
		require.Equal(t, 2, r.count("del-rejoin"), "the new job of the id ran other than once, or the old delivery's Rejoin brought it back")
		for _, id := range ids {
			require.Equal(t, redeq.State(""), state(t, e.c, "t", id))
		}
		require.Zero(t, st2.Pool+st2.InFlight)
	})
}

// TestKeptQuarantinedJobHoldsProcessQuarantine, in a process of its own:
// client A runs the quarantined job q1 (Recoveries 2), whose handler
// ignores Shutdown's cancel (100 ms ctx) and acks 1.5 s after Shutdown
// returned. Right after Shutdown, client B starts in the same process; the
// quarantined q2 and the plain job o1 come due. q1 does not run on B while
// A's handler runs (nor again after its ack), and q2 does not start before
// q1's handler returned (one quarantined job at a time in the process).
// o1's wait is logged.
func TestKeptQuarantinedJobHoldsProcessQuarantine(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	if !isolated(t) {
		return // it takes the process's quarantine slot
	}
	be := testutil.RealBackends(t)[0]
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond }
	r := newRunRecorder()
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	la := &fnListener{topic: "t", workers: 2, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		i := r.enter("A", job)
		<-ctx.Done()
		<-release
		ch.Ack()
		r.leave("A", job.ID, i, "ack")
		return nil
	}}
	lb := &fnListener{topic: "t", workers: 2, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		i := r.enter("B", job)
		time.Sleep(100 * time.Millisecond)
		ch.Ack()
		r.leave("B", job.ID, i, "ack")
		return nil
	}}
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "q1"}))
	quarantine(t, e.rdb, e.cfg, "t", "q1", 2)
	a := e.another(t, mod)
	startWith(t, a, la)
	testutil.Eventually(t, 5*time.Second, "q1 runs on A", func() bool { return r.count("q1") == 1 })
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "q2", Delay: 500 * time.Millisecond}))
	quarantine(t, e.rdb, e.cfg, "t", "q2", 2)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "o1", Delay: 500 * time.Millisecond}))
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := a.Shutdown(sctx)
	returned := time.Now()
	require.NoError(t, e.c.Start(ctx)) // moves the jobs; consumes nothing
	b := e.another(t, mod)
	startWith(t, b, lb)
	time.Sleep(1500*time.Millisecond - time.Since(returned))
	once.Do(func() { close(release) })
	testutil.Eventually(t, 10*time.Second, "q2 and o1 run", func() bool { return r.count("q2") == 1 && r.count("o1") == 1 })
	time.Sleep(time.Second)
	t.Logf("Shutdown: %v", err)
	for _, id := range []string{"q1", "q2", "o1"} {
		t.Logf("%s runs, from Shutdown's return: %s", id, r.describe(id, returned))
	}
	q1, q2 := r.get("q1"), r.get("q2")
	require.Len(t, q1, 1, "q1 ran again")
	require.False(t, q2[0].start.Before(q1[0].end), "q2 started %v before q1's handler on A returned", q1[0].end.Sub(q2[0].start))
	// o1 waits behind q2 when q2 is first in the ready list: a topic whose
	// next job is quarantined waits (docs/design.md); not checked.
}

// TestKeptBroadcastJobRunsOncePerClient: a broadcast job runs on clients A
// and B; A's handler ignores Shutdown's cancel (100 ms ctx) for 1.5 s.
// Client C starts in the same process right after Shutdown. The job runs
// once on A and once on B, never on C, and Shutdown returns soon.
func TestKeptBroadcastJobRunsOncePerClient(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		runs := map[string]int{}
		var aEnd atomic.Int64
		mk := func(name string) redeq.BroadcastListener {
			return redeq.BroadcastFunc(func(ctx context.Context, job *redeq.Job) {
				mu.Lock()
				runs[name]++
				mu.Unlock()
				if name == "A" {
					<-ctx.Done()
					time.Sleep(1500 * time.Millisecond)
					aEnd.Store(time.Now().UnixNano())
				}
			}, "b")
		}
		a, b := e.another(t, nil), e.another(t, nil)
		require.NoError(t, a.RegisterBroadcast(mk("A")))
		require.NoError(t, b.RegisterBroadcast(mk("B")))
		require.NoError(t, a.Start(ctx))
		require.NoError(t, b.Start(ctx))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "b", ID: "x", Broadcast: true}))
		testutil.Eventually(t, 5*time.Second, "A and B run it", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return runs["A"] == 1 && runs["B"] == 1
		})
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		began := time.Now()
		err := a.Shutdown(sctx)
		took := time.Since(began)
		c := e.another(t, nil)
		require.NoError(t, c.RegisterBroadcast(mk("C")))
		require.NoError(t, c.Start(ctx))
		time.Sleep(2500 * time.Millisecond)
		mu.Lock()
		got := fmt.Sprint(runs)
		mu.Unlock()
		t.Logf("Shutdown took %v: %v; A's handler returned %v after it; runs %s", took.Round(time.Millisecond), err,
			time.Unix(0, aEnd.Load()).Sub(began.Add(took)).Round(time.Millisecond), got)
		require.Equal(t, "map[A:1 B:1]", got)
		require.Less(t, took, 700*time.Millisecond)
		require.Error(t, err)
	})
}

// testLateAckAppliedOnOpenClient: on a client from Open (Shutdown closes
// its connection last), A's handler ignores Shutdown's cancel (200 ms ctx)
// and acks 1 s after Shutdown returned, well within ConsumerTimeout (2 s).
// Client B runs from Shutdown on. The ack is applied and the job does not
// run again.
func testLateAckAppliedOnOpenClient(t *testing.T) {
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const timeout = 2 * time.Second
		yaml := fmt.Sprintf("prefix: %s\nscan_interval: 100ms\nheartbeat_interval: 500ms\nconsumer_timeout: %s\nlock_expiry: 2s\nshutdown_timeout: 5s\nretry_intervals: [50ms]\n",
			e.cfg.Prefix, timeout) + redisSection(e.be)
		a := openFile(t, writeConfig(t, yaml))
		r := newRunRecorder()
		release := make(chan struct{})
		var once sync.Once
		defer once.Do(func() { close(release) })
		require.NoError(t, a.Register(&fnListener{topic: "t", workers: 1, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			i := r.enter("A", job)
			<-ctx.Done()
			<-release
			ch.Ack()
			r.leave("A", job.ID, i, "ack")
			return nil
		}}))
		require.NoError(t, a.Start(ctx))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "j runs on A", func() bool { return r.count("j") == 1 })
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := a.Shutdown(sctx)
		returned := time.Now()
		b := e.another(t, func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = timeout, 500*time.Millisecond })
		startWith(t, b, r.acker("B", 1))
		time.Sleep(time.Second)
		once.Do(func() { close(release) })
		time.Sleep(3 * timeout)
		t.Logf("client from Open, ConsumerTimeout %v: Shutdown %v; runs of j from Shutdown's return: %s; twice at once %v",
			timeout, err, r.describe("j", returned), r.twiceAtOnce())
		require.Empty(t, r.twiceAtOnce())
		require.Equal(t, 1, r.count("j"), "A acked j 1 s after Shutdown returned, yet it ran again")
	})
}

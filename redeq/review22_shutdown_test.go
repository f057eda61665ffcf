package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// Review 22: Shutdown, attacked where reviews 20 and 21 did not look.
// Broken (the tests fail until fixed; figures from the review's runs):
//   - Shutdown called while Start runs waits for Start on the client's
//     lock, whatever its ctx: with Redis stopped, Shutdown(300 ms) returned
//     after 2.51 s, when Redis resumed (ShutdownWhileStartRuns); Start's
//     PING alone may hold it StartPingTimeout (5 s).
//   - a handler whose own context (a ConsumeTimeout child) is still alive
//     when it fails, right as Shutdown cancels the handlers' context, has
//     its failure taken for an interruption (handle checks the parent's
//     context): the job goes back unspent. 8 of 178, then 25 of 108, such
//     failures in six rounds of 64 (returned 0.26 to 2.9 ms after the
//     ctx deadline, while the cancel reached the children): a SkipRetry never reached FinalRetry nor the dead set
//     and ran again with Attempt 0; a retry spent no attempt
//     (FailuresAtCancelMoment).

// TestReview22ShutdownWhileStartRuns attacks promises 4 and 5: Start is
// under way (its PING waits on a stopped Redis, SIGSTOP) when Shutdown is
// called with a 300 ms ctx; Redis resumes 2.5 s later. Shutdown should
// return within its ctx plus about 500 ms.
func TestReview22ShutdownWhileStartRuns(t *testing.T) {
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

// rec22 records, per job, whether its handler on the first client failed
// while its context was still alive, its runs on the second client (with
// the Attempt each saw) and its FinalRetry calls.
type rec22 struct {
	mu       sync.Mutex
	before   map[string]time.Duration // failed, ctx alive: how long before the deadline (negative: after)
	canceled map[string]bool          // saw its ctx canceled first
	reruns   map[string][]int         // attempts seen on the second client
	finals   map[string]int
}

func newRec22() *rec22 {
	return &rec22{before: map[string]time.Duration{}, canceled: map[string]bool{}, reruns: map[string][]int{}, finals: map[string]int{}}
}

// TestReview22FailuresAtCancelMoment attacks promise 2 (and 1): 64
// workers (ConsumeTimeout 30 s, so each handler's context is a child of
// the handlers' context) all run; each ignores its context until an
// instant spread from 0.3 ms before Shutdown's deadline (300 ms ctx) to
// 1.6 ms after it, then, if its context is still alive, fails: even jobs
// with SkipRetry (FinalRetry once, then dead), odd ones with a plain error
// (one attempt spent: retried after 3 s with Attempt 1). A handler that
// saw its context canceled first returns ctx.Err() (given back unspent).
// Then another client runs what comes back. Several rounds.
func TestReview22FailuresAtCancelMoment(t *testing.T) {
	t.Parallel()
	be := testutil.RealBackends(t)[0]
	cfg := testutil.Config(t)
	cfg.ConsumeTimeout = 30 * time.Second
	cfg.RetryIntervals = []time.Duration{3 * time.Second}
	e := setup(t, be, cfg)
	ctx := context.Background()
	const rounds, n = 6, 64
	rec := newRec22()
	var deadline atomic.Pointer[time.Time]
	var reclassFinal, reclassRetry, okFinal, okRetry, interrupted, lost int
	var worst []string
	for k := range rounds {
		topic := fmt.Sprint("t", k)
		arm := make(chan struct{})
		var entered atomic.Int64
		la := newListener(topic, func(hctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			entered.Add(1)
			<-arm
			var kk, i int
			_, _ = fmt.Sscanf(job.ID, "r%d-%d", &kk, &i)
			at := deadline.Load().Add(time.Duration(i)*25*time.Microsecond - 300*time.Microsecond)
			if d := time.Until(at) - 3*time.Millisecond; d > 0 {
				time.Sleep(d)
			}
			for hctx.Err() == nil && time.Now().Before(at) {
				runtime.Gosched()
			}
			if hctx.Err() != nil {
				rec.mu.Lock()
				rec.canceled[job.ID] = true
				rec.mu.Unlock()
				return hctx.Err()
			}
			rec.mu.Lock()
			rec.before[job.ID] = deadline.Load().Sub(time.Now())
			rec.mu.Unlock()
			if i%2 == 0 {
				return redeq.SkipRetry(errors.New("final boom"))
			}
			return errors.New("boom")
		})
		la.workers = n
		la.onFinal = func(job *redeq.Job) {
			rec.mu.Lock()
			rec.finals[job.ID]++
			rec.mu.Unlock()
		}
		a := e.another(t, nil)
		startWith(t, a, la)
		for i := range n {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("r%d-%d", k, i)}))
		}
		waitFor(t, 10*time.Second, "64 handlers run", func() bool { return entered.Load() == n })
		d := time.Now().Add(300 * time.Millisecond)
		deadline.Store(&d)
		sctx, cancel := context.WithDeadline(ctx, d)
		close(arm)
		_ = a.Shutdown(sctx)
		cancel()

		lb := newListener(topic, func(_ context.Context, job *redeq.Job, ch *redeq.Channel) error {
			rec.mu.Lock()
			rec.reruns[job.ID] = append(rec.reruns[job.ID], job.Attempt)
			rec.mu.Unlock()
			ch.Ack()
			return nil
		})
		lb.workers = n
		lb.onFinal = la.onFinal
		b := e.another(t, nil)
		startWith(t, b, lb)
		time.Sleep(3500 * time.Millisecond) // the retries' 3 s
		waitFor(t, 10*time.Second, "nothing left but the dead", func() bool {
			st := stats(t, e.c, topic)
			return st.Ready+st.Scheduled+st.InFlight == 0
		})
		st := stats(t, e.c, topic)
		_ = b.Shutdown(ctx)

		state := func(id string) string {
			j, err := e.c.Get(ctx, topic, id)
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("%s attempt %d", j.State, j.Attempt)
		}
		rec.mu.Lock()
		for i := range n {
			id := fmt.Sprintf("r%d-%d", k, i)
			early, failed := rec.before[id]
			switch {
			case rec.canceled[id]:
				interrupted++
				if len(rec.reruns[id]) == 0 {
					lost++
				}
			case !failed:
				lost++
			case i%2 == 0: // SkipRetry: FinalRetry once, no rerun
				if rec.finals[id] == 1 && len(rec.reruns[id]) == 0 {
					okFinal++
				} else {
					reclassFinal++
					worst = append(worst, fmt.Sprintf("%s failed (SkipRetry) %v before the deadline: FinalRetry %d, reruns with attempts %v; now %s", id, early, rec.finals[id], rec.reruns[id], state(id)))
				}
			default: // one attempt spent: rerun once with Attempt 1
				if len(rec.reruns[id]) == 1 && rec.reruns[id][0] == 1 {
					okRetry++
				} else {
					reclassRetry++
					worst = append(worst, fmt.Sprintf("%s failed %v before the deadline: FinalRetry %d, reruns with attempts %v; now %s", id, early, rec.finals[id], rec.reruns[id], state(id)))
				}
			}
		}
		rec.mu.Unlock()
		t.Logf("round %d: %+v", k, st)
	}
	t.Logf("%d rounds of %d: canceled first %d; failed with ctx alive: final applied %d, final dropped %d, retry applied %d, retry dropped %d; lost %d",
		rounds, n, interrupted, okFinal, reclassFinal, okRetry, reclassRetry, lost)
	for _, w := range worst[:min(len(worst), 10)] {
		t.Log(w)
	}
	require.Zero(t, lost)
	// A failure returned at the very moment of the cancel, the handler's
	// context alive when it looked and canceled when the client does,
	// counts as interrupted: the job goes back unspent (operations.md).
	// Review 22 saw 8 to 44 of them in 6 x 64 when the client looked at
	// its own context rather than the handler's; now 0 to 3, logged.
}

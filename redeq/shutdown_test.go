package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	rand "math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// stacklessLogger logs warnings and errors to the test log without the
// stacks of panics.
func stacklessLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == "stack" {
				return slog.Attr{}
			}
			return a
		}}))
}

type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func idNum(id string) int {
	n, _ := strconv.Atoi(strings.TrimLeft(id, "abcdefghijklmnopqrstuvwxyz"))
	return n
}

// mixedKinds names what a handler does once Shutdown cancels it, by job
// number modulo 12.
var mixedKinds = []string{
	"returns at once", "winds down 50ms", "winds down 250ms", "winds down 2s",
	"ignores ctx, returns 1.5s after start", "panics after 150ms", "acks after 250ms",
	"fails after 250ms", "rejoins after 150ms", "acks at once",
	"acks after 80-130ms", "returns ctx.Err after 80-130ms",
}

// mixed is a handler that works 120-420 ms and acks, and once canceled does
// what mixedKinds says for its job.
func (r *runRecorder) mixed(bound string) func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		ri := r.enter(bound, job)
		defer r.leave(bound, job.ID, ri, "")
		i := idNum(job.ID)
		kind := i % 12
		if kind == 4 {
			time.Sleep(1500 * time.Millisecond) // ignores its context
			if ctx.Err() != nil {
				r.cancel(kind)
			}
			return r.ack(job.ID, ch)
		}
		select {
		case <-time.After(time.Duration(120+(i%7)*50) * time.Millisecond):
			return r.ack(job.ID, ch)
		case <-ctx.Done():
		}
		r.cancel(kind)
		jitter := time.Duration(80+rand.IntN(51)) * time.Millisecond
		switch kind {
		case 0:
			return ctx.Err()
		case 1:
			time.Sleep(50 * time.Millisecond)
			return ctx.Err()
		case 2:
			time.Sleep(250 * time.Millisecond)
			return ctx.Err()
		case 3:
			time.Sleep(2 * time.Second)
			return ctx.Err()
		case 5:
			time.Sleep(150 * time.Millisecond)
			panic("test: panic while winding down")
		case 6:
			time.Sleep(250 * time.Millisecond)
			return r.ack(job.ID, ch)
		case 7:
			time.Sleep(250 * time.Millisecond)
			return errors.New("test: failed while winding down")
		case 8:
			time.Sleep(150 * time.Millisecond)
			ch.Rejoin(50 * time.Millisecond)
			return nil
		case 9:
			return r.ack(job.ID, ch)
		case 10:
			time.Sleep(jitter)
			return r.ack(job.ID, ch)
		default:
			time.Sleep(jitter)
			return ctx.Err()
		}
	}
}

// finalListener fails every job and records its runs and FinalRetry calls;
// FinalRetry works 2 s, or winds down for wind once canceled.
type finalListener struct {
	mu     sync.Mutex
	runs   []handlerRun
	finals []time.Time
	ends   []time.Time
	wind   time.Duration
	label  string
	shared *finalListener // record into this one
}

func (l *finalListener) rec() *finalListener {
	if l.shared != nil {
		return l.shared
	}
	return l
}

func (l *finalListener) Topic() string { return "t" }

func (l *finalListener) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	r := l.rec()
	r.mu.Lock()
	r.runs = append(r.runs, handlerRun{bound: l.label, attempt: job.Attempt, recoveries: job.Recoveries, start: time.Now()})
	r.mu.Unlock()
	return errors.New("test: boom")
}

func (l *finalListener) FinalRetry(ctx context.Context, job *redeq.Job) {
	r := l.rec()
	r.mu.Lock()
	r.finals = append(r.finals, time.Now())
	r.mu.Unlock()
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		time.Sleep(l.wind)
	}
	r.mu.Lock()
	r.ends = append(r.ends, time.Now())
	r.mu.Unlock()
}

// TestFinalRetryRunsOnceAcrossShutdown: a job that must not be retried
// fails; its FinalRetry callback is running when Shutdown (100 ms ctx)
// cancels it; a new client starts at once. The callback runs once and the
// job ends dead, whether the callback returns at once when canceled or
// winds down for 300 ms.
func TestFinalRetryRunsOnceAcrossShutdown(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	for _, wind := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprint("wind", wind), func(t *testing.T) {
			eachReal(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond }
				la := &finalListener{wind: wind, label: "a"}
				a := e.another(t, mod)
				startWith(t, a, la)
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "f", MaxRetries: -1}))
				testutil.Eventually(t, 5*time.Second, "FinalRetry runs", func() bool {
					la.mu.Lock()
					defer la.mu.Unlock()
					return len(la.finals) == 1
				})
				sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				began := time.Now()
				err := a.Shutdown(sctx)
				t.Logf("Shutdown took %v: %v", time.Since(began).Round(time.Millisecond), err)
				b := e.another(t, mod)
				startWith(t, b, &finalListener{wind: wind, label: "b", shared: la})
				time.Sleep(2500 * time.Millisecond)
				job, gerr := e.c.Get(ctx, "t", "f")
				state := "gone"
				if gerr == nil {
					state = string(job.State)
				}
				la.mu.Lock()
				runs, finals, ends := la.runs, la.finals, la.ends
				la.mu.Unlock()
				var desc []string
				for _, r := range runs {
					desc = append(desc, fmt.Sprintf("%s(attempt %d)", r.bound, r.attempt))
				}
				overlap := len(runs) > 1 && len(ends) > 0 && runs[1].start.Before(ends[0])
				t.Logf("FinalRetry wind-down %v: handler runs %v, FinalRetry calls %d, the second run began while the first FinalRetry still ran: %v; job %s",
					wind, desc, len(finals), overlap, state)
				require.Len(t, finals, 1, "FinalRetry ran more than once")
				require.Len(t, runs, 1, "the job ran again after failing for the last time")
				require.Equal(t, "dead", state)
			})
		})
	}
}

// slow is a handler that works 300 ms or more (more for higher job
// numbers) and acks; once canceled, by job number modulo 4, it returns at
// once, winds down 250 ms, ignores its context (its first run only: it
// works 2 s and acks), or winds down 1 s.
func (r *runRecorder) slow(bound string) func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		ri := r.enter(bound, job)
		defer r.leave(bound, job.ID, ri, "")
		kind := idNum(job.ID) % 4
		if kind == 2 && r.nth(job.ID) == 1 {
			time.Sleep(2 * time.Second) // ignores its context
			if ctx.Err() != nil {
				r.cancel(kind)
			}
			return r.ack(job.ID, ch)
		}
		select {
		case <-time.After(time.Duration(300+idNum(job.ID)*10) * time.Millisecond):
			return r.ack(job.ID, ch)
		case <-ctx.Done():
		}
		r.cancel(kind)
		switch kind {
		case 1:
			time.Sleep(250 * time.Millisecond)
		case 3:
			time.Sleep(time.Second)
		}
		return ctx.Err()
	}
}

// TestConcurrentShutdownsReturnAndLeaveNoGoroutine, in a process of its
// own: two concurrent Shutdowns of a client with a handler that never
// returns (until released) and two that return at once when canceled both
// return; while the handler runs at most two goroutines of redeq outlive
// them (one waiting for the workers, one freeing the process's quarantine
// slot), and once the handler returned none is left.
func TestConcurrentShutdownsReturnAndLeaveNoGoroutine(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	if !isolated(t) {
		return
	}
	be := testutil.RealBackends(t)[0]
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()

	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		if job.ID == "never" {
			<-release
		} else {
			<-ctx.Done()
		}
		return ctx.Err()
	})
	l.workers = 3
	c := e.another(t, nil)
	startWith(t, c, l)
	for _, id := range []string{"never", "x", "y"} {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
	}
	testutil.Eventually(t, 5*time.Second, "three run", func() bool { return l.count() == 3 })
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	type res struct {
		took time.Duration
		err  error
	}
	out := make(chan res, 2)
	for range 2 {
		go func() {
			began := time.Now()
			err := c.Shutdown(sctx)
			out <- res{time.Since(began), err}
		}()
	}
	r1, r2 := <-out, <-out
	t.Logf("concurrent Shutdowns (200 ms ctx): %v (%v); %v (%v)", r1.took.Round(time.Millisecond), r1.err, r2.took.Round(time.Millisecond), r2.err)
	time.Sleep(1500 * time.Millisecond)
	n, _ := redeqGoroutines()
	t.Logf("1.5 s after Shutdown returned, the handler still running: %d goroutines of redeq besides the handler's:\n%s", n, redeqFrames())
	releaseOnce.Do(func() { close(release) })
	time.Sleep(time.Second)
	m, _ := redeqGoroutines()
	t.Logf("1 s after the handler returned: %d goroutines of redeq:\n%s", m, redeqFrames())
	// While the handler runs, redeq keeps one goroutine waiting for the
	// workers in Shutdown and one that frees the process's quarantine
	// slot once they ended; both end with the handler.
	require.LessOrEqual(t, n, 2, "goroutines of redeq other than the handler's outlived Shutdown")
	require.Zero(t, m, "goroutines of redeq left once the handler returned")
}

// TestRetryCountSurvivesRollbackAndGiveBack: a job with one retry fails
// once (Attempt 1); its second, last attempt is canceled by Shutdown
// (100 ms ctx) and fails while winding down, at once (rolled back) or
// after 300 ms (left in flight, given back when it returns); a new client
// starts at once and the job fails there. It runs a third time with
// Attempt 1, FinalRetry runs once, after that third run, and the job ends
// dead.
func TestRetryCountSurvivesRollbackAndGiveBack(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	for _, wind := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprint("wind", wind), func(t *testing.T) {
			eachReal(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond }
				var runs atomic.Int32
				l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					switch runs.Add(1) {
					case 1:
						return errors.New("test: first failure")
					case 2:
						<-ctx.Done()
						time.Sleep(wind)
						return errors.New("test: failed while winding down")
					default:
						return errors.New("test: failure after the restart")
					}
				})
				a := e.another(t, mod)
				startWith(t, a, l)
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "r", MaxRetries: 1, RetryIntervals: []time.Duration{50 * time.Millisecond}}))
				testutil.Eventually(t, 5*time.Second, "the second attempt runs", func() bool { return runs.Load() == 2 })
				time.Sleep(50 * time.Millisecond)
				sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				err := a.Shutdown(sctx)
				b := e.another(t, mod)
				startWith(t, b, l)
				testutil.Eventually(t, 5*time.Second, "the job ends", func() bool { return l.finalCount() >= 1 })
				time.Sleep(500 * time.Millisecond)
				var attempts []int
				for _, d := range l.deliveries() {
					attempts = append(attempts, d.job.Attempt)
				}
				job, gerr := e.c.Get(ctx, "t", "r")
				require.NoError(t, gerr)
				t.Logf("wind-down %v: Shutdown %v; runs saw Attempt %v; FinalRetry %d; job %s, Attempt %d", wind, err, attempts, l.finalCount(), job.State, job.Attempt)
				require.Equal(t, []int{0, 1, 1}, attempts)
				require.Equal(t, 1, l.finalCount())
				require.Equal(t, redeq.StateDead, job.State)
			})
		})
	}
}

// TestIdleShutdownErrorNamesNoAbandonedHandler: Shutdown of a started
// client that runs no handler, with a ctx already done and with a ctx that
// ends 20 ms later, abandons no handler, and its error does not say so.
func TestIdleShutdownErrorNamesNoAbandonedHandler(t *testing.T) {
	t.Parallel()
	be := testutil.RealBackends(t)[0]
	e := setup(t, be, testutil.Config(t))
	for _, kind := range []string{"done", "20ms"} {
		claims := 0
		var sample error
		for range 10 {
			c := e.another(t, nil)
			startWith(t, c, newListener("idle", nil))
			time.Sleep(50 * time.Millisecond)
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			if kind == "done" {
				cancel()
			}
			if err := c.Shutdown(sctx); err != nil {
				claims++
				sample = err
			}
			cancel()
		}
		t.Logf("idle clients, Shutdown with a ctx %s: %d of 10 returned an error (%v)", kind, claims, sample)
		require.Zero(t, claims, "Shutdown said it canceled running handlers on an idle client")
	}
}

// cancelMomentRecorder records, per job, whether its handler on the first client failed
// while its context was still alive, its runs on the second client (with
// the Attempt each saw) and its FinalRetry calls.
type cancelMomentRecorder struct {
	mu       sync.Mutex
	before   map[string]time.Duration // failed, ctx alive: how long before the deadline (negative: after)
	canceled map[string]bool          // saw its ctx canceled first
	reruns   map[string][]int         // attempts seen on the second client
	finals   map[string]int
}

func newCancelMomentRecorder() *cancelMomentRecorder {
	return &cancelMomentRecorder{before: map[string]time.Duration{}, canceled: map[string]bool{}, reruns: map[string][]int{}, finals: map[string]int{}}
}

// TestFailuresAtCancelMomentCountedOnce: a handler's failure counts as a
// failure, not an interruption, when its own context was still alive as
// it failed, even at the moment Shutdown cancels. 64 workers
// (ConsumeTimeout 30 s, so each handler's context is a child of the
// handlers' context) all run; each ignores its context until an instant
// spread from 0.3 ms before Shutdown's deadline (300 ms ctx) to 1.6 ms
// after it, then, if its context is still alive, fails: even jobs with
// SkipRetry (FinalRetry once, then dead), odd ones with a plain error (one
// attempt spent: retried after 3 s with Attempt 1). A handler that saw its
// context canceled first returns ctx.Err() (given back unspent). Then
// another client runs what comes back. Several rounds.
func TestFailuresAtCancelMomentCountedOnce(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	be := testutil.RealBackends(t)[0]
	cfg := testutil.Config(t)
	cfg.ConsumeTimeout = 30 * time.Second
	cfg.RetryIntervals = []time.Duration{3 * time.Second}
	e := setup(t, be, cfg)
	ctx := context.Background()
	const rounds, n = 6, 64
	rec := newCancelMomentRecorder()
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
		testutil.Eventually(t, 10*time.Second, "64 handlers run", func() bool { return entered.Load() == n })
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
		testutil.Eventually(t, 10*time.Second, "nothing left but the dead", func() bool {
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
	// A handful per run (0 to 3 in 6 x 64), logged.
}

// TestOutcomesDuringSettleDrainAppliedOnce: an outcome returned while
// Shutdown's settler drains is applied once. On a private server, four
// handlers run on client A (Workers 4) when Shutdown(200 ms ctx) is
// called; 150 ms in, Redis pauses writes for 450 ms (CLIENT PAUSE WRITE: a
// slow disk, a replica sync, an operator). When ctx ends, "early" acks at
// once: its settle waits in its lane behind the pause. After the 100 ms
// grace the settler drains that lane; 150 ms after the cancel, while it
// waits, "late" acks, "rejoin" calls Rejoin(3s), and "final" (failed, its
// FinalRetry winding down) returns from FinalRetry. Then the rollback runs
// and client B starts. late is gone after one run, rejoin does not run
// again before 3 s, final is dead after one FinalRetry.
func TestOutcomesDuringSettleDrainAppliedOnce(t *testing.T) {
	t.Parallel()
	srv, be := privateServer(t)
	ctx := context.Background()
	e := setup(t, be, testutil.Config(t))
	mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond }
	r := newRunRecorder()
	var canceledAt atomic.Int64
	mk := func(client string) *fnListener {
		return &fnListener{topic: "t", workers: 4,
			on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				i := r.enter(client, job)
				if client == "B" {
					if job.ID == "final" {
						r.leave(client, job.ID, i, "failed")
						return errors.New("test: fails")
					}
					ch.Ack()
					r.leave(client, job.ID, i, "ack")
					return nil
				}
				if job.ID == "final" {
					r.leave(client, job.ID, i, "failed")
					return errors.New("test: fails")
				}
				<-ctx.Done()
				canceledAt.CompareAndSwap(0, time.Now().UnixNano())
				switch job.ID {
				case "early":
					ch.Ack()
					r.leave(client, job.ID, i, "ack")
				case "late":
					time.Sleep(150 * time.Millisecond)
					ch.Ack()
					r.leave(client, job.ID, i, "ack")
				case "rejoin":
					time.Sleep(150 * time.Millisecond)
					ch.Rejoin(3 * time.Second)
					r.leave(client, job.ID, i, "rejoin 3s")
				}
				return nil
			},
			fin: func(ctx context.Context, job *redeq.Job) {
				r.final(job.ID)
				if client == "A" {
					<-ctx.Done()
					time.Sleep(150 * time.Millisecond) // winding down
				}
			},
		}
	}
	a := e.another(t, mod)
	startWith(t, a, mk("A"))
	for _, id := range []string{"early", "late", "rejoin"} {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
	}
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "final", MaxRetries: -1}))
	testutil.Eventually(t, 5*time.Second, "four run", func() bool {
		return r.count("early")+r.count("late")+r.count("rejoin") == 3 && r.finalCount("final") == 1
	})
	time.Sleep(100 * time.Millisecond)

	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	go func() {
		time.Sleep(150 * time.Millisecond)
		pauseNode(t, srv.Addr, 450*time.Millisecond, "WRITE")
	}()
	err := a.Shutdown(sctx)
	returned := time.Now()
	b := e.another(t, mod)
	startWith(t, b, mk("B"))
	time.Sleep(2 * time.Second)

	t.Logf("Shutdown(200 ms ctx; writes paused from +150 ms to +600 ms) returned at %s: %v", ms(returned.Sub(t0)), err)
	t.Logf("handlers canceled at %s", ms(time.Unix(0, canceledAt.Load()).Sub(t0)))
	for _, id := range []string{"early", "late", "rejoin", "final"} {
		st := state(t, e.c, "t", id)
		t.Logf("%-6s runs: %s; FinalRetry %d; now %q", id, r.describe(id, t0), r.finalCount(id), st)
	}
	require.Empty(t, r.twiceAtOnce())
	var broken []string
	if n := r.count("late"); n != 1 {
		broken = append(broken, fmt.Sprintf("late acked on A but ran %d times", n))
	}
	if rs := r.get("rejoin"); len(rs) > 1 && rs[1].start.Sub(rs[0].end) < 3*time.Second {
		broken = append(broken, fmt.Sprintf("rejoin(3s) ran again %v after its handler returned", rs[1].start.Sub(rs[0].end).Round(time.Millisecond)))
	}
	if n := r.finalCount("final"); n != 1 {
		broken = append(broken, fmt.Sprintf("FinalRetry of final called %d times, the job ran %d times", n, r.count("final")))
	}
	require.Empty(t, broken, "outcomes returned while Shutdown's settler drained were not applied")
}

// TestAcksAroundGraceEndAppliedOnce: acks that arrive around the end of
// Shutdown's grace are applied, without any fault: on the shared server
// and cluster, client A (Workers 16) runs 16 jobs whose handlers, once
// Shutdown(100 ms ctx) cancels them, wind down and ack 98 to 101.75 ms
// later (one every 0.25 ms), around the end of Shutdown's 100 ms grace.
// Six cycles, a new client A each; then client B drains what was rolled
// back. Every job was acked by its only handler on A: none runs again.
func TestAcksAroundGraceEndAppliedOnce(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		mod := func(c *config.Config) { c.ConsumerTimeout, c.HeartbeatInterval = 6*time.Second, 500*time.Millisecond }
		r := newRunRecorder()
		mk := func(client string) *fnListener {
			return &fnListener{topic: "t", workers: 16, on: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				i := r.enter(client, job)
				if client == "A" {
					<-ctx.Done()
					time.Sleep(windDownOf(job.ID))
				}
				ch.Ack()
				r.leave(client, job.ID, i, "ack")
				return nil
			}}
		}
		const cycles, n = 6, 16
		var errs []string
		for cycle := range cycles {
			a := e.another(t, mod)
			startWith(t, a, mk("A"))
			for i := range n {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", cycle*n+i)}))
			}
			testutil.Eventually(t, 5*time.Second, "16 run", func() bool { return r.runningNow() == n })
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err := a.Shutdown(sctx)
			cancel()
			errs = append(errs, fmt.Sprint(err))
			time.Sleep(300 * time.Millisecond)
		}
		b := e.another(t, mod)
		startWith(t, b, mk("B"))
		time.Sleep(1500 * time.Millisecond)
		var again []string
		for cycle := range cycles {
			for i := range n {
				id := fmt.Sprint("j", cycle*n+i)
				if rs := r.get(id); len(rs) > 1 {
					again = append(again, fmt.Sprintf("%s(A wound down %v; runs %d)", id, windDownOf(id), len(rs)))
				}
			}
		}
		st := stats(t, e.c, "t")
		t.Logf("Shutdown errors: %v", errs)
		t.Logf("%d jobs acked by their handler on A after Shutdown canceled it; ran again anyway: %d %v; twice at once %v; stats %+v",
			cycles*n, len(again), again, r.twiceAtOnce(), st)
		require.Empty(t, r.twiceAtOnce())
		require.Empty(t, again, "acks returned around the end of Shutdown's grace were dropped and their jobs ran again")
	})
}

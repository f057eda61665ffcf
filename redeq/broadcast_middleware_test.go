package redeq_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// plainObserver is an Observer that is not a ReturnObserver.
type plainObserver struct {
	mu               sync.Mutex
	delivered, dones map[string]int // by id
}

func (p *plainObserver) JobAdded(string) {}
func (p *plainObserver) JobDelivered(job *redeq.Job, _ time.Duration) {
	p.mu.Lock()
	p.delivered[job.ID+"/"+boolString(job.Broadcast)]++
	p.mu.Unlock()
}

func (p *plainObserver) JobDone(job *redeq.Job, _ redeq.Outcome, _ time.Duration, _ error) {
	p.mu.Lock()
	p.dones[job.ID+"/"+boolString(job.Broadcast)]++
	p.mu.Unlock()
}

func boolString(b bool) string {
	if b {
		return "broadcast"
	}
	return "normal"
}

// A client middleware that misbehaves on a broadcast (answers on its
// Channel, never calls next, returns an error, panics) changes nothing but
// that run: each run is reported once as OutcomeBroadcast with the
// middleware's error or panic, the listener goes on with later broadcasts,
// and a normal job with the same topic and id, run meanwhile, keeps its
// own outcome. An Observer in Observers that is not a ReturnObserver hears
// each run once too.
func TestBroadcastUnderMisbehavingMiddleware(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		rec := newRecorder()
		plain := &plainObserver{delivered: map[string]int{}, dones: map[string]int{}}
		require.NoError(t, e.c.Observe(redeq.Observers(plain, rec)))
		errMW := errors.New("middleware refused")
		require.NoError(t, e.c.Use(func(next redeq.Handler) redeq.Handler {
			return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if !job.Broadcast {
					return next(ctx, job, ch)
				}
				switch string(job.Body) {
				case "answer":
					ch.Ack()
					ch.Rejoin(time.Millisecond)
				case "skip":
					return nil
				case "refuse":
					_ = next(ctx, job, ch)
					return errMW
				case "panic":
					panic("middleware boom")
				}
				return next(ctx, job, ch)
			}
		}))
		var mu sync.Mutex
		ran := map[string]int{}
		require.NoError(t, e.c.RegisterBroadcast(broadcastFunc{topic: "bc", run: func(ctx context.Context, job *redeq.Job) {
			mu.Lock()
			ran[job.ID]++
			mu.Unlock()
		}}))
		normal := make(chan string, 4)
		require.NoError(t, e.c.Register(redeq.ListenerFunc("bc", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			normal <- job.ID
			return nil
		})))
		require.NoError(t, e.c.Start(ctx))
		require.NoError(t, e.c.AddBatch(ctx, []*redeq.Job{
			{Topic: "bc", ID: "answer", Body: []byte("answer"), Broadcast: true},
			{Topic: "bc", ID: "skip", Body: []byte("skip"), Broadcast: true},
			{Topic: "bc", ID: "refuse", Body: []byte("refuse"), Broadcast: true},
			{Topic: "bc", ID: "panic", Body: []byte("panic"), Broadcast: true},
		}))
		testutil.Eventually(t, 10*time.Second, "four runs observed", func() bool { return rec.done() == 4 })
		// A broadcast after the panic still runs: the listener lives on. A
		// normal job may take the id of a broadcast that left its pool.
		require.NoError(t, e.c.AddBatch(ctx, []*redeq.Job{
			{Topic: "bc", ID: "answer", Body: []byte("normal")},
			{Topic: "bc", ID: "after", Body: []byte("fine"), Broadcast: true},
		}))
		testutil.Eventually(t, 10*time.Second, "the later broadcast observed", func() bool { return rec.done() == 6 })
		require.Equal(t, "answer", <-normal)

		rec.mu.Lock()
		require.Equal(t, map[redeq.Outcome]int{redeq.OutcomeBroadcast: 5, redeq.OutcomeAck: 1}, rec.outcomes)
		require.Equal(t, 2, rec.errs, "the middleware's error and its panic")
		require.Zero(t, rec.unmatched)
		require.Empty(t, rec.delivered, "every Delivered has its Done")
		require.Zero(t, rec.returned)
		rec.mu.Unlock()
		mu.Lock()
		require.Equal(t, map[string]int{"answer": 1, "refuse": 1, "after": 1}, ran)
		mu.Unlock()
		plain.mu.Lock()
		want := map[string]int{"answer/broadcast": 1, "answer/normal": 1, "skip/broadcast": 1, "refuse/broadcast": 1, "panic/broadcast": 1, "after/broadcast": 1}
		require.Equal(t, want, plain.delivered)
		require.Equal(t, want, plain.dones)
		plain.mu.Unlock()

		testutil.Eventually(t, 10*time.Second, "nothing of the topic left: nothing rejoined or parked", func() bool {
			st, err := e.c.Stats(ctx, "bc")
			return err == nil && st.Pool == 0 && st.Scheduled == 0 && st.UnAck == 0 && st.Dead == 0
		})
	})
}

// A broadcast handler still running when Shutdown's context ends is
// canceled, and the Observer hears of it once, before Shutdown returns
// when the handler returns on cancellation.
func TestBroadcastCanceledByShutdownIsDoneOnce(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		rec := newRecorder()
		require.NoError(t, e.c.Observe(rec))
		running := make(chan struct{})
		require.NoError(t, e.c.RegisterBroadcast(broadcastFunc{topic: "bc", run: func(ctx context.Context, job *redeq.Job) {
			close(running)
			<-ctx.Done()
		}}))
		require.NoError(t, e.c.Start(ctx))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "bc", ID: "long", Broadcast: true}))
		<-running
		sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, e.c.Shutdown(sctx), context.DeadlineExceeded)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Equal(t, map[redeq.Outcome]int{redeq.OutcomeBroadcast: 1}, rec.outcomes)
		require.Empty(t, rec.delivered)
		require.Zero(t, rec.unmatched)
	})
}

// A broadcast handler that ignores its context outlives Shutdown; the
// Observer hears of it once, when it returns.
func TestStuckBroadcastIsDoneOnceWhenItReturns(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		c := e.another(t, func(c *config.Config) { c.ShutdownTimeout = 50 * time.Millisecond })
		rec := newRecorder()
		require.NoError(t, c.Observe(rec))
		s := newStuckListener(t, "cache")
		require.NoError(t, c.RegisterBroadcast(s))
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "cache", ID: "stuck", Broadcast: true}))
		<-s.entered
		require.ErrorIs(t, c.Shutdown(ctx), context.DeadlineExceeded)
		require.Zero(t, rec.done(), "the handler still runs")
		s.unblock()
		testutil.Eventually(t, 10*time.Second, "Done once the handler returned", func() bool { return rec.done() == 1 })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Equal(t, map[redeq.Outcome]int{redeq.OutcomeBroadcast: 1}, rec.outcomes)
		require.Empty(t, rec.delivered)
	})
}

// A panic in a broadcast's handler or in the middleware around it is
// logged once, naming where it happened, and not again as a failure.
func TestBroadcastPanicLoggedOnce(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var logs syncBuffer
		c := e.another(t, func(c *config.Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		})
		rec := newRecorder()
		require.NoError(t, c.Observe(rec))
		require.NoError(t, c.Use(func(next redeq.Handler) redeq.Handler {
			return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				switch job.ID {
				case "mw":
					panic("middleware boom")
				case "refuse":
					return errors.New("middleware refused")
				}
				return next(ctx, job, ch)
			}
		}))
		require.NoError(t, c.RegisterBroadcast(broadcastFunc{topic: "bc", run: func(ctx context.Context, job *redeq.Job) {
			panic("handler boom")
		}}))
		require.NoError(t, c.Start(ctx))
		require.NoError(t, c.AddBatch(ctx, []*redeq.Job{
			{Topic: "bc", ID: "mw", Broadcast: true},
			{Topic: "bc", ID: "handler", Broadcast: true},
			{Topic: "bc", ID: "refuse", Broadcast: true},
		}))
		testutil.Eventually(t, 10*time.Second, "three runs observed", func() bool { return rec.done() == 3 })
		out := logs.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, "one line per run: %s", out)
		require.Equal(t, 2, strings.Count(out, "panicked"), out)
		require.Equal(t, 1, strings.Count(out, "middleware refused"), out)
	})
}

package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// recorder is an Observer that keeps what it heard.
type recorder struct {
	mu        sync.Mutex
	added     map[string]int
	lateness  []time.Duration
	outcomes  map[redeq.Outcome]int
	delivered map[*redeq.Job]bool
	unmatched int // JobDone for a job JobDelivered never saw
	errs      int // JobDone with an error
	returned  int
}

func newRecorder() *recorder {
	return &recorder{added: map[string]int{}, outcomes: map[redeq.Outcome]int{}, delivered: map[*redeq.Job]bool{}}
}

func (r *recorder) JobAdded(topic string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added[topic]++
}

func (r *recorder) JobDelivered(job *redeq.Job, lateness time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lateness = append(r.lateness, lateness)
	r.delivered[job] = true
}

func (r *recorder) JobDone(job *redeq.Job, o redeq.Outcome, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.delivered[job] {
		r.unmatched++
	}
	delete(r.delivered, job)
	r.outcomes[o]++
	if err != nil {
		r.errs++
	}
}

func (r *recorder) JobsReturned(topic string, n int, recovered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.returned += n
}

func (r *recorder) done() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.outcomes {
		n += v
	}
	return n
}

// An Observer hears every add and every outcome of a scripted run, each
// delivery's lateness from the job's due time (never negative), and
// Done with the job Delivered saw.
func TestObserverSeesAScriptedRun(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		rec := newRecorder()
		require.NoError(t, e.c.Observe(rec))
		require.ErrorIs(t, e.c.Observe(rec), redeq.ErrInvalidArgument, "a second observer")

		var mu sync.Mutex
		rejoined := map[string]bool{}
		require.NoError(t, e.c.Register(redeq.ListenerFunc("obs", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			switch job.Body[0] {
			case 'a':
				ch.Ack()
			case 'r':
				mu.Lock()
				defer mu.Unlock()
				if rejoined[job.ID] {
					ch.Ack()
				} else {
					rejoined[job.ID] = true
					ch.Rejoin(time.Millisecond)
				}
			case 'f':
				return errors.New("boom")
			}
			return nil // 'u': parked in un_ack
		}, redeq.WithRetry(1, time.Millisecond))))

		bodies := map[string]string{"a1": "a", "a2": "a", "r1": "r", "f1": "f", "f2": "f", "u1": "u"}
		var batch []*redeq.Job
		for id, body := range bodies {
			batch = append(batch, &redeq.Job{Topic: "obs", ID: id, Body: []byte(body), Delay: 20 * time.Millisecond})
		}
		require.NoError(t, e.c.Add(ctx, batch[0]))
		require.NoError(t, e.c.AddBatch(ctx, batch[1:]))
		require.ErrorIs(t, e.c.Add(ctx, &redeq.Job{Topic: "obs", ID: "a1", Body: []byte("a")}), redeq.ErrJobExists)
		require.NoError(t, e.c.Start(ctx))

		// a1 a2: ack; r1: rejoin, ack; f1 f2: retry, dead; u1: unack.
		want := map[redeq.Outcome]int{redeq.OutcomeAck: 3, redeq.OutcomeRejoin: 1, redeq.OutcomeRetry: 2, redeq.OutcomeDead: 2, redeq.OutcomeUnAck: 1}
		deadline := time.Now().Add(10 * time.Second)
		for rec.done() < 9 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, e.c.Shutdown(ctx))

		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Equal(t, map[string]int{"obs": 6}, rec.added)
		require.Equal(t, want, rec.outcomes)
		require.Zero(t, rec.unmatched)
		require.Len(t, rec.lateness, 9)
		for _, l := range rec.lateness {
			require.GreaterOrEqual(t, l, time.Duration(0), "every delivery here came through the mover: lateness known, not negative")
		}
		for _, k := range testutil.Keys(t, e.rdb, e.cfg.Prefix) {
			require.False(t, strings.HasSuffix(k, ":due"), "the fetch removes the due times it read: %s left", k)
		}
	})
}

func TestObserveRejectsNilAndLate(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		require.ErrorIs(t, e.c.Observe(nil), redeq.ErrInvalidArgument)
		require.NoError(t, e.c.Start(context.Background()))
		require.ErrorIs(t, e.c.Observe(newRecorder()), redeq.ErrStarted)
	})
}

// A handler canceled by Shutdown is reported interrupted, and the rollback
// that returns its job is reported to a ReturnObserver.
func TestObserverSeesShutdownRollback(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		rec := newRecorder()
		c := e.another(t, func(c *config.Config) { c.ShutdownTimeout = 50 * time.Millisecond })
		require.NoError(t, c.Observe(rec))
		running := make(chan struct{}, 2)
		require.NoError(t, c.Register(redeq.ListenerFunc("held", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			running <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})))
		require.NoError(t, c.AddBatch(ctx, []*redeq.Job{{Topic: "held", ID: "1"}, {Topic: "held", ID: "2"}}))
		require.NoError(t, c.Start(ctx))
		<-running
		<-running
		_ = c.Shutdown(ctx) // reports the canceled handlers

		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Equal(t, map[redeq.Outcome]int{redeq.OutcomeInterrupted: 2}, rec.outcomes)
		require.Equal(t, 2, rec.returned)
		j, err := e.c.Get(ctx, "held", "1")
		require.NoError(t, err)
		require.Contains(t, []redeq.State{redeq.StateScheduled, redeq.StateReady}, j.State, "rolled back")
		require.Zero(t, j.Attempt, "unspent")
	})
}

// A broadcast runs inside the client's middleware, which sees the job as a
// broadcast, and the Observer hears of it on every client that ran it:
// Delivered with unknown lateness, then Done with OutcomeBroadcast and the
// handler's panic as the error. Nothing about it is acked or retried.
func TestBroadcastIsObservedAndWrapped(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		type client struct {
			rec     *recorder
			mu      sync.Mutex
			wrapped map[string]bool // id: the middleware saw it, Broadcast set
		}
		clients := make([]*client, 2)
		for i := range clients {
			c := e.c
			if i > 0 {
				c = e.another(t, nil)
			}
			cl := &client{rec: newRecorder(), wrapped: map[string]bool{}}
			clients[i] = cl
			require.NoError(t, c.Observe(cl.rec))
			require.NoError(t, c.Use(func(next redeq.Handler) redeq.Handler {
				return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					cl.mu.Lock()
					cl.wrapped[job.ID] = job.Broadcast && ch != nil
					cl.mu.Unlock()
					return next(ctx, job, ch)
				}
			}))
			require.NoError(t, c.RegisterBroadcast(broadcastFunc{topic: "bc", run: func(ctx context.Context, job *redeq.Job) {
				if string(job.Body) == "panic" {
					panic("broadcast boom")
				}
			}}))
			require.NoError(t, c.Start(ctx))
		}
		require.NoError(t, e.c.AddBatch(ctx, []*redeq.Job{
			{Topic: "bc", ID: "ok", Body: []byte("fine"), Broadcast: true},
			{Topic: "bc", ID: "bad", Body: []byte("panic"), Broadcast: true},
		}))
		for i, cl := range clients {
			testutil.Eventually(t, 10*time.Second, fmt.Sprintf("client %d observed both broadcasts", i), func() bool { return cl.rec.done() == 2 })
		}
		for i, cl := range clients {
			cl.rec.mu.Lock()
			require.Equal(t, map[redeq.Outcome]int{redeq.OutcomeBroadcast: 2}, cl.rec.outcomes, "client %d", i)
			require.Zero(t, cl.rec.unmatched, "client %d: Done for a job Delivered did not see", i)
			require.Equal(t, []time.Duration{-1, -1}, cl.rec.lateness, "client %d: a broadcast's due time is not known", i)
			require.Equal(t, 1, cl.rec.errs, "client %d: the panic is the error of one", i)
			cl.rec.mu.Unlock()
			cl.mu.Lock()
			require.Equal(t, map[string]bool{"ok": true, "bad": true}, cl.wrapped, "client %d: the middleware ran around both, as broadcasts", i)
			cl.mu.Unlock()
		}
	})
}

// broadcastFunc is a BroadcastListener of one topic.
type broadcastFunc struct {
	topic string
	run   func(ctx context.Context, job *redeq.Job)
}

func (b broadcastFunc) Topics() []string                                { return []string{b.topic} }
func (b broadcastFunc) OnBroadcast(ctx context.Context, job *redeq.Job) { b.run(ctx, job) }

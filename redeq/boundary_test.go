package redeq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// A Job is a pool.Job under the facade's name: the same fields, in the
// same order and at the same offsets, of the same types but for State (a
// string type in each package), so the pointer conversions at the
// boundary (poolJob, publicJob) are sound.
func TestJobIsPoolJob(t *testing.T) {
	t.Parallel()
	pub, inner := reflect.TypeFor[Job](), reflect.TypeFor[pool.Job]()
	require.Equal(t, inner.Size(), pub.Size())
	require.Equal(t, inner.Align(), pub.Align())
	require.Equal(t, inner.NumField(), pub.NumField(), "Job and pool.Job have as many fields")
	for i := range pub.NumField() {
		p, q := pub.Field(i), inner.Field(i)
		require.Equal(t, q.Name, p.Name, "field %d", i)
		require.Equal(t, q.Offset, p.Offset, p.Name)
		if p.Type == reflect.TypeFor[State]() {
			require.Equal(t, reflect.TypeFor[pool.State](), q.Type, p.Name)
			require.Equal(t, reflect.String, q.Type.Kind())
			require.Equal(t, reflect.String, p.Type.Kind())
			continue
		}
		if p.Type == reflect.TypeFor[[]Failure]() {
			// Each package's own Failure, of one layout.
			pe, qe := p.Type.Elem(), q.Type.Elem()
			require.Equal(t, reflect.TypeFor[[]pool.Failure](), q.Type, p.Name)
			require.Equal(t, qe.Size(), pe.Size())
			require.Equal(t, qe.NumField(), pe.NumField())
			for f := range pe.NumField() {
				require.Equal(t, qe.Field(f).Name, pe.Field(f).Name)
				require.Equal(t, qe.Field(f).Type, pe.Field(f).Type)
				require.Equal(t, qe.Field(f).Offset, pe.Field(f).Offset)
			}
			continue
		}
		require.Equal(t, q.Type, p.Type, p.Name)
	}
	j := &Job{Topic: "t", ID: "1", State: StateDead, Attempt: 3}
	pj := poolJob(j)
	require.Equal(t, pool.Job{Topic: "t", ID: "1", State: pool.StateDead, Attempt: 3}, *pj)
	require.Same(t, j, publicJob(pj))
	require.Nil(t, publicJob(nil))
}

// The facade's states and outcomes are the building blocks' values under
// its own types: a State converts to a pool.State and a consumer.Outcome
// to an Outcome unchanged.
func TestStatesAndOutcomesAreTheBuildingBlocks(t *testing.T) {
	t.Parallel()
	states := map[State]pool.State{
		StateScheduled: pool.StateScheduled, StateReady: pool.StateReady, StateInFlight: pool.StateInFlight,
		StateUnAck: pool.StateUnAck, StateDead: pool.StateDead,
	}
	for pub, inner := range states {
		require.Equal(t, string(inner), string(pub))
	}
	outcomes := map[Outcome]consumer.Outcome{
		OutcomeAck: consumer.OutcomeAck, OutcomeRejoin: consumer.OutcomeRejoin, OutcomeRetry: consumer.OutcomeRetry,
		OutcomeDead: consumer.OutcomeDead, OutcomeUnAck: consumer.OutcomeUnAck,
		OutcomeInterrupted: consumer.OutcomeInterrupted, OutcomeBroadcast: consumer.OutcomeBroadcast,
	}
	require.Len(t, outcomes, 7)
	for pub, inner := range outcomes {
		require.Equal(t, string(inner), string(pub))
	}
}

type nopObserver struct{}

func (nopObserver) JobAdded(string)                                  {}
func (nopObserver) JobDelivered(*Job, time.Duration)                 {}
func (nopObserver) JobDone(*Job, Outcome, time.Duration, error)      {}
func (nopObserver) JobsReturned(topic string, n int, recovered bool) {}

// A delivery through the adapters allocates nothing but the context that
// carries the job to OnJob and to FinalRetry: the consumer's job and
// channel reach the handler, its middleware, FinalRetry, a broadcast
// listener and the observer as the same pointers, converted, and every
// wrapper is built once, at registration or Start.
func TestAdaptersAllocateOnlyTheJobsContextPerJob(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	pass := func(next Handler) Handler {
		return func(ctx context.Context, job *Job, ch *Channel) error { return next(ctx, job, ch) }
	}
	var got *Job
	var gotCh *Channel
	l := ListenerFunc("t", func(ctx context.Context, job *Job, ch *Channel) error {
		got, gotCh = job, ch
		ch.Ack()
		return nil
	}, WithMiddleware(pass, pass), WithFinalRetry(func(context.Context, *Job) {}))
	require.NoError(t, checkListener(l))
	cl := adaptListener(l)

	// The handler as the consumer chains it: the listener's middleware,
	// then the client's, the first given the outermost.
	h := consumer.Handler(cl.OnJob)
	own := cl.(consumer.Configured).ListenerOptions().Middleware
	require.Len(t, own, 2)
	client := consumerMiddleware([]Middleware{pass})
	for i := len(own) - 1; i >= 0; i-- {
		h = own[i](h)
	}
	for i := len(client) - 1; i >= 0; i-- {
		h = client[i](h)
	}
	fr, ok := cl.(consumer.FinalRetryListener)
	require.True(t, ok, "FinalRetry reaches the consumer")
	ro, ok := adaptObserver(Observers(nopObserver{})).(consumer.ReturnObserver)
	require.True(t, ok, "a ReturnObserver hears of returned jobs")
	bl := &broadcastAdapter{BroadcastFunc(func(context.Context, *Job) {}, "b")}

	job := &pool.Job{Topic: "t", ID: "1", Headers: map[string]string{"k": "v"}}
	ch := &ack.Channel{}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		ro.JobDelivered(job, time.Millisecond)
		_ = h(ctx, job, ch)
		ro.JobDone(job, consumer.OutcomeAck, time.Millisecond, nil)
		fr.FinalRetry(ctx, job)
		bl.OnBroadcast(ctx, job)
		ro.JobsReturned("t", 1, false)
	})
	require.Equal(t, 2.0, allocs, "one context for OnJob, one for FinalRetry")
	require.Same(t, job, poolJob(got), "the handler gets the consumer's job, not a copy")
	require.Same(t, ch, (*ack.Channel)(gotCh), "and its channel")
	acked, _, _ := ch.State()
	require.True(t, acked)
}

// A bucket count mismatch reaches the caller as a *MismatchError with both
// counts, matching ErrBucketMismatch, from Add as from Start, and wrapped
// or not; other errors pass unchanged.
func TestMismatchIsTheFacadesError(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			ctx := context.Background()
			c, err := New(be.New(t), cfg)
			require.NoError(t, err)
			require.NoError(t, c.Add(ctx, &Job{Topic: "t", ID: "a", Delay: time.Hour}))
			cfg.Concurrency = 4
			for _, call := range []string{"Add", "Start"} {
				other, err := New(be.New(t), cfg)
				require.NoError(t, err)
				t.Cleanup(func() { _ = other.Shutdown(context.Background()) })
				if call == "Add" {
					err = other.Add(ctx, &Job{Topic: "t", ID: "b", Delay: time.Hour})
				} else {
					require.NoError(t, other.Register(ListenerFunc("t", func(context.Context, *Job, *Channel) error { return nil })))
					err = other.Start(ctx)
				}
				require.ErrorIs(t, err, ErrBucketMismatch, call)
				var me *MismatchError
				require.True(t, errors.As(err, &me), "%s: %v", call, err)
				require.Equal(t, MismatchError{Topic: "t", Configured: 4, Stored: 1}, *me, call)
			}
		})
	}
	pm := &pool.MismatchError{Topic: "t", Configured: 4, Stored: 1}
	wrapped := publicMismatch(fmt.Errorf("record: %w", pm))
	var me *MismatchError
	require.True(t, errors.As(wrapped, &me))
	require.ErrorIs(t, wrapped, ErrBucketMismatch)
	require.Equal(t, "record: "+pm.Error(), wrapped.Error())
	other := errors.New("other")
	require.Same(t, other, publicMismatch(other))
	require.Nil(t, publicMismatch(nil))
}

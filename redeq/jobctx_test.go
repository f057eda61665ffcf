package redeq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// seenJob is what a handler read through JobFromContext.
type seenJob struct {
	ok      bool
	id      string
	attempt int
	header  string
}

func seen(ctx context.Context) seenJob {
	job, ok := redeq.JobFromContext(ctx)
	if !ok {
		return seenJob{}
	}
	return seenJob{ok: true, id: job.ID, attempt: job.Attempt, header: job.Headers["tenant"]}
}

// TestJobFromContext: every kind of handler (Typed, TypedWithChannel,
// ListenerFunc, a listener of its own type, and the FinalRetry callbacks,
// typed or not) finds its job in its context: id, attempt and headers as
// redeq delivers them. Outside a handler there is none.
func TestJobFromContext(t *testing.T) {
	t.Parallel()
	_, ok := redeq.JobFromContext(context.Background())
	require.False(t, ok, "no job outside a handler")

	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		got := map[string][]seenJob{}
		record := func(kind string, ctx context.Context) {
			mu.Lock()
			defer mu.Unlock()
			got[kind] = append(got[kind], seen(ctx))
		}
		fail := errors.New("fails once")
		typed := redeq.Typed("jc.typed", func(ctx context.Context, o order) error {
			record("typed", ctx)
			if job, _ := redeq.JobFromContext(ctx); job.Attempt == 0 {
				return fail
			}
			return nil
		}, redeq.WithRetry(1, 10*time.Millisecond))
		withCh := redeq.TypedWithChannel("jc.channel", func(ctx context.Context, job *redeq.Job, o order, ch *redeq.Channel) error {
			record("channel", ctx)
			ch.Ack()
			return nil
		})
		fn := redeq.ListenerFunc("jc.func", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			record("func", ctx)
			return fail
		}, redeq.WithRetry(-1), redeq.WithFinalRetry(func(ctx context.Context, job *redeq.Job) {
			record("final", ctx)
		}))
		var typedFinal struct {
			sync.Mutex
			v   order
			err error
		}
		typedDead := redeq.Typed("jc.typedfinal", func(ctx context.Context, o order) error {
			return fail
		}, redeq.WithRetry(-1), redeq.WithTypedFinalRetry(func(ctx context.Context, o order, lastErr error) {
			record("typedfinal", ctx)
			typedFinal.Lock()
			typedFinal.v, typedFinal.err = o, lastErr
			typedFinal.Unlock()
		}))
		own := newListener("jc.own", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			record("own", ctx)
			ch.Ack()
			return nil
		})
		startWith(t, e.c, typed, withCh, fn, typedDead, own)

		hdr := map[string]string{"tenant": "acme"}
		for _, topic := range []string{"jc.typed", "jc.channel", "jc.func", "jc.typedfinal", "jc.own"} {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "j-" + topic, Body: []byte(`{"id":7}`), Headers: hdr}))
		}
		testutil.Eventually(t, 10*time.Second, "every handler ran", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got["typed"]) == 2 && len(got["channel"]) == 1 && len(got["final"]) == 1 &&
				len(got["typedfinal"]) == 1 && len(got["own"]) == 1
		})
		mu.Lock()
		defer mu.Unlock()
		want := func(topic string, attempt int) seenJob {
			return seenJob{ok: true, id: "j-" + topic, attempt: attempt, header: "acme"}
		}
		require.Equal(t, []seenJob{want("jc.typed", 0), want("jc.typed", 1)}, got["typed"], "a typed handler sees its attempt")
		require.Equal(t, []seenJob{want("jc.channel", 0)}, got["channel"])
		require.Equal(t, []seenJob{want("jc.func", 0)}, got["func"])
		require.Equal(t, []seenJob{want("jc.func", 1)}, got["final"], "FinalRetry sees the job with its failed attempt")
		require.Equal(t, []seenJob{want("jc.typedfinal", 1)}, got["typedfinal"])
		require.Equal(t, []seenJob{want("jc.own", 0)}, got["own"])
		typedFinal.Lock()
		defer typedFinal.Unlock()
		require.Equal(t, order{ID: 7}, typedFinal.v, "the typed final retry gets the decoded value")
		require.EqualError(t, typedFinal.err, fail.Error(), "and the last error")
	})
}

// TestContextWithJob: a handler function called directly, in its own
// test, finds the job it is given.
func TestContextWithJob(t *testing.T) {
	t.Parallel()
	job := &redeq.Job{Topic: "t", ID: "1", Attempt: 2}
	got, ok := redeq.JobFromContext(redeq.ContextWithJob(context.Background(), job))
	require.True(t, ok)
	require.Same(t, job, got)
	_, ok = redeq.JobFromContext(redeq.ContextWithJob(context.Background(), nil))
	require.False(t, ok, "a nil job is no job")
}

// TestTypedFinalRetryOfUndecodableBody: a body that does not decode goes
// dead at once, and the typed final retry still runs, with T's zero value
// and the decoding error.
func TestTypedFinalRetryOfUndecodableBody(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		done := make(chan error, 1)
		l := redeq.Typed("jc.bad", func(ctx context.Context, o order) error { return nil },
			redeq.WithTypedFinalRetry(func(ctx context.Context, o order, lastErr error) {
				if o != (order{}) {
					lastErr = errors.New("not the zero value")
				}
				done <- lastErr
			}))
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "jc.bad", ID: "1", Body: []byte("not json")}))
		select {
		case err := <-done:
			require.ErrorContains(t, err, "decode")
		case <-time.After(10 * time.Second):
			t.Fatal("the typed final retry did not run")
		}
	})
}

// TestTypedFinalRetryRefusesNil: a nil callback is refused at Register.
func TestTypedFinalRetryRefusesNil(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		err := e.c.Register(redeq.Typed("jc.nil", func(ctx context.Context, o order) error { return nil },
			redeq.WithTypedFinalRetry[order](nil)))
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.ErrorContains(t, err, "nil final-retry function")
	})
}

package redeqtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/redeqtest"
)

// partnerCall is a listener of its own type, with FinalRetry.
type partnerCall struct {
	answer func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error
	mu     sync.Mutex
	finals []*redeq.Job
	ctxJob *redeq.Job // what JobFromContext gave FinalRetry
}

func (*partnerCall) Topic() string { return "partner.call" }

func (p *partnerCall) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	return p.answer(ctx, job, ch)
}

func (p *partnerCall) FinalRetry(ctx context.Context, job *redeq.Job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finals = append(p.finals, job)
	p.ctxJob, _ = redeq.JobFromContext(ctx)
}

var errPartnerDown = errors.New("partner down")

// workCases are listeners and jobs with the outcome a client gives them.
func workCases() []struct {
	name string
	l    func() redeq.Listener
	job  redeq.Job
	want redeqtest.Result
} {
	return []struct {
		name string
		l    func() redeq.Listener
		job  redeq.Job
		want redeqtest.Result
	}{
		{"TypedAcks", func() redeq.Listener {
			return redeq.Typed("t", func(ctx context.Context, r reminder) error { return nil })
		}, redeq.Job{Body: []byte(`{}`)}, redeqtest.Result{Outcome: redeq.OutcomeAck}},
		{"TypedErrorRetries", func() redeq.Listener {
			return redeq.Typed("t", func(ctx context.Context, r reminder) error { return errPartnerDown },
				redeq.WithRetry(5, time.Minute, 5*time.Minute))
		}, redeq.Job{Body: []byte(`{}`), Attempt: 1}, redeqtest.Result{Outcome: redeq.OutcomeRetry, Err: errPartnerDown, RetryIn: 5 * time.Minute, Attempt: 2}},
		{"LastRetryGoesDead", func() redeq.Listener {
			return redeq.Typed("t", func(ctx context.Context, r reminder) error { return errPartnerDown },
				redeq.WithRetry(2, time.Minute), redeq.WithTypedFinalRetry(func(context.Context, reminder, error) {}))
		}, redeq.Job{Body: []byte(`{}`), Attempt: 2}, redeqtest.Result{Outcome: redeq.OutcomeDead, Err: errPartnerDown, Attempt: 3, FinalRetried: true}},
		{"UndecodableBodyGoesDead", func() redeq.Listener {
			return redeq.Typed("t", func(ctx context.Context, r reminder) error { return nil })
		}, redeq.Job{Body: []byte(`not json`)}, redeqtest.Result{Outcome: redeq.OutcomeDead, Attempt: 1}},
		{"JobsOwnScheduleWins", func() redeq.Listener {
			return redeq.Typed("t", func(ctx context.Context, r reminder) error { return errPartnerDown }, redeq.WithRetry(1))
		}, redeq.Job{Body: []byte(`{}`), Attempt: 1, MaxRetries: 3, RetryIntervals: []time.Duration{time.Second, time.Hour}},
			redeqtest.Result{Outcome: redeq.OutcomeRetry, Err: errPartnerDown, RetryIn: time.Hour, Attempt: 2}},
		{"ListenerFuncRejoins", func() redeq.Listener {
			return redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				ch.Rejoin(10 * time.Minute)
				return nil
			})
		}, redeq.Job{}, redeqtest.Result{Outcome: redeq.OutcomeRejoin, Rejoin: 10 * time.Minute}},
		{"NeitherParksInUnAck", func() redeq.Listener {
			return redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { return nil })
		}, redeq.Job{}, redeqtest.Result{Outcome: redeq.OutcomeUnAck}},
		{"AckAndRejoinAddsFresh", func() redeq.Listener {
			return redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				ch.Ack()
				ch.Rejoin(time.Hour)
				return nil
			})
		}, redeq.Job{}, redeqtest.Result{Outcome: redeq.OutcomeAck, Rejoin: time.Hour}},
		{"SkipRetryGoesDead", func() redeq.Listener {
			return redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				return redeq.SkipRetry(errPartnerDown)
			})
		}, redeq.Job{}, redeqtest.Result{Outcome: redeq.OutcomeDead, Err: errPartnerDown, Attempt: 1}},
	}
}

// TestWork: Work runs one job through any kind of listener and returns
// the outcome a started client applies: ack, rejoin with its delay, un_ack,
// retry with the error and the interval, dead after the last retry (with
// FinalRetry), at once for SkipRetry and for a body that does not decode.
func TestWork(t *testing.T) {
	ctx := context.Background()
	for _, tc := range workCases() {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.job
			res, err := redeqtest.Work(ctx, tc.l(), &job)
			require.NoError(t, err)
			require.Equal(t, tc.want.Outcome, res.Outcome)
			if tc.want.Err != nil {
				require.ErrorIs(t, res.Err, tc.want.Err)
			}
			if tc.want.Err == nil && tc.want.Outcome != redeq.OutcomeDead {
				require.NoError(t, res.Err)
			}
			require.Equal(t, tc.want.RetryIn, res.RetryIn)
			require.Equal(t, tc.want.Rejoin, res.Rejoin)
			require.Equal(t, tc.want.Attempt, res.Attempt)
			require.Equal(t, tc.want.FinalRetried, res.FinalRetried)
			require.Equal(t, tc.job, job, "the caller's job is left as it was")
		})
	}

	t.Run("PanicIsARetry", func(t *testing.T) {
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { panic("boom") })
		res, err := redeqtest.Work(ctx, l, &redeq.Job{})
		require.NoError(t, err)
		require.Equal(t, redeq.OutcomeRetry, res.Outcome)
		require.Equal(t, "boom", res.Panic)
		require.ErrorContains(t, res.Err, "handler panicked: boom")
		require.Equal(t, 1, res.Attempt)
	})
	t.Run("TimeoutIsARetry", func(t *testing.T) {
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			<-ctx.Done()
			return nil
		}, redeq.WithConsumeTimeout(time.Millisecond))
		res, err := redeqtest.Work(ctx, l, &redeq.Job{})
		require.NoError(t, err)
		require.Equal(t, redeq.OutcomeRetry, res.Outcome)
		require.ErrorIs(t, res.Err, redeq.ErrConsumeTimeout)
	})
	t.Run("StructListenerFinalRetry", func(t *testing.T) {
		p := &partnerCall{answer: func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { return errPartnerDown }}
		res, err := redeqtest.Work(ctx, p, &redeq.Job{ID: "p1", Attempt: 2}) // config.Default: 3 retries
		require.NoError(t, err)
		require.Equal(t, redeq.OutcomeRetry, res.Outcome, "the third retry is still to come")
		require.False(t, res.FinalRetried)
		res, err = redeqtest.Work(ctx, p, &redeq.Job{ID: "p1", Attempt: 3})
		require.NoError(t, err)
		require.Equal(t, redeq.OutcomeDead, res.Outcome)
		require.True(t, res.FinalRetried)
		require.Len(t, p.finals, 1)
		require.Equal(t, 4, p.finals[0].Attempt)
		require.Equal(t, errPartnerDown.Error(), p.finals[0].LastError)
		require.Same(t, p.finals[0], p.ctxJob, "FinalRetry finds its job in its context")
	})
	t.Run("HandlerSeesItsJob", func(t *testing.T) {
		var got *redeq.Job
		l := redeq.Typed("t", func(ctx context.Context, r reminder) error {
			got, _ = redeq.JobFromContext(ctx)
			return nil
		})
		_, err := redeqtest.Work(ctx, l, &redeq.Job{ID: "r1", Attempt: 2, Headers: map[string]string{"tenant": "acme"}, Body: []byte(`{}`)})
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, "r1", got.ID)
		require.Equal(t, "t", got.Topic, "the listener's topic for a job without one")
		require.Equal(t, 2, got.Attempt)
		require.Equal(t, "acme", got.Headers["tenant"])
	})
	t.Run("MiddlewareWraps", func(t *testing.T) {
		var trail []string
		mw := func(next redeq.Handler) redeq.Handler {
			return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				trail = append(trail, "mw")
				return next(ctx, job, ch)
			}
		}
		l := redeq.Typed("t", func(ctx context.Context, r reminder) error {
			trail = append(trail, "handler")
			return nil
		}, redeq.WithMiddleware(mw))
		_, err := redeqtest.Work(ctx, l, &redeq.Job{Body: []byte(`{}`)})
		require.NoError(t, err)
		require.Equal(t, []string{"mw", "handler"}, trail)
	})
	t.Run("AutoAckFromTheConfig", func(t *testing.T) {
		env := redeqtest.New(t, redeqtest.WithConfig(func(cfg *config.Config) { cfg.AutoAck = true }))
		l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { return nil })
		res, err := env.Work(ctx, l, &redeq.Job{})
		require.NoError(t, err)
		require.Equal(t, redeq.OutcomeAck, res.Outcome)
	})
	t.Run("BadArguments", func(t *testing.T) {
		l := redeq.Typed("t", func(ctx context.Context, r reminder) error { return nil })
		_, err := redeqtest.Work(ctx, nil, &redeq.Job{})
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		_, err = redeqtest.Work(ctx, l, nil)
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		_, err = redeqtest.Work(ctx, l, &redeq.Job{Topic: "other"})
		require.ErrorContains(t, err, `job of topic "other" given to the listener of "t"`)
		_, err = redeqtest.Work(ctx, redeq.Typed[reminder]("t", nil), &redeq.Job{})
		require.ErrorContains(t, err, "nil function")
	})
}

// outcomes records the outcome of every delivery a client made.
type outcomes struct {
	mu   sync.Mutex
	done []redeq.Outcome
}

func (o *outcomes) JobAdded(string)                        {}
func (o *outcomes) JobDelivered(*redeq.Job, time.Duration) {}
func (o *outcomes) JobDone(job *redeq.Job, out redeq.Outcome, took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done = append(o.done, out)
}

func (o *outcomes) last() []redeq.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]redeq.Outcome(nil), o.done...)
}

// TestWorkAgreesWithAClient: for each case, a started client delivering
// the same job to the same listener (at the same attempt, reached by
// failed deliveries) reaches the outcome Work returns, and leaves the job
// where that outcome says.
func TestWorkAgreesWithAClient(t *testing.T) {
	for _, tc := range workCases() {
		t.Run(tc.name, func(t *testing.T) {
			env := redeqtest.New(t)
			obs := &outcomes{}
			require.NoError(t, env.Client().Observe(obs))
			env.Start(tc.l())
			job := tc.job
			job.Topic, job.ID = "t", "j"
			attempts := job.Attempt
			job.Attempt = 0 // set by redeq: the client reaches it by failed deliveries
			require.NoError(t, env.Client().Add(context.Background(), &job))
			for i := range attempts {
				waitOutcome(t, obs, i+1)
				require.Equal(t, redeq.OutcomeRetry, obs.last()[i])
				env.WaitIdle("t")           // the retry is applied, on the clock before the move
				env.Advance(24 * time.Hour) // past any retry interval of the cases
			}
			waitOutcome(t, obs, attempts+1)
			require.Equal(t, tc.want.Outcome, obs.last()[attempts])
			env.WaitIdle("t")
			switch tc.want.Outcome {
			case redeq.OutcomeAck:
				if tc.want.Rejoin == 0 {
					env.RequireNotAdded("t", "j")
				} else {
					require.Equal(t, redeq.StateScheduled, env.RequireAdded("t", "j").State)
				}
			case redeq.OutcomeRejoin, redeq.OutcomeRetry:
				require.Equal(t, redeq.StateScheduled, env.RequireAdded("t", "j").State)
			case redeq.OutcomeDead:
				require.Equal(t, redeq.StateDead, env.RequireAdded("t", "j").State)
			case redeq.OutcomeUnAck:
				require.Equal(t, redeq.StateUnAck, env.RequireAdded("t", "j").State)
			}
		})
	}
}

func waitOutcome(t *testing.T, o *outcomes, n int) {
	t.Helper()
	deadline := time.Now().Add(redeqtest.WaitTimeout)
	for len(o.last()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no outcome after %v", redeqtest.WaitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

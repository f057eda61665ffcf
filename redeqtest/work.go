package redeqtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/retry"
)

// Result is the outcome of one delivery run by Work, as a started client
// would apply it.
type Result struct {
	// Outcome is what became of the delivery: OutcomeAck (acked, or
	// AutoAck), OutcomeRejoin, OutcomeUnAck (nil without Ack or Rejoin),
	// OutcomeRetry (failed, retried after RetryIn) or OutcomeDead (failed
	// for the last time, FinalRetry ran).
	Outcome redeq.Outcome
	// Err is the failure: the handler's error, its panic as an error, or
	// redeq.ErrConsumeTimeout. nil when the handler returned nil.
	Err error
	// Rejoin is the delay the handler gave Rejoin: the job runs again
	// after it (with OutcomeAck, it was acked and is added again fresh).
	Rejoin time.Duration
	// RetryIn is the wait before the retry, with OutcomeRetry.
	RetryIn time.Duration
	// Attempt is the job's failed deliveries after this one.
	Attempt int
	// FinalRetried tells that the listener's FinalRetry ran.
	FinalRetried bool
	// Panic is what the handler panicked with; nil when it did not.
	Panic any
}

// WorkOption changes how Work runs a job.
type WorkOption func(*workSettings)

type workSettings struct{ cfg config.Config }

// WithWorkConfig makes Work use cfg (its Retry, RetryIntervals, AutoAck
// and ConsumeTimeout) instead of config.Default(), as the client of cfg
// would. Env.Work passes the Env's.
func WithWorkConfig(cfg config.Config) WorkOption {
	return func(s *workSettings) { s.cfg = cfg.WithDefaults() }
}

// Work runs job through l now, synchronously, as a started client runs
// a delivery, and returns its outcome: l's own middleware wraps it, its
// ctx carries the job (redeq.JobFromContext) and ConsumeTimeout, a panic
// is a failure, a failure is retried on the job's, l's or the config's
// schedule, and after the last retry l's FinalRetry runs (with
// job.LastError and the attempt set) and the outcome is OutcomeDead.
// l may be any Listener: Typed, TypedWithChannel, ListenerFunc, or a type
// of one's own with or without FinalRetry. Nothing is stored: Work needs
// no Redis, and job need not have been added.
//
// job.Topic "" takes l's topic. Work changes nothing in job: the handler
// gets a copy. The error is for bad arguments only (a nil or invalid
// listener, a job of another topic); a failing handler is a Result.
func Work(ctx context.Context, l redeq.Listener, job *redeq.Job, opts ...WorkOption) (Result, error) {
	s := workSettings{cfg: config.Default()}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	if ctx == nil {
		return Result{}, fmt.Errorf("%w: work: nil context", redeq.ErrInvalidArgument)
	}
	if l == nil {
		return Result{}, fmt.Errorf("%w: work: nil listener", redeq.ErrInvalidArgument)
	}
	if il, ok := l.(interface{ Invalid() error }); ok {
		if err := il.Invalid(); err != nil {
			return Result{}, fmt.Errorf("work: %w", err)
		}
	}
	if job == nil {
		return Result{}, fmt.Errorf("%w: work: nil job", redeq.ErrInvalidArgument)
	}
	j := *job
	if j.Topic == "" {
		j.Topic = l.Topic()
	}
	if j.Topic != l.Topic() {
		return Result{}, fmt.Errorf("%w: work: job of topic %q given to the listener of %q", redeq.ErrInvalidArgument, j.Topic, l.Topic())
	}
	if j.ID == "" {
		j.ID = "redeqtest-job"
	}
	if j.State == "" {
		j.State = redeq.StateInFlight
	}

	var own consumer.Options
	var mw []redeq.Middleware
	if p, ok := l.(interface {
		ListenerPolicy() (consumer.Options, []redeq.Middleware)
	}); ok {
		own, mw = p.ListenerPolicy()
	}
	h := redeq.Handler(l.OnJob)
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	timeout := s.cfg.ConsumeTimeout
	if own.ConsumeTimeout > 0 {
		timeout = own.ConsumeTimeout
	}

	hctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		hctx, cancel = context.WithTimeout(ctx, timeout)
	}
	ch := &redeq.Channel{}
	var res Result
	err := call(redeq.ContextWithJob(hctx, &j), h, &j, ch, &res)
	timedOut := errors.Is(hctx.Err(), context.DeadlineExceeded)
	cancel()
	if err == nil && timedOut {
		err = redeq.ErrConsumeTimeout
	}
	res.Attempt = job.Attempt
	if err != nil {
		res.Err = err
		fail(ctx, l, &j, own, s.cfg, timeout, err, &res)
		return res, nil
	}
	acked, rejoined, delay := ch.State()
	switch {
	case acked:
		res.Outcome = redeq.OutcomeAck
		if rejoined {
			res.Rejoin = delay
			res.Attempt = 0 // added again fresh
		}
	case rejoined:
		res.Outcome, res.Rejoin = redeq.OutcomeRejoin, delay
	case s.cfg.AutoAck:
		res.Outcome = redeq.OutcomeAck
	default:
		res.Outcome = redeq.OutcomeUnAck
	}
	return res, nil
}

// call runs h, turning a panic into an error as the consumer does.
func call(ctx context.Context, h redeq.Handler, job *redeq.Job, ch *redeq.Channel, res *Result) (err error) {
	defer func() {
		if p := recover(); p != nil {
			res.Panic = p
			err = fmt.Errorf("redeq: handler panicked: %v", p)
		}
	}()
	return h(ctx, job, ch)
}

// fail applies the retry policy as the consumer does: the job's own
// schedule, else the listener's, else the config's.
func fail(ctx context.Context, l redeq.Listener, job *redeq.Job, own consumer.Options, cfg config.Config, timeout time.Duration, cause error, res *Result) {
	retries, intervals := cfg.Retry, cfg.RetryIntervals
	if own.RetryIntervals != nil {
		intervals, retries = own.RetryIntervals, len(own.RetryIntervals)
	}
	if own.MaxRetries != 0 {
		retries = own.MaxRetries
	}
	attempt := job.Attempt + 1
	res.Attempt = attempt
	delay, again := retry.For(job.MaxRetries, job.RetryIntervals, retries, intervals).Next(attempt)
	if again && job.RetryIntervals == nil && own.Backoff != nil {
		delay = max(own.Backoff(attempt, cause), 0)
	}
	if errors.Is(cause, redeq.ErrSkipRetry) {
		again = false
	}
	if again {
		res.Outcome, res.RetryIn = redeq.OutcomeRetry, delay
		return
	}
	res.Outcome = redeq.OutcomeDead
	fr, ok := l.(redeq.FinalRetryListener)
	if !ok {
		return
	}
	final := *job
	final.Attempt = attempt
	final.LastError = ack.Cut(cause.Error())
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		fctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	defer func() { _ = recover() }() // the consumer logs a FinalRetry's panic and goes on
	res.FinalRetried = true
	fr.FinalRetry(redeq.ContextWithJob(fctx, &final), &final)
}

// Work is the package's Work with the settings of the Env's clients.
func (e *Env) Work(ctx context.Context, l redeq.Listener, job *redeq.Job) (Result, error) {
	return Work(ctx, l, job, WithWorkConfig(e.cfg))
}

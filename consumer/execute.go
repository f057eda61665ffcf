package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/retry"
)

// ErrConsumeTimeout is the failure of a handler that overran ConsumeTimeout.
var ErrConsumeTimeout = errors.New("redeq: handler overran ConsumeTimeout")

// executor is the listener's policy, its options over the config, and
// what the execution of its jobs counts.
type executor struct {
	opts           Options
	handler        Handler
	consumeTimeout time.Duration
	retries        int
	intervals      []time.Duration
	// unacked counts the jobs parked in un_ack; the warning about them is
	// rate-limited.
	unacked     atomic.Int64
	unackMu     sync.Mutex
	unackLogged time.Time
	unackQuiet  int64
}

func (e *executor) init(g *Group, l Listener, opts Options) {
	e.opts = opts
	e.handler = chain(l.OnJob, opts.Middleware, g.middleware)
	e.consumeTimeout = g.cfg.ConsumeTimeout
	if opts.ConsumeTimeout > 0 {
		e.consumeTimeout = opts.ConsumeTimeout
	}
	e.retries, e.intervals = g.cfg.Retry, g.cfg.RetryIntervals
	if opts.RetryIntervals != nil {
		e.intervals = opts.RetryIntervals
		e.retries = len(opts.RetryIntervals)
	}
	if opts.MaxRetries != 0 {
		e.retries = opts.MaxRetries
	}
}

// work runs jobs until the dispatcher closes the channel. Once the group
// is stopping, fetched jobs are left in flight for the rollback.
func (r *runner) work() {
	guard := newLeaseGuard(r)
	defer guard.close()
	for d := range r.jobs {
		if !r.g.stopping.Load() {
			r.handle(d, guard)
		}
		if n := r.busy.Add(-1); n <= r.wakeAt.Load() || n == 0 {
			signal(r.freed)
		}
	}
}

// handle runs one job and submits its outcome; guard is its worker's.
func (r *runner) handle(d delivery, guard *leaseGuard) {
	g := r.g
	h, rest, err := pool.Decode([]byte(d.item.Envelope)) // the one copy of the body
	token := d.item.Token
	var job *pool.Job
	if err == nil {
		job, err = pool.JobFrom(r.topic, d.item.ID, h, rest)
	}
	if err != nil {
		// A corrupt entry cannot run: park it in the dead set, keep working.
		g.env.Logger.Error("redeq: corrupt job sent to the dead set", "topic", r.topic, "id", d.item.ID, "err", err)
		r.submit(d.bucket, ack.Outcome{ID: d.item.ID, Token: token, Op: ack.OpDead, Reason: err.Error(), Late: d.item.Late})
		return
	}
	job.LastError = d.item.LastError
	ch := &ack.Channel{}

	// The handler's ctx ends before another consumer may recover the job
	// (leaseGuard), as well as at Shutdown's cancel and ConsumeTimeout.
	leaseCtx, lapse := context.WithCancelCause(g.handlerCtx)
	guard.arm(d, lapse)
	ctx, cancel := leaseCtx, context.CancelFunc(func() {})
	if r.consumeTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, r.consumeTimeout)
	}
	// From here until conclude, the delivery counts as running: a
	// Shutdown that rolls back meanwhile leaves it in flight.
	member := d.member
	r.dl.start(d.bucket, member)
	if errors.Is(context.Cause(leaseCtx), ErrLeaseLapsed) {
		// The lease may have lapsed before the handler began (the fetch's
		// reply came late, or the job waited for a worker past it):
		// another consumer may run the job by now, so no handler is
		// called. The job goes back to its bucket due now, unspent,
		// fenced like any outcome (it lands nowhere when another consumer
		// recovered it).
		guard.stop()
		cancel()
		lapse(nil)
		r.conclude(d.bucket, member, &ack.Outcome{ID: job.ID, Token: token, Op: ack.OpRejoin, HadError: job.LastError != "", Late: d.item.Late})
		return
	}
	var start time.Time
	if g.observer != nil {
		start = r.observeStart(d, job)
	}
	err = r.call(ctx, job, ch)
	var took time.Duration
	if g.observer != nil {
		took = g.env.Clock.Now().Sub(start)
	}
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	// Interrupted: the handler's own context was canceled by Shutdown
	// when it returned. Shutdown's cancel reaches a handler's context
	// (a child, with ConsumeTimeout) a moment after the client's: a
	// failure returned meanwhile, its context still alive, is a failure.
	interrupted := errors.Is(ctx.Err(), context.Canceled) && g.handlerCtx.Err() != nil
	guard.stop()
	lapsed := errors.Is(context.Cause(leaseCtx), ErrLeaseLapsed)
	cancel()
	lapse(nil)
	if interrupted && err != nil {
		r.observeDone(took, job, OutcomeInterrupted, err)
		r.conclude(d.bucket, member, nil) // canceled by Shutdown: the job goes back unspent
		return
	}
	if lapsed && err != nil {
		// Canceled because its lease may lapse: the job goes back to its
		// bucket due now, unspent, fenced like any outcome (when another
		// consumer recovered it meanwhile, this lands nowhere).
		r.observeDone(took, job, OutcomeInterrupted, err)
		r.conclude(d.bucket, member, &ack.Outcome{ID: job.ID, Token: token, Op: ack.OpRejoin, HadError: job.LastError != "", Late: d.item.Late})
		return
	}
	if err == nil && timedOut {
		err = ErrConsumeTimeout
	}
	if err != nil {
		r.observeDone(took, job, r.fail(d, member, job, h, guard, err), err)
		return
	}
	acked, rejoined, delay := ch.State()
	out := ack.Outcome{ID: job.ID, Token: token, Delay: delay, HadError: job.LastError != "", Late: d.item.Late}
	switch {
	case acked && rejoined:
		out.Op = ack.OpAckRejoin
		out.Header = ack.HeaderFor(ack.OpAckRejoin, h)
	case acked:
		out.Op = ack.OpAck
	case rejoined:
		out.Op = ack.OpRejoin
	case g.cfg.AutoAck:
		out.Op = ack.OpAck
	default:
		out.Op = ack.OpUnAck
		r.warnUnAck(job.ID)
	}
	r.observeDone(took, job, outcomeOf(out.Op), nil)
	r.conclude(d.bucket, member, &out)
}

// observeStart tells the observer a handler starts; its lateness is the
// fetch's (Redis clock) plus the wait since (local clock).
func (r *runner) observeStart(d delivery, job *pool.Job) time.Time {
	now := r.g.env.Clock.Now()
	late := time.Duration(-1)
	if d.item.Late >= 0 {
		late = d.item.Late + max(now.Sub(d.at), 0)
	}
	r.g.observer.JobDelivered(job, late)
	return now
}

func (r *runner) observeDone(took time.Duration, job *pool.Job, o Outcome, err error) {
	if r.g.observer != nil {
		r.g.observer.JobDone(job, o, took, err)
	}
}

func outcomeOf(op ack.Op) Outcome {
	switch op {
	case ack.OpRejoin:
		return OutcomeRejoin
	case ack.OpUnAck:
		return OutcomeUnAck
	}
	return OutcomeAck // OpAck, OpAckRejoin
}

// unackLogEvery bounds the warnings about jobs parked in un_ack.
const unackLogEvery = 10 * time.Second

// warnUnAck tells, at most once per unackLogEvery, that a handler returned
// nil without Ack or Rejoin: the job waits in un_ack until someone requeues
// or processes it, which surprises those who expected an ack.
func (r *runner) warnUnAck(id string) {
	r.unacked.Add(1)
	now := r.g.env.Clock.Now()
	r.unackMu.Lock()
	defer r.unackMu.Unlock()
	if now.Sub(r.unackLogged) < unackLogEvery {
		r.unackQuiet++
		return
	}
	r.g.env.Logger.Warn("redeq: handler returned nil without Ack or Rejoin: job parked in un_ack (set AutoAck, call ch.Ack(), or use Typed)",
		"topic", r.topic, "id", id, "parked_since_last_warning", r.unackQuiet+1, "parked_total", r.unacked.Load())
	r.unackLogged, r.unackQuiet = now, 0
}

// fail applies the retry policy to a failed delivery and tells which;
// guard is its worker's, for FinalRetry.
func (r *runner) fail(d delivery, member string, job *pool.Job, h pool.Header, guard *leaseGuard, cause error) Outcome {
	g := r.g
	bucket, token, late := d.bucket, d.item.Token, d.item.Late
	h.Attempt++
	policy := retry.For(h.MaxRetries, job.RetryIntervals, r.retries, r.intervals)
	delay, again := policy.Next(h.Attempt)
	if again && job.RetryIntervals == nil && r.opts.Backoff != nil {
		delay = max(r.opts.Backoff(h.Attempt, cause), 0)
	}
	if errors.Is(cause, retry.ErrSkipRetry) {
		again = false
	}
	if again {
		g.env.Logger.Debug("redeq: job failed, retrying", "topic", r.topic, "id", job.ID, "attempt", h.Attempt, "retry_in", delay, "err", cause)
		r.conclude(bucket, member, &ack.Outcome{ID: job.ID, Token: token, Op: ack.OpRetry, Delay: delay, Header: ack.HeaderFor(ack.OpRetry, h), Err: cause.Error(), Late: late})
		return OutcomeRetry
	}
	g.env.Logger.Warn("redeq: job failed for the last time", "topic", r.topic, "id", job.ID, "attempt", h.Attempt, "err", cause)
	if fr, ok := r.l.(FinalRetryListener); ok {
		final := *job // the handler may still hold job
		final.Attempt = h.Attempt
		final.LastError = ack.Cut(cause.Error())
		if !r.final(fr, &final, d, guard) {
			// The lease may have lapsed before FinalRetry began: another
			// consumer may run the job by now, and its last failure there
			// calls FinalRetry. The job goes back unspent, fenced.
			r.conclude(bucket, member, &ack.Outcome{ID: job.ID, Token: token, Op: ack.OpRejoin, HadError: job.LastError != "", Late: late})
			return OutcomeInterrupted
		}
	}
	r.conclude(bucket, member, &ack.Outcome{ID: job.ID, Token: token, Op: ack.OpDead, Header: ack.HeaderFor(ack.OpDead, h),
		Reason: fmt.Sprintf("failed %d times; last: %v", h.Attempt, cause), Err: cause.Error(), Late: late})
	return OutcomeDead
}

// call runs the handler, turning a panic into an error.
func (r *runner) call(ctx context.Context, job *pool.Job, ch *ack.Channel) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.g.env.Logger.Error("redeq: handler panicked", "topic", r.topic, "id", job.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("redeq: handler panicked: %v", p)
		}
	}()
	return r.handler(ctx, job, ch)
}

// final calls FinalRetry for job, the last failure of delivery d, under
// the handler's bounds: its ctx ends at Shutdown's cancel, after
// ConsumeTimeout, and (with ErrLeaseLapsed) when the lease on the job's
// bucket may lapse, guarded by guard as the handler was. It returns false,
// calling nothing, when the lease may have lapsed already.
func (r *runner) final(fr FinalRetryListener, job *pool.Job, d delivery, guard *leaseGuard) (called bool) {
	leaseCtx, lapse := context.WithCancelCause(r.g.handlerCtx)
	guard.arm(d, lapse)
	defer func() {
		guard.stop()
		lapse(nil)
	}()
	if errors.Is(context.Cause(leaseCtx), ErrLeaseLapsed) {
		return false
	}
	ctx, cancel := leaseCtx, context.CancelFunc(func() {})
	if r.consumeTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, r.consumeTimeout)
	}
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r.g.env.Logger.Error("redeq: FinalRetry panicked", "topic", r.topic, "id", job.ID, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	called = true // a panic in FinalRetry counts as its call
	fr.FinalRetry(ctx, job)
	return true
}

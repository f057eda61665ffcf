package consumer

import (
	"context"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// Listener runs the jobs of one topic.
type Listener interface {
	// Topic names the topic whose jobs OnJob receives.
	Topic() string
	// OnJob runs one job. Its ctx ends after ConsumeTimeout, when the
	// client shuts down, or when the client could not reach the job's
	// Redis node for almost ConsumerTimeout (context.Cause is then
	// ErrLeaseLapsed): from then on another consumer may recover the job
	// and run it, so a handler that must not run beside another run of
	// its job stops when ctx ends. Returning nil with ch.Ack() finishes
	// the job; with ch.Rejoin(d) it runs again after d; with neither it
	// is parked in un_ack (or acked, with AutoAck). An error, a panic or
	// a timeout is a failure: the job is retried on its schedule. An
	// error returned once ctx ended at Shutdown or with ErrLeaseLapsed is
	// no failure: the job goes back unspent. Every outcome lands only
	// while the job is still this delivery's.
	OnJob(ctx context.Context, job *pool.Job, ch *ack.Channel) error
}

// FinalRetryListener is a Listener told when a job's retries run out. It
// runs once, while the job is still in flight; the job moves to the dead
// set when it returns. Its ctx ends as the handler's does: at Shutdown's
// cancel, after ConsumeTimeout, and with ErrLeaseLapsed when the lease
// on the job may lapse (another consumer may then run the job, and call
// FinalRetry after its last failure there).
type FinalRetryListener interface {
	FinalRetry(ctx context.Context, job *pool.Job)
}

// WorkerCounter is a Listener with its own worker count, overriding the
// config's Workers.
type WorkerCounter interface {
	Workers() int
}

// BroadcastListener receives broadcast jobs of its topics: every running
// client with one for a job's topic receives the job once when it is due.
type BroadcastListener interface {
	Topics() []string
	OnBroadcast(ctx context.Context, job *pool.Job)
}

// Handler runs one job: a listener's OnJob, as middleware sees it.
type Handler func(ctx context.Context, job *pool.Job, ch *ack.Channel) error

// Middleware wraps a Handler: for logging, tracing, tenants, panics.
type Middleware = func(Handler) Handler

// Options is a listener's own policy; each set field overrides the
// client's config for that listener. A job's own MaxRetries and
// RetryIntervals still win over both.
type Options struct {
	// Workers is the listener's handler goroutines; 0 keeps the config's.
	Workers int
	// MaxRetries is the retries after a failed delivery; 0 keeps the
	// config's, -1 never retries.
	MaxRetries int
	// RetryIntervals is the retry schedule; nil keeps the config's.
	RetryIntervals []time.Duration
	// Backoff, when set, gives the wait before the retry that follows
	// failed delivery number attempt (from 1) with err, instead of
	// RetryIntervals (a job's own intervals still win).
	Backoff func(attempt int, err error) time.Duration
	// ConsumeTimeout bounds one handler call; 0 keeps the config's.
	ConsumeTimeout time.Duration
	// Middleware wraps this listener's handler, inside the client's
	// middleware; the first is the outermost.
	Middleware []Middleware
	// Retention keeps the record of each acked job readable as done for
	// that long; 0 keeps the config's Retention, negative keeps none.
	Retention time.Duration
	// RetentionMax is the most done records kept for the topic; 0 keeps
	// the config's RetentionMax.
	RetentionMax int
	// Limits are the topic's global limits, enforced at fetch across
	// every client that listens with them; zero for none.
	Limits ready.Limits
}

// Configured is a Listener with options of its own.
type Configured interface {
	ListenerOptions() Options
}

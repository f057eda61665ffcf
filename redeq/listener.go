package redeq

import "context"

// Listener runs the jobs of one topic. Register it with Client.Register;
// ListenerFunc, Typed and TypedWithChannel build one from a function.
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
	OnJob(ctx context.Context, job *Job, ch *Channel) error
}

// FinalRetryListener is a Listener told when a job's retries run out, with
// job.LastError set. FinalRetry runs once, while the job is still in
// flight; the job moves to the dead set when it returns, so a crash during
// the call means it runs again, never that the job is lost.
type FinalRetryListener interface {
	FinalRetry(ctx context.Context, job *Job)
}

// WorkerCounter is a Listener with its own number of handler goroutines,
// overriding the config's Workers; 0 or less keeps the config's.
type WorkerCounter interface {
	Workers() int
}

// BroadcastListener receives the broadcast jobs of its topics: every
// running client with one for a job's topic runs it once when it is due.
// A broadcast is never acked, retried or returned. Register it with
// Client.RegisterBroadcast; BroadcastFunc builds one from a function.
type BroadcastListener interface {
	Topics() []string
	OnBroadcast(ctx context.Context, job *Job)
}

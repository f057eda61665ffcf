// Package consumer runs listeners: the workers fed by the reliable fetch,
// the heartbeat that shows a client is alive, the reaper that recovers the
// jobs of crashed clients, and the rollback of in-flight jobs at shutdown.
package consumer

import (
	"context"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/pool"
)

// Listener runs the jobs of one topic.
type Listener interface {
	// Topic names the topic whose jobs OnJob receives.
	Topic() string
	// OnJob runs one job. Its ctx ends after ConsumeTimeout or when the
	// client shuts down. Returning nil with ch.Ack() finishes the job;
	// with ch.Rejoin(d) it runs again after d; with neither it is parked
	// in un_ack (or acked, with AutoAck). An error, a panic or a timeout
	// is a failure: the job is retried on its schedule.
	OnJob(ctx context.Context, job *pool.Job, ch *ack.Channel) error
}

// FinalRetryListener is a Listener told when a job's retries run out. It
// runs once, while the job is still in flight; the job moves to the dead
// set when it returns.
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

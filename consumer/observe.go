package consumer

import (
	"fmt"
	"time"

	"github.com/redeq-go/redeq/pool"
)

// Outcome is what became of one delivery, as an Observer sees it.
type Outcome string

// The outcomes of a delivery.
const (
	// OutcomeAck: acked (or AutoAck), or acked and re-added fresh.
	OutcomeAck Outcome = "ack"
	// OutcomeRejoin: back to its bucket at now+d, attempts unchanged.
	OutcomeRejoin Outcome = "rejoin"
	// OutcomeRetry: the handler failed; due again after the retry interval.
	OutcomeRetry Outcome = "retry"
	// OutcomeDead: the handler failed for the last time (FinalRetry ran);
	// the job goes to the dead set.
	OutcomeDead Outcome = "dead"
	// OutcomeUnAck: nil error without Ack or Rejoin; parked in un_ack.
	OutcomeUnAck Outcome = "unack"
	// OutcomeInterrupted: the handler was canceled by Shutdown, or
	// because its lease may lapse (ErrLeaseLapsed), and returned an error;
	// the job returns to its bucket unspent.
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomeBroadcast: a broadcast listener's handler ran (err tells
	// whether it failed or panicked). A broadcast is never acked, retried
	// or returned; every client listening runs it once.
	OutcomeBroadcast Outcome = "broadcast"
)

// Observer hears what a client's consumers do, for metrics and tracing.
// Its methods run on the workers' goroutines (a broadcast's on its
// listener's), in the order Delivered, then Done, for one delivery; they
// must be fast and safe for concurrent use.
// An unset Observer costs nothing.
type Observer interface {
	// JobAdded: one job of topic was stored by Add, AddBatch or Put.
	JobAdded(topic string)
	// JobDelivered: a handler is about to run job. lateness is how long
	// after its due time it starts (the mover's wait, the ready list's
	// queue, the fetch), or negative when unknown: the job reached the
	// ready list by crash recovery or a lost fetch reply, not by the
	// mover, or it is a broadcast.
	JobDelivered(job *pool.Job, lateness time.Duration)
	// JobDone: the handler returned after took; outcome is what redeq does
	// with the job, err the handler's error (a panic or timeout included).
	JobDone(job *pool.Job, outcome Outcome, took time.Duration, err error)
}

// ReturnObserver is an Observer that also hears of jobs returned to their
// buckets without spending an attempt.
type ReturnObserver interface {
	Observer
	// JobsReturned: n in-flight jobs of topic were returned, by the reaper
	// from a silent consumer (recovered true) or by this client's
	// Shutdown (recovered false).
	JobsReturned(topic string, n int, recovered bool)
}

// Observe sets the group's observer before Start.
func (g *Group) Observe(o Observer) error {
	if o == nil {
		return fmt.Errorf("%w: nil observer", pool.ErrInvalidArgument)
	}
	if g.started.Load() {
		return ErrStarted
	}
	if g.observer != nil {
		return fmt.Errorf("%w: an observer is set already (combine them into one)", pool.ErrInvalidArgument)
	}
	g.observer = o
	return nil
}

func (g *Group) returned(topic string, n int, recovered bool) {
	if ro, ok := g.observer.(ReturnObserver); ok && n > 0 {
		ro.JobsReturned(topic, n, recovered)
	}
}

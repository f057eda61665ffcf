package redeq

import (
	"time"

	"github.com/redeq-go/redeq/consumer"
)

// Observer hears what a client does with jobs, for metrics and tracing:
//
//	JobAdded(topic string)                       // Add, AddBatch, AddTyped, or Put that added
//	JobDelivered(job *Job, lateness time.Duration) // a handler starts; lateness < 0: unknown
//	JobDone(job *Job, outcome Outcome, took time.Duration, err error)
//
// Lateness is the handler's start minus the job's due time: the mover's
// wait, the ready list's queue and the fetch. It is unknown (negative) for
// a job put back in the ready list by crash recovery, and for broadcasts. JobDone's job is the
// pointer JobDelivered and the handler received. The methods run on the
// client's goroutines, once per event, and must be fast and safe for
// concurrent use. An Observer that also implements ReturnObserver hears
// of jobs returned to their buckets by the reaper and the rollback.
// github.com/redeq-go/redeq/contrib/otel and .../contrib/prometheus are
// Observers.
type Observer = consumer.Observer

// ReturnObserver is an Observer that also hears of in-flight jobs returned
// to their buckets unspent: JobsReturned(topic, n, recovered), recovered
// true for the reaper's recovery of a silent consumer's jobs, false for
// this client's Shutdown rollback.
type ReturnObserver = consumer.ReturnObserver

// Outcome is what became of one delivery.
type Outcome = consumer.Outcome

// The outcomes JobDone reports.
const (
	OutcomeAck         = consumer.OutcomeAck         // acked, or acked and re-added fresh
	OutcomeRejoin      = consumer.OutcomeRejoin      // back to its bucket, attempts unchanged
	OutcomeRetry       = consumer.OutcomeRetry       // failed; due again after its interval
	OutcomeDead        = consumer.OutcomeDead        // failed for the last time; to the dead set
	OutcomeUnAck       = consumer.OutcomeUnAck       // neither acked nor rejoined; parked in un_ack
	OutcomeInterrupted = consumer.OutcomeInterrupted // canceled by Shutdown; returns unspent
	OutcomeBroadcast   = consumer.OutcomeBroadcast   // a broadcast handler ran; never acked or retried
)

// Observe sets the client's Observer, before Start and before the first
// Add (it is read without a lock). One per client: combine several into
// one. A client without one pays nothing for it.
func (c *Client) Observe(o Observer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClientClosed
	}
	if c.run != nil || c.starting {
		return ErrStarted
	}
	if err := c.group.Observe(o); err != nil {
		return err
	}
	c.observer = o
	return nil
}

// added tells the observer that n jobs of topic were stored.
func (c *Client) added(topic string, n int) {
	if c.observer == nil {
		return
	}
	for range n {
		c.observer.JobAdded(topic)
	}
}

// Observers returns an Observer that tells each of os, in order, what it
// hears; those that are ReturnObservers also hear of returned jobs.
func Observers(os ...Observer) ReturnObserver { return fanout(os) }

type fanout []Observer

func (f fanout) JobAdded(topic string) {
	for _, o := range f {
		o.JobAdded(topic)
	}
}

func (f fanout) JobDelivered(job *Job, lateness time.Duration) {
	for _, o := range f {
		o.JobDelivered(job, lateness)
	}
}

func (f fanout) JobDone(job *Job, outcome Outcome, took time.Duration, err error) {
	for _, o := range f {
		o.JobDone(job, outcome, took, err)
	}
}

func (f fanout) JobsReturned(topic string, n int, recovered bool) {
	for _, o := range f {
		if ro, ok := o.(ReturnObserver); ok {
			ro.JobsReturned(topic, n, recovered)
		}
	}
}

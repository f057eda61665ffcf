package redeq

import (
	"time"

	"github.com/redeq-go/redeq/consumer"
)

// Observer hears what a client does with jobs, for metrics and tracing.
// Its methods run on the client's goroutines, once per event, and must be
// fast and safe for concurrent use. An Observer that also implements
// ReturnObserver hears of jobs returned to their buckets by the reaper and
// the rollback; one that implements ScheduleObserver hears of the ticks of
// periodic schedules. github.com/redeq-go/redeq/contrib/otel and
// .../contrib/prometheus are Observers.
type Observer interface {
	// JobAdded: one job of topic was stored by Add, AddBatch, AddTyped, or
	// a Put that added it.
	JobAdded(topic string)
	// JobDelivered: a handler is about to run job. lateness is the
	// handler's start minus the job's due time (the mover's wait, the
	// ready list's queue, the fetch), or negative when unknown: for a job
	// put back in the ready list by crash recovery or after a lost fetch
	// reply, and for broadcasts.
	JobDelivered(job *Job, lateness time.Duration)
	// JobDone: the handler returned after took; outcome is what redeq does
	// with the job, err the handler's error (a panic or a timeout
	// included). job is the pointer JobDelivered and the handler received.
	JobDone(job *Job, outcome Outcome, took time.Duration, err error)
}

// ReturnObserver is an Observer that also hears of in-flight jobs returned
// to their buckets without spending an attempt.
type ReturnObserver interface {
	Observer
	// JobsReturned: n in-flight jobs of topic were returned, by the reaper
	// from a silent consumer (recovered true) or by this client's
	// Shutdown rollback (recovered false).
	JobsReturned(topic string, n int, recovered bool)
}

// ScheduleObserver is an Observer that also hears of the ticks of the
// periodic schedules this client handled. Summed over every client, each
// tick is counted once: as added by the client whose pass recorded it, or
// as skipped.
type ScheduleObserver interface {
	Observer
	// TicksAdded: the jobs of n ticks of schedule (whose jobs go to topic)
	// were added, each once across the fleet.
	TicksAdded(schedule, topic string, n int)
	// TicksSkipped: n ticks of schedule were skipped: missed while no
	// client ran and dropped by the catch-up policy, or passed while the
	// schedule was paused (reported by the pass that moves the cursor
	// after the resume, whichever client resumed it).
	TicksSkipped(schedule, topic string, n int64)
}

// Outcome is what became of one delivery, as JobDone reports it.
type Outcome string

// The outcomes JobDone reports.
const (
	OutcomeAck         Outcome = "ack"         // acked (or AutoAck), or acked and re-added fresh
	OutcomeRejoin      Outcome = "rejoin"      // back to its bucket, attempts unchanged
	OutcomeRetry       Outcome = "retry"       // failed; due again after its interval
	OutcomeDead        Outcome = "dead"        // failed for the last time (FinalRetry ran); to the dead set
	OutcomeUnAck       Outcome = "unack"       // neither acked nor rejoined; parked in un_ack
	OutcomeInterrupted Outcome = "interrupted" // canceled by Shutdown or for its lease (ErrLeaseLapsed); returns to its bucket unspent
	OutcomeBroadcast   Outcome = "broadcast"   // a broadcast handler ran; never acked, retried or returned
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
	var co consumer.Observer // nil stays nil: the group refuses it
	if o != nil {
		co = adaptObserver(o)
	}
	if err := c.group.Observe(co); err != nil {
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
// hears; those that are ReturnObservers also hear of returned jobs, and
// those that are ScheduleObservers of schedule ticks (the value returned
// is a ScheduleObserver too).
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

func (f fanout) TicksAdded(schedule, topic string, n int) {
	for _, o := range f {
		if so, ok := o.(ScheduleObserver); ok {
			so.TicksAdded(schedule, topic, n)
		}
	}
}

func (f fanout) TicksSkipped(schedule, topic string, n int64) {
	for _, o := range f {
		if so, ok := o.(ScheduleObserver); ok {
			so.TicksSkipped(schedule, topic, n)
		}
	}
}

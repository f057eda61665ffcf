package redeq

import (
	"time"
	"unsafe"

	"github.com/redeq-go/redeq/pool"
)

// Job is a unit of delayed work: what Add stores, a handler receives and
// the inspecting calls return.
type Job struct {
	// Topic names the listener that runs the job.
	Topic string
	// ID names the job within its topic; "" makes Add assign a UUID and
	// write it back.
	ID string
	// Body is the payload, stored as the bytes given.
	Body []byte
	// Headers are metadata set by the producer (a trace context, a
	// tenant, ...), stored with the job and kept through retries, rejoins,
	// recoveries and rollbacks. At most config.MaxHeaders entries and
	// config.MaxHeaderBytes bytes of keys and values; keys are non-empty
	// and hold no control characters.
	Headers map[string]string
	// Delay is the wait from now (the Redis server's clock) until the job
	// is due. Ignored when RunAt is set.
	Delay time.Duration
	// RunAt is the absolute due time, at most the year 9999. Get and the
	// listings set it to the job's current due time (when it fell due, for
	// a ready job; when it was parked, for an un_acked or dead one); the
	// in-flight listing sets it to when its consumer fetched it, Get leaves
	// it zero for a job in flight.
	RunAt time.Time
	// MaxRetries is how many times a failed job is retried: 0 means the
	// listener's or the config's Retry, -1 never.
	MaxRetries int
	// RetryIntervals is the wait before each retry; nil means the
	// listener's or the config's. When retries outrun the list the last
	// interval repeats; with MaxRetries 0, each interval is used once.
	RetryIntervals []time.Duration
	// Broadcast delivers the job, when due, to every running client with a
	// BroadcastListener for its topic, instead of to one listener.
	Broadcast bool
	// Attempt is the number of failed deliveries so far. Set by redeq.
	Attempt int
	// Recoveries is the number of times the job was recovered from a crashed
	// consumer. Set by redeq.
	Recoveries int
	// CreatedAt is when the job was added, by the Redis server's clock.
	// Set by redeq.
	CreatedAt time.Time
	// State is where the job waits. Set by Get and the listings.
	State State
	// Consumer is the id of the consumer that holds the job while it is in
	// flight (see Client.ConsumerID). Set by Get and the listings.
	Consumer string
	// LastError is the error its handler returned on the job's last failed
	// delivery, cut to 512 bytes; empty when it never failed. Set by redeq
	// for handlers, FinalRetry, Get and the listings.
	LastError string
	// Reason says why a dead job died: the last handler error, a timeout,
	// repeated crashes of its consumers, or a corrupt entry. Set by Get and
	// the dead listing.
	Reason string
	// FailedAt is when the delivery that gave LastError failed, by the
	// Redis clock; zero when the job never failed (or failed before redeq
	// recorded the time of failures). Set by Get and the listings.
	FailedAt time.Time
	// Failures are the job's failed deliveries, newest first, the last
	// MaxFailures, each with its time and consumer. Set by Get and the
	// listings.
	Failures []Failure
	// ConsumerSilentSince is, for a job in flight whose consumer missed its
	// heartbeats for longer than its ConsumerTimeout and whose jobs no
	// reaper has recovered yet, the consumer's last heartbeat; zero
	// otherwise. Its handler may be running still, cut off, or dead. Set by
	// Get and the in-flight listing.
	ConsumerSilentSince time.Time
	// FinishedAt is, for a done job (acked on a topic with retention of
	// finished jobs), when it was acked, by the Redis clock; Consumer then
	// names the consumer that acked it. Set by Get and the done listing.
	FinishedAt time.Time
}

// State is where a job waits.
type State string

// The states of a job, as Get reports them and List selects them.
const (
	StateScheduled State = "scheduled" // in its bucket, not due yet
	StateReady     State = "ready"     // due, waiting for a consumer
	StateInFlight  State = "inflight"  // held by a consumer
	StateUnAck     State = "unack"     // handled without ack or rejoin
	StateDead      State = "dead"      // retries ran out
	StateDone      State = "done"      // acked, kept for its topic's retention (WithRetention)
)

// MaxFailures is the most failed deliveries a job's Failures keep.
const MaxFailures = pool.MaxFailures

// Failure is one failed delivery of a job.
type Failure struct {
	// At is when the delivery failed, by the Redis clock; zero when not
	// recorded.
	At time.Time
	// Error is the handler's error, cut to 512 bytes.
	Error string
	// Consumer is the id of the consumer whose delivery failed ("" when
	// not recorded); Client.Consumers names it while it runs.
	Consumer string
}

// A Job is a pool.Job under the facade's name: the same fields, in the
// same order, of the same types, but for State, which is a string type of
// each package's own. So a pointer converts to the other without a copy
// and allocates nothing, in either direction; TestJobIsPoolJob checks the
// layout field by field (the compiler cannot, because of State).

// poolJob is j as the building blocks take it.
func poolJob(j *Job) *pool.Job { return (*pool.Job)(unsafe.Pointer(j)) }

// publicJob is j as the facade gives it.
func publicJob(j *pool.Job) *Job { return (*Job)(unsafe.Pointer(j)) }

// poolJobs is js as the building blocks take them: a new slice of the same
// pointers.
func poolJobs(js []*Job) []*pool.Job {
	if js == nil {
		return nil
	}
	out := make([]*pool.Job, len(js))
	for i, j := range js {
		out[i] = poolJob(j)
	}
	return out
}

// publicResult is the answer of a building block that returns one job.
func publicResult(j *pool.Job, err error) (*Job, error) { return publicJob(j), err }

// publicJobsResult is the answer of a building block that lists jobs.
func publicJobsResult(js []*pool.Job, err error) ([]*Job, error) { return publicJobs(js), err }

// publicJobs is js as the facade gives them: a new slice of the same
// pointers.
func publicJobs(js []*pool.Job) []*Job {
	if js == nil {
		return nil
	}
	out := make([]*Job, len(js))
	for i, j := range js {
		out[i] = publicJob(j)
	}
	return out
}

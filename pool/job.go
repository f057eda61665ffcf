package pool

import (
	"context"
	"time"

	"github.com/redeq-go/redeq/internal/script"
)

// Job is a unit of delayed work.
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
	// RunAt is the absolute due time. Get and List set it to a scheduled
	// job's due time; List and the dead and un_ack listings set it to when
	// an un_acked or dead job was parked; it is zero otherwise.
	RunAt time.Time
	// MaxRetries is how many times a failed job is retried: 0 means the
	// config's Retry, -1 never.
	MaxRetries int
	// RetryIntervals is the wait before each retry; nil means the config's.
	// When retries outrun the list the last interval repeats.
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
	// State is where the job waits. Set by Get.
	State State
	// Consumer is the id of the consumer that holds the job while it is in
	// flight (see Client.ConsumerID). Set by Get.
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

// The states of a job.
const (
	StateScheduled State = "scheduled" // in its bucket, not due yet
	StateReady     State = "ready"     // due, waiting for a consumer
	StateInFlight  State = "inflight"  // held by a consumer
	StateUnAck     State = "unack"     // handled without ack or rejoin
	StateDead      State = "dead"      // retries ran out
	StateDone      State = "done"      // acked, kept for a topic's retention
)

// MaxDue is the latest due time redeq stores: the last millisecond of the
// year 9999. A RunAt or Reschedule time after it is refused; delays are
// bounded by time.Duration itself (about 292 years), well before it.
var MaxDue = time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)

// MaxDueMs is MaxDue in unix ms; the scripts clamp due times to it (the
// scripts' prelude has it from the same constant).
const MaxDueMs = script.MaxDueMs

// UnixMs is t in whole unix milliseconds, rounded up so that a due time is
// never earlier than asked, and kept within 0..MaxDueMs (times outside
// that range never wrap around: callers refuse them first, see checkDue).
func UnixMs(t time.Time) int64 {
	if t.After(MaxDue) {
		return MaxDueMs
	}
	if t.Before(time.Unix(0, 0)) {
		return 0
	}
	// Seconds and nanoseconds apart: UnixMicro would drop the
	// nanoseconds (1ns past a whole ms would be due that ms, early), and
	// UnixNano overflows after the year 2262.
	ms := t.Unix()*1000 + int64(t.Nanosecond()/1e6)
	if t.Nanosecond()%1e6 > 0 {
		ms++
	}
	return ms
}

// DurationMs is d in whole milliseconds, rounded up; 0 for a negative d.
// It never overflows: math.MaxInt64 ns is about 292 years.
func DurationMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// checkDue reports why t cannot be a due time: after MaxDue.
func checkDue(field string, t time.Time) error {
	if t.After(MaxDue) {
		return invalid("%s %s is after %s, the latest due time", field, t.UTC().Format(time.RFC3339), MaxDue.Format(time.RFC3339))
	}
	return nil
}

// ctxOrErr rejects a nil context before any command runs.
func ctxOrErr(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	return nil
}

package pool

import (
	"errors"
	"fmt"
)

// Sentinels callers match with errors.Is.
var (
	// ErrInvalidJob is a job or argument that redeq rejects before writing
	// anything; it is always wrapped with the reason.
	ErrInvalidJob = errors.New("redeq: invalid job")
	// ErrJobExists is an Add of an id its topic already holds.
	ErrJobExists = errors.New("redeq: job exists")
	// ErrJobNotFound is a job id the topic does not hold.
	ErrJobNotFound = errors.New("redeq: job not found")
	// ErrPoolFull is an Add to a topic that holds MaxPool jobs.
	ErrPoolFull = errors.New("redeq: job pool full")
	// ErrBucketMismatch is a client configured with another bucket count
	// than the one recorded for the topic.
	ErrBucketMismatch = errors.New("redeq: bucket count mismatch")
	// ErrJobNotWaiting is a Reschedule or requeue of a job that is not where
	// the call expects it (in flight, parked, dead, or scheduled).
	ErrJobNotWaiting = errors.New("redeq: job not waiting")
	// ErrJobChanged is a bulk action on a marked job whose id now names
	// another stay of a job (deleted and added again, or parked again).
	ErrJobChanged = errors.New("redeq: job changed since it was listed")
	// ErrInvalidArgument is an argument that is not a job (a listener, a
	// limit, a state, an option) that redeq rejects before writing
	// anything; it is always wrapped with the reason.
	ErrInvalidArgument = errors.New("redeq: invalid argument")
	// ErrNilContext is a call with a nil context.
	ErrNilContext = fmt.Errorf("%w: nil context", ErrInvalidArgument)
)

// invalid wraps ErrInvalidJob with the reason.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidJob}, args...)...)
}

// MismatchError reports a bucket count that differs from the recorded one.
type MismatchError struct {
	Topic              string
	Configured, Stored int
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("redeq: topic %q has %d buckets recorded, this client is configured with %d (Concurrency); use %d or another topic",
		e.Topic, e.Stored, e.Configured, e.Stored)
}

// Is makes a MismatchError match ErrBucketMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrBucketMismatch }

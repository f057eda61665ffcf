package retry

import (
	"errors"
	"time"
)

// Policy is the retry schedule of one job: its own settings where it has
// them, the config's otherwise.
type Policy struct {
	// MaxRetries is how many times a failed job is retried; -1 never.
	MaxRetries int
	// Intervals is the wait before each retry; the last repeats.
	Intervals []time.Duration
}

// For returns the policy of a job that has maxRetries and intervals of its
// own (0 and nil meaning none) over the defaults. A job with intervals of
// its own and no MaxRetries is retried once per interval.
func For(maxRetries int, intervals []time.Duration, defRetries int, defIntervals []time.Duration) Policy {
	p := Policy{MaxRetries: maxRetries, Intervals: intervals}
	if p.MaxRetries == 0 && len(intervals) > 0 {
		p.MaxRetries = len(intervals)
	}
	if p.MaxRetries == 0 {
		p.MaxRetries = defRetries
	}
	if len(p.Intervals) == 0 {
		p.Intervals = defIntervals
	}
	return p
}

// Next is the decision after a job's failed delivery number attempt
// (counting from 1): retry after delay, or, when ok is false, give up.
func (p Policy) Next(attempt int) (delay time.Duration, ok bool) {
	if p.MaxRetries < 0 || attempt > p.MaxRetries || len(p.Intervals) == 0 {
		return 0, false
	}
	return p.Intervals[min(attempt, len(p.Intervals))-1], true
}

// ErrSkipRetry, returned (or wrapped) by a handler, gives up on the job at
// once: no further retry, FinalRetry runs and the job moves to dead.
var ErrSkipRetry = errors.New("redeq: skip retry")

// Skip wraps err so that the job is not retried.
func Skip(err error) error {
	if err == nil {
		return ErrSkipRetry
	}
	return &skipError{err}
}

type skipError struct{ err error }

func (e *skipError) Error() string   { return e.err.Error() + " (no retry)" }
func (e *skipError) Unwrap() []error { return []error{e.err, ErrSkipRetry} }

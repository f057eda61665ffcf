package redeq

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/retry"
)

// Every error redeq returns that a caller matches: sentinels with
// errors.Is, typed errors with errors.As.

// Sentinels of the producing and inspecting side.
var (
	// ErrInvalidJob is a job rejected before anything is written: a bad
	// topic or id, a negative delay, a body or headers over their bounds,
	// a due time past the year 9999. It is always wrapped with the reason.
	ErrInvalidJob = pool.ErrInvalidJob
	// ErrInvalidArgument is an argument that is not a job (a listener, a
	// middleware, a limit, a state, a delay or time given to a call, a nil
	// context) rejected before anything is written; always wrapped with the
	// reason.
	ErrInvalidArgument = pool.ErrInvalidArgument
	// ErrJobExists is an Add of an id its topic already holds.
	ErrJobExists = pool.ErrJobExists
	// ErrJobNotFound is an id its topic does not hold.
	ErrJobNotFound = pool.ErrJobNotFound
	// ErrPoolFull is an Add to a topic that holds MaxPool jobs.
	ErrPoolFull = pool.ErrPoolFull
	// ErrBucketMismatch is a client whose Concurrency differs from the
	// bucket count recorded for the topic; errors.As gives a
	// *MismatchError with both counts.
	ErrBucketMismatch = pool.ErrBucketMismatch
	// ErrJobNotWaiting is a Reschedule of a job that is in flight, parked
	// or dead, or a requeue of a job that is not parked or dead.
	ErrJobNotWaiting = pool.ErrJobNotWaiting
	// ErrJobChanged is a bulk action on a job given with its Mark whose id
	// now names another stay of a job: deleted and added again, or
	// requeued and parked again, since it was listed.
	ErrJobChanged = pool.ErrJobChanged
	// ErrClientClosed is a Start, Register or Shutdown after Shutdown.
	ErrClientClosed = errors.New("redeq: client closed")
	// ErrUnknownTopic is a topic nobody ever added to: it has no recorded
	// bucket count and is not in the topic set. Stats, List, Pause and
	// Resume return it rather than an empty answer, so a typo in a topic
	// name does not read as "no jobs".
	ErrUnknownTopic = pool.ErrUnknownTopic
	// ErrNotReplicated is a write that the Redis master applied but that
	// fewer than Config.WaitReplicas replicas acknowledged within
	// Config.WaitTimeout. From Add, AddBatch (per job), Put or Update it
	// means the job may be stored, or lost if the master fails before its
	// replicas have it: Get tells; Put stores it again and waits again. It
	// wraps nothing else.
	ErrNotReplicated = rdb.ErrNotReplicated
)

// Errors of the consuming side.
var (
	// ErrStarted is a Register or Start after Start.
	ErrStarted = consumer.ErrStarted
	// ErrDuplicateListener is a second listener for one topic.
	ErrDuplicateListener = consumer.ErrDuplicate
	// ErrConsumeTimeout is the failure of a handler that overran
	// ConsumeTimeout.
	ErrConsumeTimeout = consumer.ErrConsumeTimeout
	// ErrLeaseLapsed is the context.Cause of a handler's ctx canceled
	// because the client could not renew its lease on the job's bucket in
	// time (it could not reach the job's node): another consumer may
	// recover the job from then on.
	ErrLeaseLapsed = consumer.ErrLeaseLapsed
	// ErrSkipRetry, returned or wrapped by a handler, gives up on a job at
	// once: FinalRetry runs and the job moves to the dead set.
	ErrSkipRetry = retry.ErrSkipRetry
)

// MismatchError reports a client whose Concurrency differs from the
// bucket count recorded for a topic. It matches ErrBucketMismatch.
type MismatchError struct {
	Topic      string
	Configured int // this client's Concurrency
	Stored     int // the count recorded for the topic, which its jobs use
}

func (e *MismatchError) Error() string { return (*pool.MismatchError)(e).Error() }

// Is makes a MismatchError match ErrBucketMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrBucketMismatch }

// publicMismatch gives the building blocks' *pool.MismatchError in err as
// a *MismatchError, for errors.As; any other err as it is.
func publicMismatch(err error) error {
	var pm *pool.MismatchError
	if !errors.As(err, &pm) {
		return err
	}
	if err == error(pm) {
		return (*MismatchError)(pm)
	}
	return &wrappedMismatch{err: err, me: (*MismatchError)(pm)}
}

// wrappedMismatch is an error that wraps a *pool.MismatchError, with a
// *MismatchError beside it.
type wrappedMismatch struct {
	err error
	me  *MismatchError
}

func (e *wrappedMismatch) Error() string   { return e.err.Error() }
func (e *wrappedMismatch) Unwrap() []error { return []error{e.me, e.err} }

// BatchError reports the jobs of an AddBatch that were not stored. Errs has
// one entry per job, nil where the job was stored. errors.Is matches the
// sentinel of any entry.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	var b strings.Builder
	failed := 0
	for _, err := range e.Errs {
		if err != nil {
			if failed < 3 {
				b.WriteString("; ")
				b.WriteString(err.Error())
			}
			failed++
		}
	}
	return fmt.Sprintf("redeq: %d of %d jobs not added%s", failed, len(e.Errs), b.String())
}

// Unwrap returns the failures, for errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// invalidArg wraps ErrInvalidArgument with the reason.
func invalidArg(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

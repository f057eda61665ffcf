package redeq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redeq-go/redeq/pool"
)

// updateTries bounds how often Update reads the job again after finding
// it changed under fn.
const updateTries = 5

// Update changes a waiting job (scheduled, or due and not yet fetched): it
// reads the job, applies fn to a copy, and writes the copy's Body,
// MaxRetries and RetryIntervals, and its due time when fn changed RunAt (a
// new absolute due time; zero means now) or set Delay (due that long from
// now by the Redis clock); setting both is refused. A ready job keeps its
// place in the ready list unless its due time changes.
//
// The write is a compare-and-set: it happens only if the job is still as
// read. When a fetch, an outcome or another change came in between, Update
// reads the job again and calls fn again (up to 5 times), so fn must be
// safe to call more than once. When fn returns an error, nothing is
// written and Update returns that error.
//
// ErrJobNotFound when absent; ErrJobNotWaiting when the job is in flight,
// parked in un_ack or dead (requeue it first); ErrInvalidJob, writing
// nothing, when the changed job is not one Add would take, or fn changed
// what redeq owns: Topic, ID, Broadcast, Attempt, Recoveries, CreatedAt.
// State, Consumer and Reason describe where the job is; changes to them
// are ignored. A rerun of the write by go-redis after a lost reply
// reports success again.
func (c *Client) Update(ctx context.Context, topic, id string, fn func(j *Job) error) error {
	if err := checkRef(ctx, topic, id); err != nil {
		return err
	}
	if fn == nil {
		return invalidArg("update job %q: nil function", id)
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return err
	}
	for range updateTries {
		snap, err := c.store.Read(ctx, topic, id, b)
		if err != nil {
			return err
		}
		old := publicJob(snap.Job)
		if old.State != StateScheduled && old.State != StateReady {
			return fmt.Errorf("update job %q of topic %q: it is %s: %w", id, topic, old.State, ErrJobNotWaiting)
		}
		j := copyJob(old)
		if err := fn(j); err != nil {
			return err
		}
		env, due, err := c.changed(snap, j)
		if err != nil {
			return err
		}
		if env == nil {
			return nil // fn changed nothing
		}
		err = c.store.Replace(ctx, snap, b, env, due)
		if !errors.Is(err, pool.ErrChanged) {
			return err
		}
	}
	return fmt.Errorf("update job %q of topic %q: changed by others %d times in a row: %w", id, topic, updateTries, pool.ErrChanged)
}

// copyJob returns a copy of j that shares no slice with it.
func copyJob(j *Job) *Job {
	cp := *j
	cp.Body = bytes.Clone(j.Body)
	cp.RetryIntervals = slices.Clone(j.RetryIntervals)
	return &cp
}

// changed validates the job fn returned against the one read, and returns
// its envelope and due time; a nil envelope when nothing changed.
func (c *Client) changed(snap pool.Snapshot, j *Job) ([]byte, pool.Due, error) {
	old := publicJob(snap.Job)
	refuse := func(field string) ([]byte, pool.Due, error) {
		return nil, pool.Due{}, fmt.Errorf("%w: update job %q of topic %q: %s is set by redeq and cannot change",
			ErrInvalidJob, old.ID, old.Topic, field)
	}
	switch {
	case j.Topic != old.Topic:
		return refuse("Topic")
	case j.ID != old.ID:
		return refuse("ID")
	case j.Broadcast != old.Broadcast:
		return refuse("Broadcast")
	case j.Attempt != old.Attempt:
		return refuse("Attempt")
	case j.Recoveries != old.Recoveries:
		return refuse("Recoveries")
	case !j.CreatedAt.Equal(old.CreatedAt):
		return refuse("CreatedAt")
	}
	if err := pool.Validate(poolJob(j), c.cfg.MaxBodyBytes); err != nil {
		return nil, pool.Due{}, err
	}
	due := pool.Due{Keep: true}
	moved := !j.RunAt.Equal(old.RunAt)
	switch {
	case moved && j.Delay != 0:
		return nil, pool.Due{}, fmt.Errorf("%w: update job %q of topic %q: both RunAt and Delay set (set one)",
			ErrInvalidJob, old.ID, old.Topic)
	case j.Delay != 0:
		due = pool.Due{Delay: pool.DurationMs(j.Delay)}
	case moved && j.RunAt.IsZero():
		due = pool.Due{Delay: 0}
	case moved:
		due = pool.Due{Delay: -1, At: pool.UnixMs(j.RunAt)}
	}
	h := pool.HeaderOf(poolJob(j))
	h.CreatedMs, h.Attempt, h.Recoveries = snap.Header.CreatedMs, snap.Header.Attempt, snap.Header.Recoveries
	env := pool.Encode(h, pool.Payload(poolJob(j)))
	if due.Keep && bytes.Equal(env, pool.Encode(snap.Header, pool.Payload(snap.Job))) {
		return nil, due, nil
	}
	return env, due, nil
}

// Put stores job whether or not its id exists, for "run this once, at the
// latest time asked": debouncing ("send the digest 10 minutes after the
// last change") or a reminder moved by every edit. When the topic holds no
// job of that id, Put adds job as Add does. When it holds one that is
// waiting (scheduled or ready), parked in un_ack or dead, Put replaces it
// with job: its body, settings and due time, attempts and recoveries back
// to 0, a new CreatedAt. When that job is in flight its handler is
// running, and Put returns ErrJobNotWaiting, writing nothing: replacing it
// would let the new job run beside the old handler, or lose the old run's
// retry; call Put again once it has settled, or PutSettled, which waits.
//
// An empty ID is replaced by a new UUID, written back into job. Errors as
// for Add (ErrInvalidJob, ErrPoolFull when adding, ErrBucketMismatch), and
// then nothing is written. A rerun by go-redis after a lost reply gives
// the first run's answer.
func (c *Client) Put(ctx context.Context, job *Job) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	if err := c.prepare(ctx, job); err != nil {
		return err
	}
	replaced, err := c.store.Put(ctx, poolJob(job), c.placement(job.ID))
	if err == nil && !replaced {
		c.added(job.Topic, 1)
	}
	return err
}

// PutSettled is Put for a job whose handler may be running: while the job
// of that id is in flight (Put's ErrJobNotWaiting) it waits, polling, and
// puts once the handler's outcome is applied (acked, retried, rejoined,
// parked, or recovered from a crashed consumer), replacing the job or
// adding it anew. So the new job never runs beside a handler of the old
// one, as it may after Delete and Add. When ctx ends first it returns an
// error wrapping ctx's and ErrJobNotWaiting, having written nothing.
// Other errors as for Put.
func (c *Client) PutSettled(ctx context.Context, job *Job) error {
	wait := 2 * time.Millisecond
	for {
		err := c.Put(ctx, job)
		if !errors.Is(err, ErrJobNotWaiting) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("put job %q of topic %q: %w: %w", job.ID, job.Topic, err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, max(c.cfg.ScanInterval/4, 2*time.Millisecond))
	}
}

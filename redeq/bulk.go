package redeq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/pool"
)

// MaxBulk bounds the ids of one bulk call (DeleteJobs, RequeueJobs,
// RequeueUnAckJobs, RequeueDeadJobs, PurgeDeadJobs).
const MaxBulk = 1000

// MaxSelect bounds the ids one Select returns: about 100 MB of ids at
// most, held by the caller.
const MaxSelect = 1_000_000

// selectPage is the List page Select reads at a time: a quarter of the
// largest, so that no read holds Redis long (bodies come with the jobs).
const selectPage = MaxListLimit / 4

// bulkWorkers is how many by-id scripts a bulk call keeps running at
// once: each is short (O(log n)), so a few in parallel hide the round
// trips without holding Redis for longer than one of them.
const bulkWorkers = 8

// BulkResult counts what a bulk call did with the ids it was given.
type BulkResult struct {
	// Done counts the jobs acted on.
	Done int
	// Skipped counts the ids that were no longer where the call looks
	// for them (requeued, taken, deleted or gone meanwhile).
	Skipped int
}

// RequeueUnAckJobs moves each job of ids still parked in un_ack back to
// its bucket, due after delay by the server's clock, as RequeueUnAck does
// for one. An id given twice counts once. It acts on these jobs only, so a
// caller that took a set of ids from List acts on that set, whatever is
// parked meanwhile.
//
// Every id is checked before anything is written: a bad topic or id is
// ErrInvalidJob, a negative delay or more than MaxBulk ids
// ErrInvalidArgument, ErrUnknownTopic for a topic nobody used. A Redis
// error ends the call with the counts of what was done before it.
func (c *Client) RequeueUnAckJobs(ctx context.Context, topic string, ids []string, delay time.Duration) (BulkResult, error) {
	return c.bulk(ctx, "requeue unack jobs", topic, ids, delay, func(ctx context.Context, id string, b int) error {
		return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, delay, false)
	})
}

// RequeueDeadJobs moves each job of ids still in the dead set back to its
// bucket, due after delay by the server's clock, with a fresh count of
// attempts and recoveries, as RequeueDead does for one. Ids and errors as
// RequeueUnAckJobs.
func (c *Client) RequeueDeadJobs(ctx context.Context, topic string, ids []string, delay time.Duration) (BulkResult, error) {
	return c.bulk(ctx, "requeue dead", topic, ids, delay, func(ctx context.Context, id string, b int) error {
		return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, delay, true)
	})
}

// PurgeDeadJobs removes each job of ids still in the dead set, for good,
// with its reason and last error. A job of ids that is not dead (requeued
// meanwhile, say) is left alone and counted as skipped; a job that died
// after the caller took its ids is not touched, which is what PurgeDead
// cannot promise. Ids and errors as RequeueUnAckJobs.
func (c *Client) PurgeDeadJobs(ctx context.Context, topic string, ids []string) (BulkResult, error) {
	return c.bulk(ctx, "purge dead", topic, ids, 0, func(ctx context.Context, id string, b int) error {
		_, err := ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead)
		return err
	})
}

// Filter narrows Select to the jobs that match every field set; the zero
// Filter matches every job.
type Filter struct {
	// ErrorContains matches jobs whose last handler error (LastError) or,
	// for dead jobs, whose Reason contains this text, case-sensitively.
	ErrorContains string
	// MinAttempt matches jobs with at least this many failed deliveries
	// (Attempt). 0 matches every job.
	MinAttempt int
	// DueBefore and DueAfter match jobs whose RunAt is before DueBefore
	// and not before DueAfter: the due time of a scheduled or ready job,
	// when an un_acked or dead job was parked. A ready job whose due time
	// is not known (back from a crashed consumer) matches no time bound.
	DueBefore, DueAfter time.Time
	// CreatedBefore matches jobs added before this time (CreatedAt).
	CreatedBefore time.Time
}

// IsZero reports whether f matches every job.
func (f Filter) IsZero() bool { return f == Filter{} }

// Match reports whether job matches f.
func (f Filter) Match(job *Job) bool {
	if f.ErrorContains != "" && !strings.Contains(job.LastError, f.ErrorContains) && !strings.Contains(job.Reason, f.ErrorContains) {
		return false
	}
	if job.Attempt < f.MinAttempt {
		return false
	}
	if !f.DueBefore.IsZero() || !f.DueAfter.IsZero() {
		if job.RunAt.IsZero() {
			return false
		}
		if !f.DueBefore.IsZero() && !job.RunAt.Before(f.DueBefore) {
			return false
		}
		if !f.DueAfter.IsZero() && job.RunAt.Before(f.DueAfter) {
			return false
		}
	}
	if !f.CreatedBefore.IsZero() && !job.CreatedAt.Before(f.CreatedBefore) {
		return false
	}
	return true
}

func (f Filter) check(what string) error {
	if f.MinAttempt < 0 {
		return invalidArg("%s: MinAttempt %d is negative", what, f.MinAttempt)
	}
	if !f.DueBefore.IsZero() && !f.DueAfter.IsZero() && !f.DueAfter.Before(f.DueBefore) {
		return invalidArg("%s: DueAfter %s is not before DueBefore %s, no job can match", what,
			f.DueAfter.UTC().Format(time.RFC3339Nano), f.DueBefore.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// ServerTime is the Redis server's clock, the one due times, CreatedAt and
// parking times follow, to the millisecond: a caller that narrows a
// Filter to "before now" (CreatedBefore) takes now from here, not from its
// own clock.
func (c *Client) ServerTime(ctx context.Context) (time.Time, error) {
	if ctx == nil {
		return time.Time{}, pool.ErrNilContext
	}
	t, err := c.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("read the server's clock: %w", err)
	}
	return t.Truncate(time.Millisecond), nil
}

// checkBulkState rejects the states a bulk call does not act on: jobs in
// flight belong to the consumer running them.
func checkBulkState(what string, state State) error {
	switch state {
	case StateScheduled, StateReady, StateUnAck, StateDead:
		return nil
	}
	return invalidArg("%s: state %q is not one of %s, %s, %s, %s", what, state, StateScheduled, StateReady, StateUnAck, StateDead)
}

// Select returns the ids of the jobs of topic in state that match f, in
// the order List pages them, at most limit of them (0 means MaxSelect):
// the fixed set of ids that DeleteJobs and RequeueJobs then act on, in
// batches of MaxBulk, whatever joins the state after. A job moving while
// Select pages is listed at most once.
//
// Cost: List pages of 250 jobs, one bucket script each, so Select holds
// Redis for no longer than one such read at a time; it reads every
// job of the state, bodies included, to match them.
//
// The states are those of the bulk calls: scheduled, ready, unack and
// dead (ErrInvalidArgument for inflight, for a bad filter or limit).
func (c *Client) Select(ctx context.Context, topic string, state State, f Filter, limit int) ([]string, error) {
	if ctx == nil {
		return nil, pool.ErrNilContext
	}
	what := "select " + string(state) + " jobs of topic " + topic
	if err := checkBulkState(what, state); err != nil {
		return nil, err
	}
	if err := f.check(what); err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = MaxSelect
	}
	if limit < 0 || limit > MaxSelect {
		return nil, invalidArg("%s: limit %d is out of range 1..%d", what, limit, MaxSelect)
	}
	var ids []string
	seen := map[string]bool{}
	cursor := ""
	for len(ids) < limit {
		page, err := c.List(ctx, topic, state, ListOptions{Limit: selectPage, Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, j := range page.Jobs {
			if len(ids) < limit && !seen[j.ID] && f.Match(j) {
				seen[j.ID] = true
				ids = append(ids, j.ID)
			}
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	return ids, nil
}

// DeleteJobs deletes each job of ids, which Select took from state. A
// scheduled or ready job is deleted wherever it waits by then, as Delete
// does (a job that fell due or was fetched meanwhile is still one of the
// jobs chosen); an un_acked or dead job only while it is still parked
// there (one requeued meanwhile is skipped). Ids gone are skipped and
// counted.
//
// Each id costs one short script (O(log n)), a few run at once: no call
// holds Redis for long, however many ids. A rerun with the same ids after
// an error is safe: the jobs deleted before it are skipped. Arguments are
// checked as RequeueUnAckJobs checks them, and the state as Select.
func (c *Client) DeleteJobs(ctx context.Context, topic string, state State, ids []string) (BulkResult, error) {
	what := "delete " + string(state) + " jobs"
	if err := checkBulkState(what, state); err != nil {
		return BulkResult{}, err
	}
	return c.bulk(ctx, what, topic, ids, 0, func(ctx context.Context, id string, b int) error {
		switch state {
		case StateUnAck:
			_, err := ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck)
			return err
		case StateDead:
			_, err := ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead)
			return err
		}
		_, err := c.store.Delete(ctx, topic, id, b)
		return err
	})
}

// RequeueJobs makes each job of ids, which Select took from state, due
// after delay by the server's clock; delay 0 runs them now. A scheduled
// or ready job gets the new due time while it still waits, as
// RescheduleIn gives it (its attempts unchanged); an un_acked job goes
// back to its bucket as RequeueUnAck sends it, a dead one as RequeueDead
// does (with a fresh count of attempts). A job that left (fetched, or
// requeued by someone else) is skipped and counted.
//
// Ready jobs are due already: RequeueJobs of ready jobs wants a delay
// (ErrInvalidArgument for 0). Costs and reruns as DeleteJobs: a rerun
// after an error skips the un_acked and dead jobs already requeued, and
// gives waiting jobs their due time again.
func (c *Client) RequeueJobs(ctx context.Context, topic string, state State, ids []string, delay time.Duration) (BulkResult, error) {
	what := "requeue " + string(state) + " jobs"
	if err := checkBulkState(what, state); err != nil {
		return BulkResult{}, err
	}
	if state == StateReady && delay == 0 {
		return BulkResult{}, invalidArg("%s of topic %q: ready jobs are due already, give a delay", what, topic)
	}
	return c.bulk(ctx, what, topic, ids, delay, func(ctx context.Context, id string, b int) error {
		switch state {
		case StateUnAck:
			return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, delay, false)
		case StateDead:
			return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, delay, true)
		}
		return bucket.RescheduleIn(ctx, c.rdb, c.cfg.Prefix, topic, id, b, delay)
	})
}

// bulk checks every argument, then runs do once for each distinct id with
// its bucket, bulkWorkers at a time. The first error other than a job
// gone or moved stops it: the ids not started are left, the counts say
// what was done.
func (c *Client) bulk(ctx context.Context, what, topic string, ids []string, delay time.Duration, do func(ctx context.Context, id string, b int) error) (BulkResult, error) {
	if ctx == nil {
		return BulkResult{}, pool.ErrNilContext
	}
	if err := pool.CheckTopic(topic); err != nil {
		return BulkResult{}, err
	}
	if len(ids) > MaxBulk {
		return BulkResult{}, invalidArg("%s of topic %q: %d ids, at most %d at once", what, topic, len(ids), MaxBulk)
	}
	if delay < 0 {
		return BulkResult{}, invalidArg("%s of topic %q: negative delay %v", what, topic, delay)
	}
	for _, id := range ids {
		if err := pool.CheckID(id); err != nil {
			return BulkResult{}, err
		}
	}
	var res BulkResult
	n, _, err := c.topicMeta(ctx, topic)
	if err != nil {
		return res, err
	}
	seen := make(map[string]bool, len(ids))
	todo := make(chan string, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			todo <- id
		}
	}
	close(todo)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range min(bulkWorkers, len(seen)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range todo {
				if ctx.Err() != nil {
					return
				}
				err := do(ctx, id, bucket.Of(id, n))
				mu.Lock()
				switch {
				case err == nil:
					res.Done++
				case errors.Is(err, ErrJobNotFound), errors.Is(err, ErrJobNotWaiting):
					res.Skipped++
				case first == nil:
					first = err
					stop()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = context.Cause(ctx)
	}
	return res, first
}

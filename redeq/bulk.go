package redeq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
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
	// Changed counts the ids given with a mark (Marks) whose job is
	// another stay of the id by now: deleted and added again, or requeued
	// and parked again since it was listed. They are left as they are.
	Changed int
}

// Mark names this stay of a job, as List and Get give it: for an
// un_acked or dead job its CreatedAt and when it was parked (RunAt), to
// the millisecond, "<created>:<parked>"; for a scheduled or ready job its
// CreatedAt, "<created>". A job of the same id deleted and added again,
// or (parked) requeued and parked again, has another mark, so a bulk call
// given the marks of the jobs it listed (Marks) leaves such a job alone.
// It is "" for a job in flight. Two stays of an id made within the same
// millisecond of the server's clock share a mark.
func (j *Job) Mark() string {
	switch j.State {
	case StateUnAck, StateDead:
		return ack.Mark(j.CreatedAt, j.RunAt)
	case StateScheduled, StateReady:
		return strconv.FormatInt(j.CreatedAt.UnixMilli(), 10)
	}
	return ""
}

// checkMark reports why mark is no mark of a job in state (parked or
// waiting); "" is none.
func checkMark(parked bool, mark string) error {
	if mark == "" {
		return nil
	}
	if parked || strings.Contains(mark, ":") {
		if !parked {
			return invalidArg("mark %q is a parked job's, not a waiting job's <created ms>", mark)
		}
		return ack.CheckMark(mark)
	}
	if ack.CheckMark(mark+":0") != nil {
		return invalidArg("mark %q is not <created ms>", mark)
	}
	return nil
}

// BulkOption tunes a bulk call.
type BulkOption func(*bulkOptions)

type bulkOptions struct {
	marks map[string]string
}

// Marks makes a bulk call act on a job of ids only while it is the stay
// marks names for its id (Job.Mark, or what SelectMarks returns): one
// deleted and added again, or requeued and parked again, since it was
// listed is left and counted as Changed. An id without
// a mark in marks is acted on whichever stay it names. A mark that is not
// one Mark makes is ErrInvalidArgument, before anything is written.
func Marks(marks map[string]string) BulkOption {
	return func(o *bulkOptions) { o.marks = marks }
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
//
// With Marks, a job of ids deleted and added again, or requeued and parked
// again, after the caller listed it is left and counted as Changed.
func (c *Client) RequeueUnAckJobs(ctx context.Context, topic string, ids []string, delay time.Duration, opts ...BulkOption) (BulkResult, error) {
	return c.bulk(ctx, "requeue unack jobs", topic, true, ids, delay, opts, func(ctx context.Context, id string, b int, mark string) error {
		return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, delay, false, mark)
	})
}

// RequeueDeadJobs moves each job of ids still in the dead set back to its
// bucket, due after delay by the server's clock, with a fresh count of
// attempts and recoveries, as RequeueDead does for one. Ids and errors as
// RequeueUnAckJobs, Marks too.
func (c *Client) RequeueDeadJobs(ctx context.Context, topic string, ids []string, delay time.Duration, opts ...BulkOption) (BulkResult, error) {
	return c.bulk(ctx, "requeue dead", topic, true, ids, delay, opts, func(ctx context.Context, id string, b int, mark string) error {
		return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, delay, true, mark)
	})
}

// PurgeDeadJobs removes each job of ids still in the dead set, for good,
// with its reason and last error. A job of ids that is not dead (requeued
// meanwhile, say) is left alone and counted as skipped; a job that died
// after the caller took its ids is not touched, which is what PurgeDead
// cannot promise; with Marks, neither is a job of ids that died again (or
// was added again and died) since. Ids and errors as RequeueUnAckJobs.
func (c *Client) PurgeDeadJobs(ctx context.Context, topic string, ids []string, opts ...BulkOption) (BulkResult, error) {
	return c.bulk(ctx, "purge dead", topic, true, ids, 0, opts, func(ctx context.Context, id string, b int, mark string) error {
		_, err := ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, mark)
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
	t, err := c.timeOn(ctx, keys.Alive(c.cfg.Prefix))
	if err != nil {
		return time.Time{}, fmt.Errorf("read the server's clock: %w", err)
	}
	return t.Truncate(time.Millisecond), nil
}

// timeOn reads the server's clock on the node that holds key (on a Redis
// Cluster its master; go-redis would send a keyless TIME to any node), so
// that a call reading key and the clock waits on that node alone, not on
// a hung master it does not otherwise need.
func (c *Client) timeOn(ctx context.Context, key string) (time.Time, error) {
	node, err := rdb.On(ctx, c.rdb, key)
	if err != nil {
		return time.Time{}, err
	}
	return node.Time(ctx).Result()
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
// Redis for no longer than one such read at a time; it reads the fields
// of every job of the state to match them, not their bodies or headers
// (ListOptions.NoBody), so big jobs cost it no more than small ones.
//
// The states are those of the bulk calls: scheduled, ready, unack and
// dead (ErrInvalidArgument for inflight, for a bad filter or limit).
func (c *Client) Select(ctx context.Context, topic string, state State, f Filter, limit int) ([]string, error) {
	ids, _, err := c.SelectMarks(ctx, topic, state, f, limit)
	return ids, err
}

// SelectMarks is Select that also returns the Mark of each job it
// selects, by id: given to the bulk calls with Marks, they act on the jobs
// Select saw, not on a later stay of one of their ids.
func (c *Client) SelectMarks(ctx context.Context, topic string, state State, f Filter, limit int) ([]string, map[string]string, error) {
	if ctx == nil {
		return nil, nil, pool.ErrNilContext
	}
	what := "select " + string(state) + " jobs of topic " + topic
	if err := checkBulkState(what, state); err != nil {
		return nil, nil, err
	}
	if err := f.check(what); err != nil {
		return nil, nil, err
	}
	if limit == 0 {
		limit = MaxSelect
	}
	if limit < 0 || limit > MaxSelect {
		return nil, nil, invalidArg("%s: limit %d is out of range 1..%d", what, limit, MaxSelect)
	}
	var ids []string
	marks := map[string]string{}
	seen := map[string]bool{}
	cursor := ""
	for len(ids) < limit {
		page, err := c.List(ctx, topic, state, ListOptions{Limit: selectPage, Cursor: cursor, NoBody: true})
		if err != nil {
			return nil, nil, err
		}
		for _, j := range page.Jobs {
			if len(ids) < limit && !seen[j.ID] && f.Match(j) {
				seen[j.ID] = true
				ids = append(ids, j.ID)
				if m := j.Mark(); m != "" {
					marks[j.ID] = m
				}
			}
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	return ids, marks, nil
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
//
// With Marks (from SelectMarks), a job of ids deleted and added again, or
// (un_acked or dead) requeued and parked again, since Select is left and
// counted as Changed.
func (c *Client) DeleteJobs(ctx context.Context, topic string, state State, ids []string, opts ...BulkOption) (BulkResult, error) {
	what := "delete " + string(state) + " jobs"
	if err := checkBulkState(what, state); err != nil {
		return BulkResult{}, err
	}
	return c.bulk(ctx, what, topic, state == StateUnAck || state == StateDead, ids, 0, opts, func(ctx context.Context, id string, b int, mark string) error {
		switch state {
		case StateUnAck:
			_, err := ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, mark)
			return err
		case StateDead:
			_, err := ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, mark)
			return err
		}
		_, err := c.store.DeleteCreated(ctx, topic, id, b, mark)
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
// gives waiting jobs their due time again. Marks as DeleteJobs.
func (c *Client) RequeueJobs(ctx context.Context, topic string, state State, ids []string, delay time.Duration, opts ...BulkOption) (BulkResult, error) {
	what := "requeue " + string(state) + " jobs"
	if err := checkBulkState(what, state); err != nil {
		return BulkResult{}, err
	}
	if state == StateReady && delay == 0 {
		return BulkResult{}, invalidArg("%s of topic %q: ready jobs are due already, give a delay", what, topic)
	}
	return c.bulk(ctx, what, topic, state == StateUnAck || state == StateDead, ids, delay, opts, func(ctx context.Context, id string, b int, mark string) error {
		switch state {
		case StateUnAck:
			return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, delay, false, mark)
		case StateDead:
			return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, delay, true, mark)
		}
		return bucket.RescheduleInCreated(ctx, c.rdb, c.cfg.Prefix, topic, id, b, delay, mark)
	})
}

// bulk checks every argument, then runs do once for each distinct id with
// its bucket and its mark ("" for none), bulkWorkers at a time. The first error other than a job
// gone or moved stops it: the ids not started are left, the counts say
// what was done.
func (c *Client) bulk(ctx context.Context, what, topic string, parked bool, ids []string, delay time.Duration, opts []BulkOption, do func(ctx context.Context, id string, b int, mark string) error) (BulkResult, error) {
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
	var o bulkOptions
	for _, opt := range opts {
		opt(&o)
	}
	for _, id := range ids {
		if err := pool.CheckID(id); err != nil {
			return BulkResult{}, err
		}
		if err := checkMark(parked, o.marks[id]); err != nil {
			return BulkResult{}, fmt.Errorf("%s of topic %q: job %q: %w", what, topic, id, err)
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
				err := do(ctx, id, bucket.Of(id, n), o.marks[id])
				mu.Lock()
				switch {
				case err == nil:
					res.Done++
				case errors.Is(err, ErrJobChanged):
					res.Changed++
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

package redeq

import (
	"context"
	"errors"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/pool"
)

// MaxBulk bounds the ids of one bulk call (RequeueUnAckJobs,
// RequeueDeadJobs, PurgeDeadJobs).
const MaxBulk = 1000

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
	return c.bulk(ctx, "requeue un_ack", topic, ids, delay, func(id string, b int) error {
		return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, delay, false)
	})
}

// RequeueDeadJobs moves each job of ids still in the dead set back to its
// bucket, due after delay by the server's clock, with a fresh count of
// attempts and recoveries, as RequeueDead does for one. Ids and errors as
// RequeueUnAckJobs.
func (c *Client) RequeueDeadJobs(ctx context.Context, topic string, ids []string, delay time.Duration) (BulkResult, error) {
	return c.bulk(ctx, "requeue dead", topic, ids, delay, func(id string, b int) error {
		return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, delay, true)
	})
}

// PurgeDeadJobs removes each job of ids still in the dead set, for good,
// with its reason and last error. A job of ids that is not dead (requeued
// meanwhile, say) is left alone and counted as skipped; a job that died
// after the caller took its ids is not touched, which is what PurgeDead
// cannot promise. Ids and errors as RequeueUnAckJobs.
func (c *Client) PurgeDeadJobs(ctx context.Context, topic string, ids []string) (BulkResult, error) {
	return c.bulk(ctx, "purge dead", topic, ids, 0, func(id string, b int) error {
		_, err := ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead)
		return err
	})
}

// bulk checks every argument, then runs do once for each distinct id with
// its bucket.
func (c *Client) bulk(ctx context.Context, what, topic string, ids []string, delay time.Duration, do func(id string, b int) error) (BulkResult, error) {
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
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		err := do(id, bucket.Of(id, n))
		switch {
		case err == nil:
			res.Done++
		case errors.Is(err, ErrJobNotFound), errors.Is(err, ErrJobNotWaiting):
			res.Skipped++
		default:
			return res, err
		}
	}
	return res, nil
}

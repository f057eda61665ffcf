package redeq

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/pool"
)

// Stats counts the jobs of a topic by where they wait.
type Stats struct {
	Pool      int64 // every job the topic holds
	Scheduled int64 // in a bucket, not due yet (or due and not yet moved)
	Ready     int64 // due, waiting for a consumer
	InFlight  int64 // held by a consumer
	UnAck     int64 // handled without ack or rejoin
	Dead      int64 // retries ran out
	Consumers int64 // consumers that heartbeat for the topic
	Buckets   int   // the topic's recorded bucket count
	Paused    bool  // listeners do not fetch (see Pause)
}

// Stats counts the jobs of topic in one pipelined round trip (after two
// that read its meta and list its consumers). ErrUnknownTopic for a topic
// nobody used.
func (c *Client) Stats(ctx context.Context, topic string) (Stats, error) {
	if ctx == nil {
		return Stats{}, pool.ErrNilContext
	}
	if err := pool.CheckTopic(topic); err != nil {
		return Stats{}, err
	}
	n, paused, err := c.topicMeta(ctx, topic) // ErrUnknownTopic for a topic nobody used
	if err != nil {
		return Stats{}, err
	}
	cids, err := c.rdb.ZRange(ctx, keys.ForTopic(c.cfg.Prefix, topic).Consumers(), 0, -1).Result()
	if err != nil {
		return Stats{}, fmt.Errorf("stats %s: %w", topic, err)
	}
	type row struct{ pool, sched, ready, unack, dead *redis.IntCmd }
	rows := make([]row, n)
	var inflight []*redis.IntCmd
	pipe := c.rdb.Pipeline()
	for b := range n {
		k := keys.ForBucket(c.cfg.Prefix, topic, b)
		rows[b] = row{pipe.HLen(ctx, k.Pool()), pipe.ZCard(ctx, k.Scheduled()), pipe.LLen(ctx, k.Ready()),
			pipe.ZCard(ctx, k.UnAck()), pipe.ZCard(ctx, k.Dead())}
		for _, cid := range cids {
			inflight = append(inflight, pipe.ZCard(ctx, k.InFlight(cid)))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Stats{}, fmt.Errorf("stats %s: %w", topic, err)
	}
	st := Stats{Consumers: int64(len(cids)), Buckets: n, Paused: paused}
	for _, r := range rows {
		st.Pool += r.pool.Val()
		st.Scheduled += r.sched.Val()
		st.Ready += r.ready.Val()
		st.UnAck += r.unack.Val()
		st.Dead += r.dead.Val()
	}
	for _, l := range inflight {
		st.InFlight += l.Val()
	}
	return st, nil
}

func (c *Client) topicBuckets(ctx context.Context, topic string) (int, error) {
	if ctx == nil {
		return 0, pool.ErrNilContext
	}
	if err := pool.CheckTopic(topic); err != nil {
		return 0, err
	}
	return c.reg.Count(ctx, topic, c.cfg.Concurrency)
}

// UnAcked lists at most limit (1..10,000) jobs of topic parked in un_ack,
// oldest first, each with RunAt set to when it was parked.
func (c *Client) UnAcked(ctx context.Context, topic string, limit int) ([]*Job, error) {
	n, err := c.topicBuckets(ctx, topic)
	if err != nil {
		return nil, err
	}
	return publicJobsResult(ack.List(ctx, c.rdb, c.cfg.Prefix, topic, n, ack.UnAck, limit))
}

// ProcessUnAck removes the job id from un_ack and from the pool, and
// returns it, for a caller that finishes it by hand. ErrJobNotFound when
// absent, ErrJobNotWaiting when it is not in un_ack.
func (c *Client) ProcessUnAck(ctx context.Context, topic, id string) (*Job, error) {
	if err := checkRef(ctx, topic, id); err != nil {
		return nil, err
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return nil, err
	}
	return publicResult(ack.Take(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, ""))
}

// RequeueUnAck moves the job id from un_ack back to its bucket, due after
// delay, its attempts unchanged.
func (c *Client) RequeueUnAck(ctx context.Context, topic, id string, delay time.Duration) error {
	if err := checkRef(ctx, topic, id); err != nil {
		return err
	}
	if delay < 0 {
		return fmt.Errorf("%w: requeue job %q of topic %q: negative delay %v", ErrInvalidArgument, id, topic, delay)
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return err
	}
	return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.UnAck, delay, false, "")
}

// DeadJobs lists at most limit (1..10,000) jobs of topic in the dead set,
// oldest first, each with RunAt set to when its retries ran out.
func (c *Client) DeadJobs(ctx context.Context, topic string, limit int) ([]*Job, error) {
	n, err := c.topicBuckets(ctx, topic)
	if err != nil {
		return nil, err
	}
	return publicJobsResult(ack.List(ctx, c.rdb, c.cfg.Prefix, topic, n, ack.Dead, limit))
}

// RequeueDead moves the job id from the dead set back to its bucket, due
// after delay, with a fresh count of attempts and recoveries.
func (c *Client) RequeueDead(ctx context.Context, topic, id string, delay time.Duration) error {
	if err := checkRef(ctx, topic, id); err != nil {
		return err
	}
	if delay < 0 {
		return fmt.Errorf("%w: requeue job %q of topic %q: negative delay %v", ErrInvalidArgument, id, topic, delay)
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return err
	}
	return ack.Requeue(ctx, c.rdb, c.cfg.Prefix, topic, id, b, ack.Dead, delay, true, "")
}

// PurgeDead removes every job of topic's dead set, for good, and returns
// how many it removed. It works through the buckets in script calls of at
// most 500 jobs each; a call rerun after a lost reply does not count its
// jobs twice. Jobs that die while it runs may be removed too.
// ErrUnknownTopic for a topic nobody used.
func (c *Client) PurgeDead(ctx context.Context, topic string) (int, error) {
	if ctx == nil {
		return 0, pool.ErrNilContext
	}
	if err := pool.CheckTopic(topic); err != nil {
		return 0, err
	}
	n, _, err := c.topicMeta(ctx, topic)
	if err != nil {
		return 0, err
	}
	total := 0
	for b := range n {
		got, err := ack.PurgeDead(ctx, c.rdb, c.cfg.Prefix, topic, b)
		total += got
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

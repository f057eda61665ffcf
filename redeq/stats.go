package redeq

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
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
	// Limits are the global limits the topic's listeners last started
	// with (WithMaxRunning, WithRateLimit, WithLimitKey); zero for none.
	Limits Limits
	// Running counts the deliveries that hold a slot of the limits: the
	// jobs of the topic running under them, across every client.
	Running int64
	// Waiting counts the due jobs held back by a limit: per key value,
	// those set aside for a value at its limit (not counted in Ready);
	// topic-wide, the Ready jobs while Running is at MaxRunning or the
	// rate's window is full (a fetch found it so; until its oldest start
	// leaves it), counted in Ready too; under a per-key MaxRunning, the
	// Ready jobs too while slots counted per another header's values
	// hold every fetch back (a limit key being changed). Per key
	// value it is exact, as List(ready) and Get: a job taken out of the
	// topic while set aside (Delete, Reschedule, Put, Update, a bulk
	// action) is no longer counted, though its reference stays in its
	// value's list until a fetch sweeps it. Stats checks the state of at
	// most 1,000 set-aside ids per key value and 4,000 per bucket (in
	// one read-only script per bucket); ids beyond that are counted as referenced, stale ones
	// included. A job put back as due meanwhile (Put, Reschedule to now)
	// is counted in Ready too until a fetch reads it.
	Waiting int64
}

// Limits are a topic's global limits as Stats reports them.
type Limits struct {
	MaxRunning int           // at most this many running at once; 0 none
	Rate       int           // at most this many started per Per; 0 none
	Per        time.Duration // the rate's period
	Key        string        // the header whose values the limits apply to; "" the topic
}

// Set reports whether any limit is set.
func (l Limits) Set() bool { return l.MaxRunning > 0 || l.Rate > 0 }

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
	type row struct {
		pool, sched, ready, unack, dead, running, rateFull, keyed *redis.IntCmd
		keyHeader                                                 *redis.StringCmd
	}
	rows := make([]row, n)
	var inflight []*redis.IntCmd
	var parked []*redis.StringSliceCmd
	pipe := c.rdb.Pipeline()
	spec := pipe.HGet(ctx, keys.ForTopic(c.cfg.Prefix, topic).Meta(), keys.LimitsField)
	for b := range n {
		k := keys.ForBucket(c.cfg.Prefix, topic, b)
		rows[b] = row{pipe.HLen(ctx, k.Pool()), pipe.ZCard(ctx, k.Scheduled()), pipe.LLen(ctx, k.Ready()),
			pipe.ZCard(ctx, k.UnAck()), pipe.ZCard(ctx, k.Dead()), pipe.ZCard(ctx, k.LimitRunning()),
			pipe.Exists(ctx, k.LimitRateFull()), pipe.HLen(ctx, k.LimitKeyOf()), pipe.HGet(ctx, k.State(), keys.LimitKeyHeaderField)}
		parked = append(parked, pipe.ZRange(ctx, k.LimitParked(), 0, maxParkedValues-1))
		for _, cid := range cids {
			inflight = append(inflight, pipe.ZCard(ctx, k.InFlight(cid)))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, fmt.Errorf("stats %s: %w", topic, err)
	}
	st := Stats{Consumers: int64(len(cids)), Buckets: n, Paused: paused}
	if s, err := spec.Result(); err == nil {
		if l, err := ready.ParseLimits(s); err == nil {
			st.Limits = Limits(l)
		}
	}
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
	rateFull, otherKey := false, false
	for _, r := range rows {
		st.Running += r.running.Val()
		rateFull = rateFull || r.rateFull.Val() > 0
		// Slots held per value of another header hold back every fetch
		// of a per-key MaxRunning (limits.lua, limit_keyed).
		otherKey = otherKey || r.keyed.Val() > 0 && r.keyHeader.Val() != "" && r.keyHeader.Val() != st.Limits.Key
	}
	waiting, err := c.parkedJobs(ctx, topic, parked)
	if err != nil {
		return Stats{}, fmt.Errorf("stats %s: %w", topic, err)
	}
	st.Waiting = waiting
	switch {
	case st.Limits.Key == "" && (rateFull || st.Limits.MaxRunning > 0 && st.Running >= int64(st.Limits.MaxRunning)),
		st.Limits.Key != "" && st.Limits.MaxRunning > 0 && otherKey:
		st.Waiting += st.Ready
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

// maxParkedValues bounds the key values whose set-aside jobs Stats counts,
// per bucket.
const maxParkedValues = 1000

// Stats checks the state of at most parkedCheckPerValue set-aside ids per
// key value, and parkedCheckPerBucket per bucket; it counts any beyond
// unchecked (stale entries included).
const (
	parkedCheckPerValue  = 1000
	parkedCheckPerBucket = 4000
)

//go:embed stats_parked.lua
var statsParkedSource string

var statsParkedScript = script.New(statsParkedSource)

// parkedJobs counts the jobs set aside for the key values of parked (per
// bucket, as Stats read them) whose state still says ready: one more
// round trip when any is, one read-only script per bucket
// (stats_parked.lua).
func (c *Client) parkedJobs(ctx context.Context, topic string, parked []*redis.StringSliceCmd) (int64, error) {
	var calls []rdb.Call
	for b, vals := range parked {
		if len(vals.Val()) == 0 {
			continue
		}
		k := keys.ForBucket(c.cfg.Prefix, topic, b)
		ks := []string{k.State()}
		for _, v := range vals.Val() {
			ks = append(ks, k.LimitPark(v))
		}
		calls = append(calls, rdb.Call{Keys: ks, Args: []any{parkedCheckPerValue, parkedCheckPerBucket}})
	}
	var n int64
	for _, cmd := range rdb.RunPipelined(ctx, c.rdb, statsParkedScript, calls) {
		if err := cmd.Err(); err != nil {
			return 0, err
		}
		v, err := cmd.Int64Slice()
		if err != nil || len(v) != 2 {
			return 0, fmt.Errorf("count parked jobs: unexpected reply %v", cmd.Val())
		}
		n += v[0]
	}
	return n, nil
}

package redeq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/pool"
)

// WithRetention keeps the record of each job the listener acks readable
// for d (at most config.MaxRetention, 30 days), then it expires: Get
// returns it with State StateDone, FinishedAt and the Consumer that acked
// it (with its Failures), and List(StateDone) lists it.
// At most config's RetentionMax records are kept per topic (10,000 by
// default), the oldest going first. An ack that also rejoins (Ack and
// Rejoin) re-adds the job, which leaves no record. d 0 keeps the
// config's Retention; a negative d keeps none for this listener even when
// the config has one. Retention costs an ack nothing when off; when on,
// each settle of a batch of outcomes writes the records in the same
// script, with no extra round trip.
func WithRetention(d time.Duration) ListenerOption {
	return func(s *listenerSettings) {
		if d > config.MaxRetention {
			s.err = fmt.Errorf("retention %v is more than %v", d, config.MaxRetention)
			return
		}
		if d < 0 {
			d = -1
		}
		s.opts.Retention = d
	}
}

// getDone returns the done record of job id of topic in bucket b, or
// ErrJobNotFound.
func (c *Client) getDone(ctx context.Context, topic, id string, b int) (*Job, error) {
	return publicResult(c.store.Done(ctx, topic, id, b))
}

// markSilent sets ConsumerSilentSince on the jobs in flight whose consumer
// is silent for longer than its own ConsumerTimeout (this client's when
// it recorded none): the consumer's last heartbeat. One round trip of a
// pipeline to the alive set's node: its clock, and the heartbeat and
// timeout of each consumer named (on a cluster, TIME goes there too, not
// to a node that may not answer).
func (c *Client) markSilent(ctx context.Context, jobs []*Job) error {
	var cids []string
	seen := map[string]bool{}
	for _, j := range jobs {
		if j.State == StateInFlight && j.Consumer != "" && !seen[j.Consumer] {
			seen[j.Consumer] = true
			cids = append(cids, j.Consumer)
		}
	}
	if len(cids) == 0 {
		return nil
	}
	fields := make([]string, len(cids))
	for i, cid := range cids {
		fields[i] = keys.AliveTimeout(cid)
	}
	node, err := rdb.On(ctx, c.rdb, keys.Alive(c.cfg.Prefix))
	if err != nil {
		return fmt.Errorf("consumers of jobs in flight: %w", err)
	}
	pipe := node.Pipeline()
	now := pipe.Time(ctx)
	beats := pipe.ZMScore(ctx, keys.Alive(c.cfg.Prefix), cids...)
	timeouts := pipe.HMGet(ctx, keys.AliveTopics(c.cfg.Prefix), fields...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("consumers of jobs in flight: %w", err)
	}
	silent := map[string]time.Time{}
	tv := timeouts.Val()
	for i, cid := range cids {
		score := beats.Val()[i]
		if score == 0 {
			continue // no heartbeat recorded: forgotten, its jobs recovered or on their way
		}
		timeout := c.cfg.ConsumerTimeout
		if s, ok := tv[i].(string); ok {
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > 0 {
				timeout = time.Duration(ms) * time.Millisecond
			}
		}
		beat := time.UnixMilli(int64(score))
		if now.Val().Sub(beat) > timeout {
			silent[cid] = beat
		}
	}
	for _, j := range jobs {
		if at, ok := silent[j.Consumer]; ok && j.State == StateInFlight {
			j.ConsumerSilentSince = at
		}
	}
	return nil
}

// getTraced is Get's read: the job where it waits, its consumer's silence
// when in flight, else its done record.
func (c *Client) getTraced(ctx context.Context, topic, id string, b int) (*Job, error) {
	j, err := publicResult(c.store.Get(ctx, topic, id, b))
	if errors.Is(err, pool.ErrJobNotFound) {
		if d, derr := c.getDone(ctx, topic, id, b); derr == nil || !errors.Is(derr, pool.ErrJobNotFound) {
			return d, derr
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if err := c.markSilent(ctx, []*Job{j}); err != nil {
		return nil, fmt.Errorf("get job %q of topic %q: %w", id, topic, err)
	}
	return j, nil
}

package redeq

import (
	"context"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/ready"
)

// Pause stops every client's listeners from fetching jobs of topic until
// Resume. It is in force when Pause returns: from then on no fetch takes a
// job of the topic, whichever client runs it and whatever it knows. Jobs
// already in flight run to their end, and their outcomes apply (a retry
// waits in its bucket, then in the ready list); due jobs keep moving to
// the ready list, where they wait; Add, Delete, Update and the other calls
// by id work as usual. Broadcast jobs are not fetched, and are published
// when due all the same.
//
// The flag is kept in Redis (Stats and Topics report it), so it outlives
// the clients and holds for clients started later. Pauses and resumes of
// one topic take effect in the order they reached Redis. ErrUnknownTopic
// when nobody ever used topic. After an error (a node unreachable), some
// buckets may not be paused: call Pause again.
func (c *Client) Pause(ctx context.Context, topic string) error {
	return c.setPaused(ctx, topic, true)
}

// Resume undoes Pause: once it returns, listeners fetch the topic's jobs
// again (they are woken at once). Resuming a topic that is not paused does
// nothing. ErrUnknownTopic when nobody ever used topic.
func (c *Client) Resume(ctx context.Context, topic string) error {
	return c.setPaused(ctx, topic, false)
}

func (c *Client) setPaused(ctx context.Context, topic string, paused bool) error {
	if ctx == nil {
		return invalidArg("nil context")
	}
	if err := config.CheckName("topic", topic); err != nil {
		return invalidArg("%v", err)
	}
	n, _, err := c.topicMeta(ctx, topic)
	if err != nil {
		return err
	}
	return ready.SetPaused(ctx, c.rdb, c.cfg.Prefix, topic, n, paused)
}

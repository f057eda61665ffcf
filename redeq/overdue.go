package redeq

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

//go:embed overdue.lua
var overdueSource string

var overdueScript = script.New(overdueSource)

// overdueLook is how many ids at the head of each ready list
// OldestOverdue looks at: the list is in due order but for the jobs that
// crash recovery or a rollback put back, whose due time is not kept.
const overdueLook = 16

// OldestOverdue returns, for each of topics, how long ago the oldest job
// that is due and not started fell due: a job in its bucket whose due time
// has passed (not moved yet), or one in the ready list (moved, not
// fetched). It is 0 when no job waits past its due time; a topic nobody
// used is left out. The time is the Redis server's. The cost is bounded:
// two round trips whatever the number of topics (their meta, then one
// read-only script per bucket, pipelined), each script reading the head of
// the bucket's scheduled set and at most overdueLook ready ids.
func (c *Client) OldestOverdue(ctx context.Context, topics ...string) (map[string]time.Duration, error) {
	if ctx == nil {
		return nil, pool.ErrNilContext
	}
	for _, t := range topics {
		if err := pool.CheckTopic(t); err != nil {
			return nil, err
		}
	}
	out := make(map[string]time.Duration, len(topics))
	if len(topics) == 0 {
		return out, nil
	}
	pipe := c.rdb.Pipeline()
	metas := make([]*redis.SliceCmd, len(topics))
	for i, t := range topics {
		metas[i] = pipe.HMGet(ctx, keys.ForTopic(c.cfg.Prefix, t).Meta(), "buckets", "paused")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("read oldest overdue: %w", err)
	}
	var calls []rdb.Call
	var owner []string // topic of each call
	for i, t := range topics {
		n, _, err := parseMeta(t, metas[i].Val())
		if err != nil {
			if errors.Is(err, ErrUnknownTopic) {
				continue
			}
			return nil, err
		}
		out[t] = 0
		for b := range n {
			k := keys.ForBucket(c.cfg.Prefix, t, b)
			calls = append(calls, rdb.Call{Keys: []string{k.Scheduled(), k.Ready(), k.State(), k.Due()}, Args: []any{overdueLook}})
			owner = append(owner, t)
		}
	}
	if len(calls) == 0 {
		return out, nil
	}
	for i, cmd := range rdb.RunPipelined(ctx, c.rdb, overdueScript, calls) {
		if err := cmd.Err(); err != nil {
			return nil, fmt.Errorf("read oldest overdue of topic %q: %w", owner[i], err)
		}
		v, err := rdb.Slice(cmd.Val())
		if err != nil || len(v) != 2 {
			return nil, fmt.Errorf("read oldest overdue of topic %q: unexpected reply %v", owner[i], cmd.Val())
		}
		now, _ := v[0].(int64)
		due, ok := v[1].(int64)
		if !ok {
			continue // false: nothing due in this bucket
		}
		if d := time.Duration(now-due) * time.Millisecond; d > out[owner[i]] {
			out[owner[i]] = d
		}
	}
	return out, nil
}

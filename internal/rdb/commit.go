package rdb

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxCommit bounds the calls one pipeline of a Committer carries.
const maxCommit = 256

// Committer runs one script for many concurrent callers, sending the calls
// that arrive while a round trip is in flight together in the next
// pipeline (group commit). A lone caller pays one plain EVALSHA; sixteen
// concurrent callers share round trips instead of queueing for connections.
// It starts no goroutine: the first caller to find it idle leads, and hands
// the lead to a waiting caller when its own call is done.
type Committer struct {
	rdb    redis.UniversalClient
	script *redis.Script

	mu    sync.Mutex
	queue []*request
	busy  bool
}

type request struct {
	ctx  context.Context
	call Call
	val  any
	err  error
	lead bool
	done chan struct{}
}

// NewCommitter returns a Committer of script over c.
func NewCommitter(c redis.UniversalClient, script *redis.Script) *Committer {
	return &Committer{rdb: c, script: script}
}

// Do runs call and returns the script's reply. A call that shares a
// pipeline runs under go-redis's timeouts rather than ctx, since it also
// carries other callers' calls.
func (c *Committer) Do(ctx context.Context, call Call) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &request{ctx: ctx, call: call, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if c.busy {
		c.mu.Unlock()
		<-r.done
		if !r.lead {
			return r.val, r.err
		}
		c.mu.Lock() // handed the lead; r is first in the queue
	}
	c.busy = true
	for {
		n := min(len(c.queue), maxCommit)
		batch := c.queue[:n:n]
		c.queue = c.queue[n:]
		c.mu.Unlock()
		c.run(batch, r)
		c.mu.Lock()
		mine := false
		for _, q := range batch {
			mine = mine || q == r
		}
		if len(c.queue) == 0 {
			c.busy = false
			c.mu.Unlock()
			return r.val, r.err
		}
		if mine {
			// Done with our own call: let a waiting caller lead the rest.
			next := c.queue[0]
			next.lead = true
			c.mu.Unlock()
			close(next.done)
			return r.val, r.err
		}
	}
}

// run sends batch and wakes every caller in it but the leader.
func (c *Committer) run(batch []*request, leader *request) {
	if len(batch) == 1 {
		q := batch[0]
		q.val, q.err = c.script.Run(q.ctx, c.rdb, q.call.Keys, q.call.Args...).Result()
	} else {
		calls := make([]Call, len(batch))
		for i, q := range batch {
			calls[i] = q.call
		}
		cmds := RunPipelined(context.WithoutCancel(leader.ctx), c.rdb, c.script, calls)
		for i, q := range batch {
			q.val, q.err = cmds[i].Result()
		}
	}
	for _, q := range batch {
		if q != leader {
			close(q.done)
		}
	}
}

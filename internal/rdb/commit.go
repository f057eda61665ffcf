package rdb

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// maxCommit bounds the calls one pipeline of a Committer carries.
	maxCommit = 256
	// maxInFlight bounds the round trips a Committer has under way at
	// once. With one, client and server take turns: the server waits while
	// the client decodes replies and encodes the next pipeline. Two keep
	// both busy (one pipeline runs while the next forms), and batch more
	// than four would, which matters on a server short of CPU.
	maxInFlight = 2
	// linger is how long a round trip's goroutine waits for the next
	// round trip before it ends. A caller that adds in a loop with a ctx
	// that can end calls again within tens of µs: the goroutine that ran
	// its last call runs the next, with the stack it already grew, where a
	// new goroutine per call cost the caller twice the CPU per Add (stack
	// growth and thread wake-ups). It ends soon after the last call, so an
	// idle Committer holds no goroutine.
	linger = time.Millisecond
)

// Committer runs one script for many concurrent callers (group commit).
// A caller that finds fewer than maxInFlight round trips under way starts
// its own, a plain EVALSHA; the others queue, and each round trip that
// ends takes the whole queue (up to maxCommit calls, oldest first) into
// one pipeline. Every caller gets its own command's reply or error, and
// returns when its ctx ends even if its call is still on the wire.
//
// A round trip runs on a goroutine of its own, except a lone call that
// returns in time on its caller's goroutine, which its caller runs
// itself: its ctx can never end, or the client ends the call at the ctx's
// deadline (CutsAtDeadline) and the ctx has one. The goroutine of a
// round trip that ended waits up to linger for the next one. Wait tells
// when no round trip is left.
type Committer struct {
	rdb     redis.UniversalClient
	script  *redis.Script
	join    bool       // the script takes many calls in one run (NewJoiningCommitter)
	runKey  RunKey     // a run's op key and number; its round trips then run under Bounded (window.go)
	shared  int        // Args the joined calls have in common
	durable Durability // see durable.go; off by default
	bounded bool       // go-redis's timeouts bound each attempt (TimeoutsSet)
	cuts    bool       // go-redis ends each attempt at its ctx's deadline (CutsAtDeadline)

	mu       sync.Mutex
	queue    []*request
	inFlight int           // round trips under way
	idle     chan struct{} // made by Wait, closed when inFlight drops to 0

	// handoff gives a round trip's batch to a goroutine that ran one and
	// waits for the next (unbuffered: a send succeeds only when one waits).
	handoff chan []*request
}

type request struct {
	ctx  context.Context
	call Call
	val  any
	err  error
	done chan struct{} // closed once val and err are set
}

// NewCommitter returns a Committer of script over c.
func NewCommitter(c redis.UniversalClient, script *redis.Script) *Committer {
	return &Committer{rdb: c, script: script, bounded: TimeoutsSet(c), cuts: CutsAtDeadline(c), handoff: make(chan []*request)}
}

// runOne runs call alone: with a joining script, a run of one.
// runOne runs one call, waiting for replicas when asked.
func (c *Committer) runOne(ctx context.Context, call Call) (any, error) {
	if c.runKey != nil {
		var cancel context.CancelFunc
		ctx, cancel = Bounded(ctx, c.durable.Window())
		defer cancel()
	}
	if !c.join {
		return Run(ctx, c.rdb, c.durable, c.script, call.Keys, call.Args...).Result()
	}
	keys, args := call.Keys, call.Args
	if c.runKey != nil {
		key, seq, release := c.runKey(keys)
		defer release()
		keys = append(slices.Clip(keys), key)
		args = make([]any, 0, len(call.Args)+1)
		args = append(append(append(args, call.Args[:c.shared]...), seq), call.Args[c.shared:]...)
	}
	cmd := Run(ctx, c.rdb, c.durable, c.script, keys, args...)
	vals, errs := make([]any, 1), make([]error, 1)
	split(cmd, []int{0}, vals, errs)
	return vals[0], errs[0]
}

// Do runs call and returns the script's reply. When ctx ends first, Do
// returns ctx's error at once, and the call may or may not have run: a
// call already sent in a pipeline goes on under go-redis's timeouts, since
// the pipeline carries other callers' calls too. A call that keeps its
// reply for a rerun (runKey) fails with context.DeadlineExceeded after its
// window (Durability.Window): go-redis starts no attempt after it, and a
// read it began goes on for the client's ReadTimeout; on a client whose
// reads may have no end (TimeoutsSet), Do returns at the window. On a
// client that ends a call at its ctx's deadline (CutsAtDeadline), a lone
// call with a deadline runs on the caller's goroutine and returns ctx's
// error by the deadline, but a cancel before it waits for the call. A
// call whose caller may return early carries
// copies of the byte slices among call.Args (Do replaces them in place),
// so that its caller may reuse them once Do returned.
func (c *Committer) Do(ctx context.Context, call Call) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A call that returns in time on this goroutine runs here when no
	// round trip is under way or queued, without a goroutine: ctx cannot
	// end and go-redis's timeouts end the call soon after its window, or
	// go-redis ends it at ctx's deadline (and a cancel before the
	// deadline then waits for it, as any command of that client does).
	here := ctx.Done() == nil && c.bounded || c.cuts && hasDeadline(ctx)
	c.mu.Lock()
	if here && c.inFlight < maxInFlight {
		// The queue is empty: every round trip that ends takes it.
		c.inFlight++
		c.mu.Unlock()
		val, err := c.runOne(ctx, call)
		c.next()
		return val, cutErr(ctx, err)
	}
	c.mu.Unlock()
	if c.runKey != nil && !c.bounded {
		// go-redis's reads may not end: the window bounds the caller's
		// wait, and go-redis's attempts (runOne finds it already set).
		var cancel context.CancelFunc
		ctx, cancel = Bounded(ctx, c.durable.Window())
		defer cancel()
	}
	if ctx.Done() != nil {
		// The call leaves this goroutine, and its caller may return (ctx
		// ended) while it is still being sent: it must not read the
		// caller's buffers then.
		detach(call.Args)
	}
	r := &request{ctx: ctx, call: call, done: make(chan struct{})}
	c.mu.Lock()
	if c.inFlight < maxInFlight {
		c.inFlight++
		c.mu.Unlock()
		c.start([]*request{r})
	} else {
		c.queue = append(c.queue, r)
		c.mu.Unlock()
	}
	select {
	case <-r.done:
		return r.val, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Wait blocks until no round trip is under way, or ctx ends. A round trip
// that outlived its callers' contexts ends under go-redis's timeouts.
func (c *Committer) Wait(ctx context.Context) error {
	c.mu.Lock()
	if c.inFlight == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.idle == nil {
		c.idle = make(chan struct{})
	}
	idle := c.idle
	c.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// detach replaces each byte slice among args with a copy of its own.
func detach(args []any) {
	for i, a := range args {
		if b, ok := a.([]byte); ok {
			args[i] = bytes.Clone(b)
		}
	}
}

// next hands the queue to a goroutine after a caller ran its own call,
// or ends the round trip.
func (c *Committer) next() {
	c.mu.Lock()
	batch := c.take()
	c.mu.Unlock()
	if batch != nil {
		c.start(batch)
	}
}

// start runs batch, a round trip already counted in inFlight, on a
// goroutine that waits for one, or else on a new one.
func (c *Committer) start(batch []*request) {
	select {
	case c.handoff <- batch:
	default:
		go c.loop(batch)
	}
}

// loop runs batch, then whatever queued meanwhile, until the queue is
// empty; then it waits up to linger for another round trip to run.
func (c *Committer) loop(batch []*request) {
	var t *time.Timer
	for {
		c.drain(batch)
		if t == nil {
			t = time.NewTimer(linger)
		} else {
			t.Reset(linger)
		}
		select {
		case batch = <-c.handoff:
			t.Stop()
		case <-t.C:
			return
		}
	}
}

// drain runs batch, then whatever queued meanwhile, until the queue is
// empty, which ends the round trip.
func (c *Committer) drain(batch []*request) {
	for batch != nil {
		c.run(batch)
		// The callers just answered are runnable now, and a busy caller
		// calls again at once: let them queue before taking the queue, so
		// that the next pipeline carries them instead of leaving them to
		// the one after it. Without this yield, on two cores, pipelines
		// carried 3 to 5 calls from 16 callers, and each call cost its
		// caller twice the CPU.
		runtime.Gosched()
		c.mu.Lock()
		batch = c.take()
		c.mu.Unlock()
	}
}

// take removes the next batch from the queue, dropping the calls whose
// callers gave up (they are never sent), or, when nothing is left, ends
// the round trip and returns nil. c.mu is held.
func (c *Committer) take() []*request {
	for len(c.queue) > 0 {
		n := min(len(c.queue), maxCommit)
		batch := make([]*request, 0, n)
		for _, q := range c.queue[:n] {
			if err := q.ctx.Err(); err != nil {
				q.err = err
				close(q.done)
				continue
			}
			batch = append(batch, q)
		}
		clear(c.queue[:n])
		c.queue = c.queue[n:]
		if len(batch) > 0 {
			return batch
		}
	}
	c.queue = nil
	c.inFlight--
	if c.inFlight == 0 && c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
	return nil
}

// run sends batch and hands each caller its own command's reply.
func (c *Committer) run(batch []*request) {
	if len(batch) == 1 {
		// Its caller alone waits for it: its own ctx fits.
		q := batch[0]
		q.val, q.err = c.runOne(q.ctx, q.call)
		close(q.done)
		return
	}
	calls := make([]Call, len(batch))
	for i, q := range batch {
		calls[i] = q.call
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	if c.runKey != nil {
		var cancel context.CancelFunc
		ctx, cancel = Bounded(ctx, c.durable.Window())
		defer cancel()
	}
	if c.join {
		vals, errs, _ := RunJoined(ctx, c.rdb, c.script, calls, c.shared, MaxJoin, c.runKey, c.durable)
		for i, q := range batch {
			q.val, q.err = vals[i], errs[i]
			close(q.done)
		}
		return
	}
	cmds := c.runMany(ctx, calls)
	for i, q := range batch {
		q.val, q.err = cmds[i].Result()
		close(q.done)
	}
}

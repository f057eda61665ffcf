package consumer

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/ready"
)

// runner runs one listener. Its roles sit in files of their own, each
// with its own state:
//
//	dispatch.go    the dispatcher: a fetch task per bucket, slow fetches,
//	               suspect buckets, the quarantine stop (dispatchState)
//	execute.go     the execution of one job: handler, panic, timeout,
//	               retry policy, FinalRetry (executor)
//	settle.go      the settler: an outcome lane per bucket, in batches
//	               (settleState), and conclude
//	deliveries.go  the deliveries held, running and kept (deliveries)
//	quarantine.go  the slot a quarantined job runs in (Quarantine)
//	seams.go       what the roles need of Redis (fetcher, applier)
//
// The dispatcher hands jobs to the workers on jobs; the workers run them
// (execute) and hand their outcomes to the settler on outs.
type runner struct {
	g       *Group
	l       Listener
	topic   string
	buckets int
	workers int
	// capacity is how many fetched jobs the runner holds at once: no more
	// than it has workers, so a fetched job starts at once. A job that
	// waited in the process after its fetch could start after a Delete
	// had returned.
	capacity int

	fetcher    fetcher
	applier    applier
	quarantine *Quarantine
	dl         *deliveries

	// busy counts the jobs handed to the workers and not yet done; freed
	// is signaled when an outcome is settled, and when a worker frees up
	// leaving at most wakeAt jobs running (the dispatcher sets it to
	// what may let it fetch; see wakeLevel) or none; notify when a bucket
	// may have ready work or the quarantine slot was let go.
	busy   atomic.Int64
	wakeAt atomic.Int64
	notify chan struct{}
	freed  chan struct{}
	jobs   chan delivery
	// unchecked, when not nil, holds up every fetch until it is closed:
	// the topic's bucket count could not be checked at Start (recordLoop).
	unchecked chan struct{}

	dispatchState
	executor
	settleState
}

// delivery is a fetched job on its way to a worker.
type delivery struct {
	bucket int
	item   ready.Item
	member string    // item.Member(), made once
	at     time.Time // when fetched, set only for an Observer
	// sent is when the fetch that took it was sent (local clock): recover.lua
	// spares a delivery for ConsumerTimeout from its fetch, as a lease
	// does from its renewal, and leaseGuard counts from the later of the two.
	sent time.Time
}

func newRunner(g *Group, l Listener, buckets int) *runner {
	var opts Options
	if c, ok := l.(Configured); ok {
		opts = c.ListenerOptions()
	}
	w := g.cfg.Workers
	if wc, ok := l.(WorkerCounter); ok && wc.Workers() > 0 {
		w = wc.Workers()
	}
	if opts.Workers > 0 {
		w = opts.Workers
	}
	topic := l.Topic()
	r := &runner{
		g: g, l: l, topic: topic, buckets: buckets, workers: w, capacity: w,
		fetcher:    redisFetcher{rdb: g.rdb, prefix: g.cfg.Prefix, topic: topic, cid: g.cid, older: g.older, limits: opts.Limits.Spec(), startLog: g.startLog},
		applier:    redisApplier{settler: g.settler, rdb: g.rdb, prefix: g.cfg.Prefix, topic: topic, cid: g.cid, older: g.older, keep: retention(g.cfg.Retention, g.cfg.RetentionMax, opts, buckets)},
		quarantine: g.quarantine,
		dl:         newDeliveries(buckets),
		notify:     make(chan struct{}, 1),
		freed:      make(chan struct{}, 1),
		jobs:       make(chan delivery, 2*w),
	}
	r.wakeAt.Store(math.MaxInt64) // until the dispatcher sets a level
	r.dispatchState = newDispatchState(buckets)
	r.executor.init(g, l, opts)
	r.settleState.init(w)
	return r
}

// retention is what a topic's settles keep of acked jobs, per bucket: the
// listener's retention, else the config's, with the topic's cap shared
// among its buckets (rounded up).
func retention(d time.Duration, most int, opts Options, buckets int) ack.Retention {
	if opts.Retention != 0 {
		d = opts.Retention
	}
	if opts.RetentionMax > 0 {
		most = opts.RetentionMax
	}
	if d <= 0 || most <= 0 {
		return ack.Retention{}
	}
	return ack.Retention{For: d, Max: (most + buckets - 1) / max(buckets, 1)}
}

// chain wraps h in the listener's middleware, then the client's: the
// client's first middleware is the outermost.
func chain(h Handler, own, client []Middleware) Handler {
	for i := len(own) - 1; i >= 0; i-- {
		h = own[i](h)
	}
	for i := len(client) - 1; i >= 0; i-- {
		h = client[i](h)
	}
	return h
}

// wake marks bucket n as holding ready work.
func (r *runner) wake(n int) {
	if n < 0 || n >= r.buckets {
		return
	}
	r.maybe[n].Store(true)
	signal(r.notify)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// runAll starts the runner's goroutines: the dispatcher on fetchers, the
// workers on workers, and the settler, which ends with settlerDone.
func (r *runner) runAll(fetchCtx context.Context, fetchers, workers *sync.WaitGroup) {
	fetchers.Go(func() { r.dispatch(fetchCtx, fetchers) })
	var mine sync.WaitGroup
	for range r.workers {
		mine.Add(1)
		workers.Go(func() {
			defer mine.Done()
			r.work()
		})
	}
	// Once the client stops and its handlers have ended, its quarantined
	// job, if it had one, no longer runs: another may run one now. Not
	// before: a stopping client's handler runs on until it returns.
	workers.Go(func() {
		mine.Wait()
		r.quarantine.release(r.notify)
	})
	go r.settle()
}

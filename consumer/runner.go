package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/retry"
)

// ErrConsumeTimeout is the failure of a handler that overran ConsumeTimeout.
var ErrConsumeTimeout = errors.New("redeq: handler overran ConsumeTimeout")

// lingerTime is how long free workers wait for more to free up before a
// fetch for fewer than half of them.
const lingerTime = 2 * time.Millisecond

// maxSettle bounds the outcomes one settle script applies.
const maxSettle = ack.MaxSettle

// runner runs one listener: a dispatcher that fetches into this consumer's
// in-flight lists, the workers, and a settler that applies outcomes in
// batches.
type runner struct {
	g       *Group
	l       Listener
	opts    Options
	handler Handler
	// The listener's policy: its options over the config.
	consumeTimeout time.Duration
	retries        int
	intervals      []time.Duration
	topic          string
	buckets        int
	workers        int
	// capacity is how many fetched jobs the runner holds at once: no more
	// than it has workers, so a fetched job starts at once. A job that
	// waited in the process after its fetch could start after a Delete
	// had returned.
	capacity int

	maybe []atomic.Bool // bucket may have ready work
	// suspect marks buckets to reconcile before the next fetch: the last
	// fetch failed (its script may have run and its reply been lost), or a
	// sweep is due (go-redis may have retried a fetch whose reply was
	// lost, hiding the loss). Only the dispatcher touches it.
	suspect   []bool
	lastSweep time.Time
	// fetched marks the buckets fetched from since the last sweep: only
	// they can hide a lost reply. Only the dispatcher touches it.
	fetched []bool
	// held is, per bucket, the deliveries (in-flight members) this runner
	// knows it holds: from their fetch until their outcome is settled.
	heldMu sync.Mutex
	held   []map[string]bool
	// running is, per bucket, the deliveries whose handler runs; kept,
	// those Shutdown left in flight because their handler still ran when
	// it rolled back (see keepRunning): each worker concludes its own when
	// its handler returns. Both under heldMu.
	running []map[string]bool
	kept    []map[string]bool
	// submits counts the outcomes on their way to the settler: Shutdown
	// waits for them before it stops the settler.
	submits sync.WaitGroup
	notify  chan struct{}
	freed   chan struct{}
	busy    atomic.Int64
	rr      int
	// unacked counts the jobs parked in un_ack; the warning about them is
	// rate-limited.
	unacked     atomic.Int64
	unackMu     sync.Mutex
	unackLogged time.Time
	unackQuiet  int64
	// alone is set while the runner must fetch nothing until it runs
	// nothing: it holds a quarantined job, or a fetch stopped at one.
	// Only the dispatcher touches it.
	alone bool
	// soloBucket is the bucket whose fetch stopped at a quarantined job,
	// to fetch from alone once the runner is idle; -1 when the runner runs
	// a quarantined job. Only the dispatcher touches it.
	soloBucket int

	// The fetch tasks (see launch); only the dispatcher touches these.
	results    chan fetchResult
	fetching   []bool      // a task of the bucket is under way
	inFlight   int         // tasks under way
	launched   []time.Time // when the bucket's task started
	reservedBy []int       // workers the bucket's task holds for its jobs
	reserved   int         // their sum
	soloFetch  bool        // a task fetches a quarantined job alone
	slow       []bool      // the bucket's last fetch overran slowFetch
	retryAt    []time.Time // a failed bucket's next fetch, not before
	backoff    []env.Backoff
	failing    int // buckets whose last task failed

	jobs chan delivery
	outs chan settleReq

	stopSettle  chan struct{}
	settlerDone chan struct{}
}

type delivery struct {
	bucket int
	item   ready.Item
	member string    // item.Member(), made once
	at     time.Time // when fetched, set only for an Observer
}

type settleReq struct {
	bucket int
	out    ack.Outcome
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
	r := &runner{
		g: g, l: l, topic: l.Topic(), buckets: buckets, workers: w, capacity: w,
		opts:           opts,
		handler:        chain(l.OnJob, opts.Middleware, g.middleware),
		consumeTimeout: g.cfg.ConsumeTimeout,
		maybe:          make([]atomic.Bool, buckets),
		suspect:        make([]bool, buckets),
		fetched:        make([]bool, buckets),
		held:           make([]map[string]bool, buckets),
		running:        make([]map[string]bool, buckets),
		kept:           make([]map[string]bool, buckets),
		soloBucket:     -1,
		results:        make(chan fetchResult, buckets),
		fetching:       make([]bool, buckets),
		launched:       make([]time.Time, buckets),
		reservedBy:     make([]int, buckets),
		slow:           make([]bool, buckets),
		retryAt:        make([]time.Time, buckets),
		backoff:        make([]env.Backoff, buckets),
		notify:         make(chan struct{}, 1),
		freed:          make(chan struct{}, 1),
		jobs:           make(chan delivery, 2*w),
		outs:           make(chan settleReq, 2*w),
		stopSettle:     make(chan struct{}),
		settlerDone:    make(chan struct{}),
	}
	if opts.ConsumeTimeout > 0 {
		r.consumeTimeout = opts.ConsumeTimeout
	}
	r.retries, r.intervals = g.cfg.Retry, g.cfg.RetryIntervals
	if opts.RetryIntervals != nil {
		r.intervals = opts.RetryIntervals
		r.retries = len(opts.RetryIntervals)
	}
	if opts.MaxRetries != 0 {
		r.retries = opts.MaxRetries
	}
	for i := range r.maybe {
		r.maybe[i].Store(true)
		r.held[i] = map[string]bool{}
		r.running[i] = map[string]bool{}
		r.kept[i] = map[string]bool{}
	}
	return r
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

// hold records items as held and returns their in-flight members.
func (r *runner) hold(b int, items []ready.Item) []string {
	members := make([]string, len(items))
	r.heldMu.Lock()
	for i, it := range items {
		members[i] = it.Member()
		r.held[b][members[i]] = true
	}
	r.heldMu.Unlock()
	return members
}

func (r *runner) unhold(b int, outs []ack.Outcome) {
	r.heldMu.Lock()
	for _, o := range outs {
		delete(r.held[b], ready.Member(o.Token, o.ID))
	}
	r.heldMu.Unlock()
}

// started records that the handler of delivery member of bucket b runs.
func (r *runner) started(b int, member string) {
	r.heldMu.Lock()
	r.running[b][member] = true
	r.heldMu.Unlock()
}

// anyRunning reports whether a handler of the runner runs.
func (r *runner) anyRunning() bool {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	for _, m := range r.running {
		if len(m) > 0 {
			return true
		}
	}
	return false
}

// keepRunning marks every delivery whose handler still runs as kept in
// flight, and returns them per bucket: Shutdown's rollback leaves them,
// so that no other consumer runs a job while its handler here still winds
// down, and each worker concludes its own once its handler returned.
func (r *runner) keepRunning() ([]map[string]bool, int) {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	keep := make([]map[string]bool, r.buckets)
	n := 0
	for b, running := range r.running {
		keep[b] = map[string]bool{}
		for m := range running {
			r.kept[b][m] = true
			keep[b][m] = true
			r.g.keptWG.Add(1) // under heldMu: before its conclude sees it kept
			r.g.keptN.Add(1)
			n++
		}
	}
	return keep, n
}

// runningIn reports whether a handler of bucket b runs.
func (r *runner) runningIn(b int) bool {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	return len(r.running[b]) > 0
}

// isRunning reports whether the handler of delivery member of bucket b
// runs.
func (r *runner) isRunning(b int, member string) bool {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	return r.running[b][member]
}

// conclude ends the run of delivery member of bucket b with its outcome
// (nil: none, its handler was canceled): it hands the outcome to the
// settler. When Shutdown left the delivery in flight for it (keepRunning),
// the settler is gone: it applies the outcome itself, or gives the job
// back to the head of its ready list, once; when Redis cannot be reached
// then (a client from Open closed its connection), the reaper recovers
// the job after ConsumerTimeout.
func (r *runner) conclude(b int, member string, out *ack.Outcome) {
	r.heldMu.Lock()
	delete(r.running[b], member)
	kept := r.kept[b][member]
	delete(r.kept[b], member)
	if !kept && out != nil {
		r.submits.Add(1) // under heldMu: before keepRunning, or kept
	}
	r.heldMu.Unlock()
	if !kept {
		if out != nil {
			r.submit(b, *out)
			r.submits.Done()
		}
		return // the rollback gives back a job without an outcome
	}
	defer func() {
		r.g.keptN.Add(-1)
		r.g.keptWG.Done()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), concludeTimeout)
	defer cancel()
	var err error
	if out != nil {
		_, err = r.g.settler.Settle(ctx, r.topic, b, []ack.Outcome{*out})
	} else {
		_, err = ready.ReleaseMembers(ctx, r.g.rdb, r.g.cfg.Prefix, r.topic, b, r.g.cid, []string{member})
	}
	if err != nil {
		r.g.env.Logger.Warn("redeq: cannot conclude a job whose handler returned after shutdown (the reaper recovers it after ConsumerTimeout)", "topic", r.topic, "bucket", b, "err", err)
	}
}

// concludeTimeout bounds conclude's own call to Redis.
const concludeTimeout = 2 * time.Second

// heldLen is how many deliveries of bucket b the runner holds.
func (r *runner) heldLen(b int) int {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	return len(r.held[b])
}

// idle reports that the runner holds no delivery: none running, none
// waiting for its outcome to be applied. Only then may it take a
// quarantined job, so that if that job kills the process, nothing else of
// its topic is in flight with it; and only while no other runner of the
// client runs one (Group.solo).
func (r *runner) idle() bool {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	for _, h := range r.held {
		if len(h) > 0 {
			return false
		}
	}
	return true
}

// solo is the runner of this process that runs a quarantined job, or
// claimed the right to fetch one: one at a time in the process, whatever
// the clients and topics in it, so that two jobs recovered twice (a
// poison job, and a healthy one that ran beside it) are never in flight
// together when the process dies.
var solo struct {
	mu      sync.Mutex
	holder  *runner
	waiting map[*runner]bool // runners to wake when the holder lets go
}

// trySolo makes r the holder if there is none, and reports whether it is;
// when another runner holds it, r is woken once it lets go.
func trySolo(r *runner) bool {
	solo.mu.Lock()
	defer solo.mu.Unlock()
	if solo.holder == nil {
		solo.holder = r
	}
	if solo.holder == r {
		return true
	}
	if solo.waiting == nil {
		solo.waiting = map[*runner]bool{}
	}
	solo.waiting[r] = true
	return false
}

// releaseSolo ends r's hold, if it had it, and wakes the runners waiting
// for it.
func releaseSolo(r *runner) {
	solo.mu.Lock()
	if solo.holder != r {
		solo.mu.Unlock()
		return
	}
	solo.holder = nil
	waiting := solo.waiting
	solo.waiting = nil
	solo.mu.Unlock()
	for w := range waiting {
		signal(w.notify)
	}
}

func (r *runner) holds(b int) func(member string) bool {
	return func(member string) bool {
		r.heldMu.Lock()
		defer r.heldMu.Unlock()
		return r.held[b][member]
	}
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

// slowFetch is how long a fetch may take before the dispatcher stops
// counting the workers it asked for: a bucket whose node hangs must not
// hold up the fetches of the others. A fetch that answers later keeps what
// fits in the workers free then and leaves the rest to be given back (see
// landed).
const slowFetch = 200 * time.Millisecond

// fetchResult is what a bucket's fetch task reports to the dispatcher.
type fetchResult struct {
	bucket     int
	want       int  // workers the task asked for; 0: it only reconciled
	alone      bool // it claimed the process's quarantine slot
	reconciled bool
	items      []ready.Item
	stopped    bool
	more       bool // the ready list may hold more (ready.Batch.More)
	err        error
}

// fetchTask reconciles bucket b when asked, then fetches up to want jobs
// from it. It runs on a goroutine of its own: at most one per bucket, so
// that no reconcile of a bucket overlaps a fetch from it.
func (r *runner) fetchTask(ctx context.Context, b, want int, alone, reconcile bool) fetchResult {
	res := fetchResult{bucket: b, want: want, alone: alone}
	if reconcile {
		n, err := ready.Release(ctx, r.g.rdb, r.g.cfg.Prefix, r.topic, b, r.g.cid, r.holds(b))
		if err != nil {
			res.err = err
			return res
		}
		res.reconciled = true
		if n > 0 {
			// A lost reply, or a late one that brought more than the
			// free workers could start: rate-limited, since a hung node's
			// late answers come bucket after bucket.
			r.g.env.Failure("redeq: returned in-flight jobs this consumer did not hold (a fetch reply was lost, or came late)", "topic", r.topic, "bucket", b, "jobs", n)
		}
	}
	if want > 0 {
		var got ready.Batch
		got, res.err = ready.FetchBatch(ctx, r.g.rdb, r.g.cfg.Prefix, r.topic, b, r.g.cid, want, alone)
		res.items, res.stopped, res.more = got.Items, got.Stopped, got.More
	}
	return res
}

// launch starts bucket b's fetch task. The workers it asks for are
// reserved until it answers, or until it is slow.
func (r *runner) launch(ctx context.Context, tasks *sync.WaitGroup, b, want int, alone bool) {
	reconcile := r.suspect[b]
	r.fetching[b] = true
	r.inFlight++
	r.reservedBy[b] = want
	r.reserved += want
	r.launched[b] = r.g.env.Clock.Now()
	if want > 0 {
		r.fetched[b] = true
	}
	if alone {
		r.soloFetch = true
	}
	tasks.Go(func() {
		// The channel holds one result per bucket: the send never blocks,
		// even after the dispatcher ended.
		r.results <- r.fetchTask(ctx, b, want, alone, reconcile)
	})
}

// landed takes in a fetch task's result: it holds the jobs fetched and
// hands them to the workers.
func (r *runner) landed(res fetchResult, log *slog.Logger) {
	b := res.bucket
	r.fetching[b] = false
	r.inFlight--
	r.reserved -= r.reservedBy[b]
	r.reservedBy[b] = 0
	if res.alone {
		r.soloFetch = false
	}
	if res.reconciled {
		r.suspect[b] = false
	}
	if res.err != nil {
		// The script may have run and its reply been lost: reconcile
		// before the next fetch.
		r.suspect[b] = true
		if res.want > 0 {
			r.maybe[b].Store(true)
		}
		if res.alone {
			releaseSolo(r)
		}
		if !r.backoff[b].Failing() {
			r.failing++
		}
		wait := r.backoff[b].Next()
		r.retryAt[b] = r.g.env.Clock.Now().Add(wait)
		r.g.env.Failure("redeq: fetch failed", "topic", r.topic, "bucket", b, "err", res.err, "retry_in", wait)
		return
	}
	if r.backoff[b].Failing() {
		r.backoff[b].Reset()
		if r.failing--; r.failing == 0 {
			log.Info("redeq: fetch recovered")
		}
	}
	if res.want == 0 {
		return
	}
	if r.g.env.Clock.Now().Sub(r.launched[b]) < slowFetch {
		r.slow[b] = false
	}
	items := res.items
	if res.more {
		r.maybe[b].Store(true) // more may wait (a stop included)
	}
	// A fetch that answered after slowFetch no longer had workers
	// reserved: it keeps what the free workers can start now. The rest
	// waits in this consumer's in-flight list, unheld, and the reconcile
	// before the bucket's next fetch gives it back.
	if free := r.capacity - int(r.busy.Load()) - r.reserved; len(items) > free {
		items = items[:max(free, 0)]
		r.suspect[b] = true
		r.maybe[b].Store(true)
	}
	if res.alone && !quarantined(items) {
		releaseSolo(r) // it claimed, but took no quarantined job
	}
	if res.stopped {
		// The fetch stopped at a quarantined job: fetch nothing more until
		// everything running is done, then fetch it alone.
		r.alone, r.soloBucket = true, b
	} else if quarantined(items) {
		r.alone, r.soloBucket = true, -1 // run it alone
	}
	members := r.hold(b, items)
	r.busy.Add(int64(len(items)))
	var at time.Time
	if r.g.observer != nil {
		at = r.g.env.Clock.Now()
	}
	for i, it := range items {
		r.jobs <- delivery{bucket: b, item: it, member: members[i], at: at}
	}
}

// dispatch fetches ready jobs for the workers until ctx ends, then closes
// the jobs channel. It fetches from the buckets flagged by wake: it does
// not poll. A bucket's owner repeats the ready notification at each scan
// while the ready list holds jobs, and every bucket is flagged when the
// subscription reconnects, so a lost notification delays a job, never
// strands it.
//
// Each fetch runs on a task of its own (launch), at most one per bucket,
// so that a bucket whose Redis node hangs delays its own jobs only; and a
// bucket whose fetch failed backs off on its own.
func (r *runner) dispatch(ctx context.Context, tasks *sync.WaitGroup) {
	defer close(r.jobs)
	log := r.g.env.Logger.With("topic", r.topic)
	clock := r.g.env.Clock
	// wake ends the wait for the next deadline of the loop: a periodic
	// sweep, a bucket's backoff, a slow fetch.
	wake := time.NewTimer(r.g.cfg.ConsumerTimeout)
	defer wake.Stop()
	// linger bounds how long a free worker waits for others to free up,
	// so that fetches come in batches without idling workers for long.
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	lingering, lingered := false, false
	r.lastSweep = clock.Now()
	for ctx.Err() == nil {
		now := clock.Now()
		if now.Sub(r.lastSweep) >= r.g.cfg.ConsumerTimeout {
			// go-redis may have retried a fetch whose reply was lost,
			// hiding the loss: reconcile what was fetched from since the
			// last sweep.
			r.lastSweep = now
			r.suspectFetched()
		}
		for b, want := range r.reservedBy {
			if want > 0 && now.Sub(r.launched[b]) >= slowFetch {
				// Slow: its workers may serve other buckets, and its next
				// fetches ask for one job, until one answers in time.
				r.reserved -= want
				r.reservedBy[b] = 0
				r.slow[b] = true
			}
		}
		if r.alone && !r.soloFetch && r.inFlight == 0 && r.idle() {
			releaseSolo(r) // its quarantined job, if it ran one, is done
			switch {
			case r.soloBucket < 0:
				r.alone = false
			case r.unreconciled():
				// A fetch whose reply was lost may have left a delivery in
				// this consumer's in-flight sets that it does not hold:
				// give such deliveries back first (the bucket loop below
				// launches the reconciles), so that nothing of this runner
				// is in flight beside the quarantined job.
			case trySolo(r):
				// Fetch the quarantined job alone; nothing else of this
				// runner starts until that fetch answers.
				b := r.soloBucket
				r.alone, r.soloBucket = false, -1
				r.maybe[b].Store(false)
				r.launch(ctx, tasks, b, min(r.capacity, ready.MaxFetch), true)
			}
			// Else another runner of the process holds the slot: this one
			// is woken when it lets go.
		}
		free := r.capacity - int(r.busy.Load()) - r.reserved
		// Fetch in batches: wait until half the workers are free, unless
		// nothing is running at all, or fewer have been free for a linger.
		ripe := free > 0 && !r.alone && !r.soloFetch &&
			(free >= max(1, r.workers/2) || r.busy.Load() == 0 || lingered)
		next := r.lastSweep.Add(r.g.cfg.ConsumerTimeout)
		if ripe && r.anyMaybe() && !r.g.heard() {
			// Unheard for most of a ConsumerTimeout: a reaper may forget
			// this consumer; fetch once a heartbeat got through again.
			r.g.env.Failure("redeq: fetch waits for a heartbeat to get through", "topic", r.topic)
			ripe = false
			next = earliest(next, now.Add(r.g.cfg.HeartbeatInterval/4))
		}
		if ripe {
			lingered = false
		}
		waiting := false
		for i := range r.buckets {
			b := (r.rr + i) % r.buckets
			if r.fetching[b] {
				if r.reservedBy[b] > 0 {
					next = earliest(next, r.launched[b].Add(slowFetch))
				}
				continue
			}
			if now.Before(r.retryAt[b]) {
				if r.suspect[b] || r.maybe[b].Load() {
					next = earliest(next, r.retryAt[b])
				}
				continue
			}
			// room bounds the deliveries of a bucket held at once (running,
			// or their outcomes waiting to be applied) to twice the
			// workers: a bucket whose outcomes cannot be applied (its node
			// refuses writes, or its replica lags behind WaitReplicas)
			// stops being fetched from, so its settle lane never fills and
			// never holds up the workers, nor so the other buckets.
			want := 0
			if !r.soloFetch && r.maybe[b].Load() {
				switch room := 2*r.capacity - r.heldLen(b); {
				case room <= 0:
					// Its outcomes first: a settle lane signals freed.
				case ripe && free > 0 && r.maybe[b].CompareAndSwap(true, false):
					want = min(free, room, ready.MaxFetch)
					if r.slow[b] {
						want = 1
					}
				default:
					waiting = true // for free workers
				}
			}
			if want == 0 && !r.suspect[b] {
				continue
			}
			r.launch(ctx, tasks, b, want, false)
			free -= want
			if want > 0 {
				next = earliest(next, now.Add(slowFetch))
			}
		}
		r.rr++
		if free > 0 && !r.alone && !lingering && waiting {
			lingering = true
			linger.Reset(lingerTime)
		}
		wake.Reset(max(next.Sub(now), time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case res := <-r.results:
			r.landed(res, log)
		case <-linger.C:
			lingering, lingered = false, true
		case <-r.notify:
		case <-r.freed:
		case <-wake.C:
		}
	}
}

// suspectFetched marks for a reconcile every bucket fetched from since the
// last sweep: go-redis may have resent a fetch whose reply was lost,
// hiding the loss.
func (r *runner) suspectFetched() {
	for b := range r.buckets {
		if r.fetched[b] {
			r.fetched[b] = false
			r.suspect[b] = true
		}
	}
}

// unreconciled marks the buckets fetched from since the last sweep for a
// reconcile, and reports whether any bucket still awaits one.
func (r *runner) unreconciled() bool {
	r.suspectFetched()
	return slices.Contains(r.suspect, true)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// quarantined reports whether items is a quarantined job, which a fetch
// returns alone.
func quarantined(items []ready.Item) bool {
	if len(items) != 1 {
		return false
	}
	head := items[0].Envelope
	if i := strings.IndexByte(head, '\n'); i >= 0 {
		head = head[:i+1] // the header alone: no copy of the body
	}
	h, _, err := pool.Decode([]byte(head))
	return err == nil && h.Recoveries >= ready.Quarantine
}

func (r *runner) anyMaybe() bool {
	for i := range r.maybe {
		if r.maybe[i].Load() {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// work runs jobs until the dispatcher closes the channel. Once the group
// is stopping, fetched jobs are left in flight for the rollback.
func (r *runner) work() {
	for d := range r.jobs {
		if !r.g.stopping.Load() {
			r.handle(d)
		}
		r.busy.Add(-1)
		signal(r.freed)
	}
}

// handle runs one job and submits its outcome.
func (r *runner) handle(d delivery) {
	g := r.g
	h, rest, err := pool.Decode([]byte(d.item.Envelope)) // the one copy of the body
	token := d.item.Token
	var job *pool.Job
	if err == nil {
		job, err = pool.JobFrom(r.topic, d.item.ID, h, rest)
	}
	if err != nil {
		// A corrupt entry cannot run: park it in the dead set, keep working.
		g.env.Logger.Error("redeq: corrupt job sent to the dead set", "topic", r.topic, "id", d.item.ID, "err", err)
		r.submit(d.bucket, ack.Outcome{ID: d.item.ID, Token: token, Op: ack.OpDead, Reason: err.Error()})
		return
	}
	job.LastError = d.item.LastError
	ch := &ack.Channel{}

	ctx, cancel := g.handlerCtx, context.CancelFunc(func() {})
	if r.consumeTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, r.consumeTimeout)
	}
	var start time.Time
	if g.observer != nil {
		start = r.observeStart(d, job)
	}
	// From here until conclude, the delivery counts as running: a
	// Shutdown that rolls back meanwhile leaves it in flight.
	member := d.member
	r.started(d.bucket, member)
	err = r.call(ctx, job, ch)
	var took time.Duration
	if g.observer != nil {
		took = g.env.Clock.Now().Sub(start)
	}
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	// Interrupted: the handler's own context was canceled by Shutdown
	// when it returned. Shutdown's cancel reaches a handler's context
	// (a child, with ConsumeTimeout) a moment after the client's: a
	// failure returned meanwhile, its context still alive, is a failure.
	interrupted := errors.Is(ctx.Err(), context.Canceled) && g.handlerCtx.Err() != nil
	cancel()
	if interrupted && err != nil {
		r.observeDone(took, job, OutcomeInterrupted, err)
		r.conclude(d.bucket, member, nil) // canceled by Shutdown: the job goes back unspent
		return
	}
	if err == nil && timedOut {
		err = ErrConsumeTimeout
	}
	if err != nil {
		r.observeDone(took, job, r.fail(d.bucket, member, job, h, token, err), err)
		return
	}
	acked, rejoined, delay := ch.State()
	out := ack.Outcome{ID: job.ID, Token: token, Delay: delay, HadError: job.LastError != ""}
	switch {
	case acked && rejoined:
		out.Op = ack.OpAckRejoin
		out.Header = ack.HeaderFor(ack.OpAckRejoin, h)
	case acked:
		out.Op = ack.OpAck
	case rejoined:
		out.Op = ack.OpRejoin
	case g.cfg.AutoAck:
		out.Op = ack.OpAck
	default:
		out.Op = ack.OpUnAck
		r.warnUnAck(job.ID)
	}
	r.observeDone(took, job, outcomeOf(out.Op), nil)
	r.conclude(d.bucket, member, &out)
}

// observeStart tells the observer a handler starts; its lateness is the
// fetch's (Redis clock) plus the wait since (local clock).
func (r *runner) observeStart(d delivery, job *pool.Job) time.Time {
	now := r.g.env.Clock.Now()
	late := time.Duration(-1)
	if d.item.Late >= 0 {
		late = d.item.Late + max(now.Sub(d.at), 0)
	}
	r.g.observer.JobDelivered(job, late)
	return now
}

func (r *runner) observeDone(took time.Duration, job *pool.Job, o Outcome, err error) {
	if r.g.observer != nil {
		r.g.observer.JobDone(job, o, took, err)
	}
}

func outcomeOf(op ack.Op) Outcome {
	switch op {
	case ack.OpRejoin:
		return OutcomeRejoin
	case ack.OpUnAck:
		return OutcomeUnAck
	}
	return OutcomeAck // OpAck, OpAckRejoin
}

// unackLogEvery bounds the warnings about jobs parked in un_ack.
const unackLogEvery = 10 * time.Second

// warnUnAck tells, at most once per unackLogEvery, that a handler returned
// nil without Ack or Rejoin: the job waits in un_ack until someone requeues
// or processes it, which surprises those who expected an ack.
func (r *runner) warnUnAck(id string) {
	r.unacked.Add(1)
	now := r.g.env.Clock.Now()
	r.unackMu.Lock()
	defer r.unackMu.Unlock()
	if now.Sub(r.unackLogged) < unackLogEvery {
		r.unackQuiet++
		return
	}
	r.g.env.Logger.Warn("redeq: handler returned nil without Ack or Rejoin: job parked in un_ack (set AutoAck, call ch.Ack(), or use Typed)",
		"topic", r.topic, "id", id, "parked_since_last_warning", r.unackQuiet+1, "parked_total", r.unacked.Load())
	r.unackLogged, r.unackQuiet = now, 0
}

// fail applies the retry policy to a failed delivery and tells which.
func (r *runner) fail(bucket int, member string, job *pool.Job, h pool.Header, token string, cause error) Outcome {
	g := r.g
	h.Attempt++
	policy := retry.For(h.MaxRetries, job.RetryIntervals, r.retries, r.intervals)
	delay, again := policy.Next(h.Attempt)
	if again && job.RetryIntervals == nil && r.opts.Backoff != nil {
		delay = max(r.opts.Backoff(h.Attempt, cause), 0)
	}
	if errors.Is(cause, retry.ErrSkipRetry) {
		again = false
	}
	if again {
		g.env.Logger.Debug("redeq: job failed, retrying", "topic", r.topic, "id", job.ID, "attempt", h.Attempt, "retry_in", delay, "err", cause)
		r.conclude(bucket, member, &ack.Outcome{ID: job.ID, Token: token, Op: ack.OpRetry, Delay: delay, Header: ack.HeaderFor(ack.OpRetry, h), Err: cause.Error()})
		return OutcomeRetry
	}
	g.env.Logger.Warn("redeq: job failed for the last time", "topic", r.topic, "id", job.ID, "attempt", h.Attempt, "err", cause)
	if fr, ok := r.l.(FinalRetryListener); ok {
		final := *job // the handler may still hold job
		final.Attempt = h.Attempt
		final.LastError = ack.Cut(cause.Error())
		r.final(fr, &final)
	}
	r.conclude(bucket, member, &ack.Outcome{ID: job.ID, Token: token, Op: ack.OpDead, Header: ack.HeaderFor(ack.OpDead, h),
		Reason: fmt.Sprintf("failed %d times; last: %v", h.Attempt, cause), Err: cause.Error()})
	return OutcomeDead
}

// call runs the handler, turning a panic into an error.
func (r *runner) call(ctx context.Context, job *pool.Job, ch *ack.Channel) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.g.env.Logger.Error("redeq: handler panicked", "topic", r.topic, "id", job.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("redeq: handler panicked: %v", p)
		}
	}()
	return r.handler(ctx, job, ch)
}

func (r *runner) final(fr FinalRetryListener, job *pool.Job) {
	ctx, cancel := r.g.handlerCtx, context.CancelFunc(func() {})
	if r.consumeTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, r.consumeTimeout)
	}
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r.g.env.Logger.Error("redeq: FinalRetry panicked", "topic", r.topic, "id", job.ID, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	fr.FinalRetry(ctx, job)
}

// submit hands an outcome to the settler; after the settler stopped the
// outcome is dropped and the job is left to the rollback or the reaper.
func (r *runner) submit(bucket int, out ack.Outcome) {
	select {
	case r.outs <- settleReq{bucket: bucket, out: out}:
	case <-r.settlerDone:
	}
}

// settle hands outcomes to their bucket's lane until stopSettle is
// closed, then hands over what is queued, lets the lanes apply it and
// closes settlerDone. Each bucket settles on a lane of its own, so that an
// outcome that cannot be applied (its bucket's Redis node hangs) holds up
// no other bucket's.
func (r *runner) settle() {
	defer close(r.settlerDone)
	lanes := make([]chan ack.Outcome, r.buckets)
	var wg sync.WaitGroup
	send := func(s settleReq) {
		ch := lanes[s.bucket]
		if ch == nil {
			// A lane holds at most the bucket's deliveries this runner
			// holds, which dispatch bounds to twice the capacity: the
			// send never blocks, and the settler never waits for one
			// bucket while the others' outcomes queue behind it.
			ch = make(chan ack.Outcome, 2*r.capacity)
			lanes[s.bucket] = ch
			wg.Go(func() { r.lane(s.bucket, ch) })
		}
		ch <- s.out
	}
	for {
		select {
		case o := <-r.outs:
			send(o)
		case <-r.stopSettle:
			for {
				select {
				case o := <-r.outs:
					send(o)
					continue
				default:
				}
				break
			}
			for _, ch := range lanes {
				if ch != nil {
					close(ch)
				}
			}
			wg.Wait()
			return
		}
	}
}

// lane applies bucket b's outcomes in batches until in is closed.
func (r *runner) lane(b int, in chan ack.Outcome) {
	log := r.g.env.Logger.With("topic", r.topic)
	for o := range in {
		batch := []ack.Outcome{o}
	more:
		for len(batch) < maxSettle {
			select {
			case o, ok := <-in:
				if !ok {
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		r.flush(b, batch, log)
	}
}

// flush settles a batch of bucket b, retrying Redis failures until they
// succeed or the group gives up at the end of Shutdown.
func (r *runner) flush(b int, outs []ack.Outcome, log *slog.Logger) {
	ctx := r.g.settleCtx
	var bo env.Backoff
	unconfirmed := false // applied once, but not by enough replicas
	for {
		applied, err := r.g.settler.Settle(ctx, r.topic, b, outs)
		if err == nil {
			r.unhold(b, outs)
			signal(r.freed) // a runner waiting to be idle may go on
			for i, ok := range applied {
				if !ok && !unconfirmed {
					log.Info("redeq: outcome dropped: job deleted or recovered by another consumer", "id", outs[i].ID, "op", string(outs[i].Op))
				}
			}
			return
		}
		if ctx.Err() != nil {
			log.Warn("redeq: outcomes not applied before shutdown; the jobs run again", "count", len(outs), "err", err)
			return
		}
		unconfirmed = unconfirmed || errors.Is(err, rdb.ErrNotReplicated)
		wait := bo.Next()
		r.g.env.Failure("redeq: settle failed", "topic", r.topic, "bucket", b, "err", err, "retry_in", wait)
		sleep(ctx, wait)
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
		releaseSolo(r)
	})
	go r.settle()
}

package consumer

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// heldPerWorker bounds the deliveries of one bucket a runner holds at
// once, running or with their outcomes on their way to Redis, per worker.
// A lane under load settles two fetches' outcomes at once (2 per
// worker); while that settle is under way the workers run a third
// fetch's jobs and hand in their outcomes, and the next fetch must not
// wait for the settle's round trip: 4 per worker. A consumer killed then
// leaves up to that many jobs run and not yet settled, which run again
// (at least once).
const heldPerWorker = 4

// lingerTime is how long free workers wait for more to free up before a
// fetch for fewer than batchFor of them.
const lingerTime = 2 * time.Millisecond

// dispatchState is the dispatcher's. Except maybe (set by wake), only the
// dispatcher touches it.
type dispatchState struct {
	maybe []atomic.Bool // bucket may have ready work
	// suspect marks buckets to reconcile before the next fetch: the last
	// fetch failed (its script may have run and its reply been lost), or a
	// sweep is due (go-redis may have retried a fetch whose reply was
	// lost, hiding the loss).
	suspect   []bool
	lastSweep time.Time
	// fetched marks the buckets fetched from since the last sweep: only
	// they can hide a lost reply.
	fetched []bool
	rr      int
	// alone is set while the runner must fetch nothing until it runs
	// nothing: it holds a quarantined job, or a fetch stopped at one.
	alone bool
	// soloBucket is the bucket whose fetch stopped at a quarantined job,
	// to fetch from alone once the runner is idle; -1 when the runner runs
	// a quarantined job.
	soloBucket int

	// The fetch tasks (see launch).
	results    chan fetchResult
	fetching   []bool      // a task of the bucket is under way
	inFlight   int         // tasks under way
	launched   []time.Time // when the bucket's task started
	reservedBy []int       // workers the bucket's task holds for its jobs
	reserved   int         // their sum
	soloFetch  bool        // a task fetches a quarantined job alone
	slow       []bool      // the bucket's last fetch overran slowAfter
	retryAt    []time.Time // a failed bucket's next fetch, not before
	// limitAt is when a rate limit lets the bucket's held jobs go: the
	// bucket is fetched from again then (zero: no such wait).
	limitAt []time.Time
	backoff []env.Backoff
	failing int // buckets whose last task failed
	// slowAfter is slowFetch; tests shorten it.
	slowAfter time.Duration
	// backlog is set while the latest fetch that answered took as many
	// jobs as it asked for and the ready list may hold more: the runner is
	// under load, and its fetches wait for fuller batches (batchFor).
	backlog bool
	// lingerAfter is lingerTime; tests lengthen it.
	lingerAfter time.Duration
}

func newDispatchState(buckets int) dispatchState {
	d := dispatchState{
		maybe:       make([]atomic.Bool, buckets),
		suspect:     make([]bool, buckets),
		fetched:     make([]bool, buckets),
		soloBucket:  -1,
		results:     make(chan fetchResult, buckets),
		fetching:    make([]bool, buckets),
		launched:    make([]time.Time, buckets),
		reservedBy:  make([]int, buckets),
		slow:        make([]bool, buckets),
		retryAt:     make([]time.Time, buckets),
		limitAt:     make([]time.Time, buckets),
		backoff:     make([]env.Backoff, buckets),
		slowAfter:   slowFetch,
		lingerAfter: lingerTime,
	}
	for i := range d.maybe {
		d.maybe[i].Store(true)
	}
	return d
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
	alone      bool // it claimed the quarantine slot
	reconciled bool
	items      []ready.Item
	stopped    bool
	more       bool          // the ready list may hold more (ready.Batch.More)
	wait       time.Duration // a rate limit holds jobs this long (ready.Batch.Wait)
	sent       time.Time     // when the fetch was sent
	err        error
}

// fetchTask reconciles bucket b when asked, then fetches up to want jobs
// from it. It runs on a goroutine of its own: at most one per bucket, so
// that no reconcile of a bucket overlaps a fetch from it.
func (r *runner) fetchTask(ctx context.Context, b, want int, alone, reconcile bool) fetchResult {
	res := fetchResult{bucket: b, want: want, alone: alone}
	if reconcile {
		n, err := r.fetcher.Reconcile(ctx, b, r.dl.holds(b))
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
		res.sent = r.g.env.Clock.Now()
		got, res.err = r.fetcher.Fetch(ctx, b, want, alone)
		res.items, res.stopped, res.more, res.wait = got.Items, got.Stopped, got.More, got.Wait
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
			r.quarantine.release(r.notify)
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
	if r.g.env.Clock.Now().Sub(r.launched[b]) < r.slowAfter {
		r.slow[b] = false
	}
	items := res.items
	r.backlog = res.more && len(items) >= res.want
	if res.wait > 0 {
		// Jobs wait for a rate limit: fetch again when it lets one go.
		r.limitAt[b] = r.g.env.Clock.Now().Add(res.wait)
	} else if res.more {
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
		r.quarantine.release(r.notify) // it claimed, but took no quarantined job
	}
	if res.stopped {
		// The fetch stopped at a quarantined job: fetch nothing more until
		// everything running is done, then fetch it alone.
		r.alone, r.soloBucket = true, b
	} else if quarantined(items) {
		r.alone, r.soloBucket = true, -1 // run it alone
	}
	members := r.dl.hold(b, items)
	r.busy.Add(int64(len(items)))
	var at time.Time
	if r.g.observer != nil {
		at = r.g.env.Clock.Now()
	}
	for i, it := range items {
		r.jobs <- delivery{bucket: b, item: it, member: members[i], at: at, sent: res.sent}
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
	if r.unchecked != nil {
		select {
		case <-ctx.Done():
			return
		case <-r.unchecked:
		}
	}
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
			if want > 0 && now.Sub(r.launched[b]) >= r.slowAfter {
				// Slow: its workers may serve other buckets, and its next
				// fetches ask for one job, until one answers in time.
				r.reserved -= want
				r.reservedBy[b] = 0
				r.slow[b] = true
			}
		}
		if r.alone && !r.soloFetch && r.inFlight == 0 && r.dl.idle() {
			r.quarantine.release(r.notify) // its quarantined job, if it ran one, is done
			switch {
			case r.soloBucket < 0:
				r.alone = false
			case r.unreconciled():
				// A fetch whose reply was lost may have left a delivery in
				// this consumer's in-flight sets that it does not hold:
				// give such deliveries back first (the bucket loop below
				// launches the reconciles), so that nothing of this runner
				// is in flight beside the quarantined job.
			case r.quarantine.take(r.notify):
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
		// Fetch in batches: wait until batchFor workers are free (half of
		// them, or all under a backlog), unless nothing is running at all,
		// or fewer have been free for a linger.
		ripe := free > 0 && !r.alone && !r.soloFetch &&
			(free >= r.batchFor() || r.busy.Load() == 0 || lingered)
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
			if at := r.limitAt[b]; !at.IsZero() {
				if now.Before(at) {
					next = earliest(next, at)
				} else {
					r.limitAt[b] = time.Time{}
					r.maybe[b].Store(true)
				}
			}
			if r.fetching[b] {
				if r.reservedBy[b] > 0 {
					next = earliest(next, r.launched[b].Add(r.slowAfter))
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
			// or their outcomes waiting to be applied) to heldPerWorker
			// times the workers: a bucket whose outcomes cannot be applied
			// (its node refuses writes, or its replica lags behind
			// WaitReplicas) stops being fetched from, so its settle lane
			// never fills and never holds up the workers, nor so the other
			// buckets.
			want := 0
			if !r.soloFetch && r.maybe[b].Load() {
				switch room := heldPerWorker*r.capacity - r.dl.heldLen(b); {
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
				next = earliest(next, now.Add(r.slowAfter))
			}
		}
		r.rr++
		if free > 0 && !r.alone && !lingering && waiting {
			lingering = true
			linger.Reset(r.lingerAfter)
		}
		wake.Reset(max(next.Sub(now), time.Millisecond))
		// Workers that free up wake the loop only when it may do
		// something about it. Since the loop last woke, every worker
		// that freed up signaled (the level was the highest), and the
		// loop read busy after that.
		r.wakeAt.Store(r.wakeLevel(lingering, lingered))
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
		// Until the next level is set, every worker that frees up signals.
		r.wakeAt.Store(math.MaxInt64)
	}
}

// wakeLevel is the most jobs left running at which a worker that frees
// up wakes the dispatcher (none running always does): once batchFor
// workers are free, a fetch is ripe; before a linger started, the first
// free worker starts it; after it ended, or while the runner waits to run
// a quarantined job alone, any free worker matters. A runner under a
// backlog so wakes twice per fetch for its workers, not once per job.
func (r *runner) wakeLevel(lingering, lingered bool) int64 {
	if lingered || r.alone || r.soloFetch {
		return math.MaxInt64
	}
	held := r.capacity - r.reserved // running jobs at which none is free
	if !lingering {
		return int64(held - 1)
	}
	return int64(held - r.batchFor())
}

// batchFor is how many workers must be free for a fetch that does not
// linger: half of them, or all of them while the runner has a backlog
// (the ready list holds more than its fetches take). A fetch costs Redis
// the same per call whatever its size, so a runner under load fetches
// for every worker at once, one round trip where it took two; the linger
// bounds how long a free worker waits for the others, and a runner that
// runs nothing fetches at once, so an idle consumer still starts a job
// the moment it is due.
func (r *runner) batchFor() int {
	if r.backlog {
		return r.capacity
	}
	return max(1, r.workers/2)
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

package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
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
	notify chan struct{}
	freed  chan struct{}
	busy   atomic.Int64
	rr     int
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

	jobs chan delivery
	outs chan settleReq

	stopSettle  chan struct{}
	settlerDone chan struct{}
}

type delivery struct {
	bucket int
	item   ready.Item
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

func (r *runner) hold(b int, items []ready.Item) {
	r.heldMu.Lock()
	for _, it := range items {
		r.held[b][it.Member()] = true
	}
	r.heldMu.Unlock()
}

func (r *runner) unhold(b int, outs []ack.Outcome) {
	r.heldMu.Lock()
	for _, o := range outs {
		delete(r.held[b], ready.Member(o.Token, o.ID))
	}
	r.heldMu.Unlock()
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

// claimSolo makes r the holder if there is none, and reports whether it
// is.
func claimSolo(r *runner) bool {
	solo.mu.Lock()
	defer solo.mu.Unlock()
	if solo.holder == nil {
		solo.holder = r
	}
	return solo.holder == r
}

// mayRunAlone reports whether r may fetch a quarantined job: no other
// runner of the process runs one, or claimed the right to. When one does,
// r is woken once it lets go.
func mayRunAlone(r *runner) bool {
	solo.mu.Lock()
	defer solo.mu.Unlock()
	if solo.holder == nil || solo.holder == r {
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

// reconcile gives back what a fetch with a lost reply moved into this
// consumer's in-flight list of bucket b, so that no job waits there for a
// consumer that does not know it has it.
func (r *runner) reconcile(ctx context.Context, b int) error {
	n, err := ready.Release(ctx, r.g.rdb, r.g.cfg.Prefix, r.topic, b, r.g.cid, r.holds(b))
	if err != nil {
		return err
	}
	r.suspect[b] = false
	if n > 0 {
		r.g.env.Logger.Warn("redeq: returned in-flight jobs this consumer did not know it held (a fetch reply was lost)", "topic", r.topic, "bucket", b, "jobs", n)
	}
	return nil
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

// dispatch fetches ready jobs for the workers until ctx ends, then closes
// the jobs channel. It fetches from the buckets flagged by wake: it does
// not poll. A bucket's owner repeats the ready notification at each scan
// while the ready list holds jobs, and every bucket is flagged when the
// subscription reconnects, so a lost notification delays a job, never
// strands it.
func (r *runner) dispatch(ctx context.Context) {
	defer close(r.jobs)
	log := r.g.env.Logger.With("topic", r.topic)
	sweep := time.NewTimer(r.g.cfg.ConsumerTimeout)
	defer sweep.Stop()
	// linger bounds how long a free worker waits for others to free up,
	// so that fetches come in batches without idling workers for long.
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	lingering, lingered := false, false
	var bo env.Backoff
	r.lastSweep = r.g.env.Clock.Now()
	for ctx.Err() == nil {
		if now := r.g.env.Clock.Now(); now.Sub(r.lastSweep) >= r.g.cfg.ConsumerTimeout {
			r.lastSweep = now
			for i := range r.suspect {
				if !r.fetched[i] {
					continue // nothing fetched here since the last sweep: nothing to hide
				}
				r.fetched[i] = false
				if err := r.reconcile(ctx, i); err != nil {
					r.suspect[i] = true // reconciled before the next fetch
					r.maybe[i].Store(true)
				}
			}
		}
		free := r.capacity - int(r.busy.Load())
		if r.alone && r.idle() {
			releaseSolo(r) // its quarantined job is done
			if mayRunAlone(r) {
				r.alone = false // else it waits for the other's to end
			}
		}
		// Fetch in batches: wait until half the workers are free, unless
		// nothing is running at all, or fewer have been free for a linger.
		ripe := !r.alone && (free >= max(1, r.workers/2) || r.busy.Load() == 0 || (free > 0 && lingered))
		if ripe && r.anyMaybe() && !r.g.heard() {
			// Unheard for most of a ConsumerTimeout: a reaper may forget
			// this consumer; fetch once a heartbeat got through again.
			r.g.env.Failure("redeq: fetch waits for a heartbeat to get through", "topic", r.topic)
			sleep(ctx, r.g.cfg.HeartbeatInterval/4)
			continue
		}
		if ripe {
			lingered = false
			for i := 0; i < r.buckets && free > 0; i++ {
				b := (r.rr + i) % r.buckets
				if !r.maybe[b].Swap(false) {
					continue
				}
				want := min(free, ready.MaxFetch)
				var items []ready.Item
				var err error
				if r.suspect[b] {
					err = r.reconcile(ctx, b)
				}
				var stopped bool
				if err == nil {
					r.fetched[b] = true
					alone := r.idle() && claimSolo(r)
					items, stopped, err = ready.Fetch(ctx, r.g.rdb, r.g.cfg.Prefix, r.topic, b, r.g.cid, want, alone)
					if alone && (err != nil || !quarantined(items)) {
						releaseSolo(r) // it claimed, but took no quarantined job
					}
					if err != nil {
						r.suspect[b] = true
					}
				}
				if err != nil {
					r.maybe[b].Store(true)
					if ctx.Err() != nil {
						return
					}
					wait := bo.Next()
					r.g.env.Failure("redeq: fetch failed", "topic", r.topic, "bucket", b, "err", err, "retry_in", wait)
					sleep(ctx, wait)
					break
				}
				if bo.Failing() {
					log.Info("redeq: fetch recovered")
				}
				bo.Reset()
				if len(items) == want || stopped {
					r.maybe[b].Store(true) // more may wait
				}
				if stopped || quarantined(items) {
					// Run a quarantined job alone: fetch nothing more until
					// it (or, when the fetch stopped at it, everything
					// running) is done, then fetch it alone.
					r.alone = true
					free = 0
				}
				r.hold(b, items)
				r.busy.Add(int64(len(items)))
				free -= len(items)
				var at time.Time
				if r.g.observer != nil {
					at = r.g.env.Clock.Now()
				}
				for _, it := range items {
					r.jobs <- delivery{bucket: b, item: it, at: at}
				}
			}
			r.rr++
			if free > 0 && !r.alone && r.anyMaybe() {
				continue
			}
		}
		if free := r.capacity - int(r.busy.Load()); free > 0 && !r.alone && !lingering && r.anyMaybe() {
			lingering = true
			linger.Reset(lingerTime)
		}
		select {
		case <-ctx.Done():
			return
		case <-linger.C:
			lingering, lingered = false, true
		case <-r.notify:
		case <-r.freed:
		case <-sweep.C:
			sweep.Reset(r.g.cfg.ConsumerTimeout) // the sweep runs at the top of the loop
		}
	}
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
	err = r.call(ctx, job, ch)
	var took time.Duration
	if g.observer != nil {
		took = g.env.Clock.Now().Sub(start)
	}
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	cancel()
	interrupted := g.handlerCtx.Err() != nil
	if interrupted && (err != nil || timedOut) {
		r.observeDone(took, job, OutcomeInterrupted, err)
		return // canceled by Shutdown: the rollback returns it unspent
	}
	if err == nil && timedOut {
		err = ErrConsumeTimeout
	}
	if err != nil {
		r.observeDone(took, job, r.fail(d.bucket, job, h, token, err), err)
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
	r.submit(d.bucket, out)
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
func (r *runner) fail(bucket int, job *pool.Job, h pool.Header, token string, cause error) Outcome {
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
		r.submit(bucket, ack.Outcome{ID: job.ID, Token: token, Op: ack.OpRetry, Delay: delay, Header: ack.HeaderFor(ack.OpRetry, h), Err: cause.Error()})
		return OutcomeRetry
	}
	g.env.Logger.Warn("redeq: job failed for the last time", "topic", r.topic, "id", job.ID, "attempt", h.Attempt, "err", cause)
	if fr, ok := r.l.(FinalRetryListener); ok {
		final := *job // the handler may still hold job
		final.Attempt = h.Attempt
		final.LastError = ack.Cut(cause.Error())
		r.final(fr, &final)
	}
	r.submit(bucket, ack.Outcome{ID: job.ID, Token: token, Op: ack.OpDead, Header: ack.HeaderFor(ack.OpDead, h),
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

// settle applies outcomes in batches until stopSettle is closed, then
// applies what is queued and closes settlerDone.
func (r *runner) settle() {
	defer close(r.settlerDone)
	for {
		var batch []settleReq
		select {
		case o := <-r.outs:
			batch = append(batch, o)
		case <-r.stopSettle:
			for {
				select {
				case o := <-r.outs:
					batch = append(batch, o)
					continue
				default:
				}
				break
			}
			r.flush(batch)
			return
		}
	more:
		for len(batch) < maxSettle {
			select {
			case o := <-r.outs:
				batch = append(batch, o)
			default:
				break more
			}
		}
		r.flush(batch)
	}
}

// flush settles a batch, bucket by bucket, retrying Redis failures until
// they succeed or the group gives up at the end of Shutdown.
func (r *runner) flush(batch []settleReq) {
	if len(batch) == 0 {
		return
	}
	byBucket := map[int][]ack.Outcome{}
	for _, s := range batch {
		byBucket[s.bucket] = append(byBucket[s.bucket], s.out)
	}
	ctx := r.g.settleCtx
	log := r.g.env.Logger.With("topic", r.topic)
	for b, outs := range byBucket {
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
				break
			}
			if ctx.Err() != nil {
				log.Warn("redeq: outcomes not applied before shutdown; the jobs run again", "count", len(outs), "err", err)
				break
			}
			unconfirmed = unconfirmed || errors.Is(err, rdb.ErrNotReplicated)
			wait := bo.Next()
			r.g.env.Failure("redeq: settle failed", "topic", r.topic, "bucket", b, "err", err, "retry_in", wait)
			sleep(ctx, wait)
		}
	}
}

// runAll starts the runner's goroutines: the dispatcher on fetchers, the
// workers on workers, and the settler, which ends with settlerDone.
func (r *runner) runAll(fetchCtx context.Context, fetchers, workers *sync.WaitGroup) {
	fetchers.Go(func() { r.dispatch(fetchCtx) })
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

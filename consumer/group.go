package consumer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/lock"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// Errors of registration.
var (
	ErrStarted   = errors.New("redeq: client already started")
	ErrDuplicate = errors.New("redeq: topic already has a listener")
)

// Group is the consuming side of one client: its listeners, broadcast
// listeners, heartbeat and reaper, under one consumer id.
type Group struct {
	rdb     redis.UniversalClient
	cfg     config.Config
	env     env.Env
	reg     *bucket.Registry
	locker  *lock.Locker
	cid     string
	settler *ack.Settler
	// quarantine is the slot this group's quarantined jobs run in, shared
	// with the groups it was given to (NewGroup).
	quarantine *Quarantine

	listeners  []Listener
	middleware []Middleware
	observer   Observer // nil: nothing observed
	runners    map[string]*runner
	bc         broadcasts
	// cleanupUntil is the end of Shutdown's budget once it is fixed.
	cleanupUntil atomic.Pointer[time.Time]
	canceledAt   atomic.Pointer[time.Time] // when Shutdown's ctx was first seen canceled
	keptWG       sync.WaitGroup            // deliveries kept in flight for their handlers, until concluded
	keptN        atomic.Int64              // their number

	started  atomic.Bool
	stopping atomic.Bool
	// heardAt is when the last heartbeat that got through was sent, in ns
	// since base (monotonic: a step of the wall clock does not move it).
	heardAt   atomic.Int64
	joined    atomic.Int64 // the join time (heartbeat.lua) this consumer last joined its topics with
	base      time.Time
	topicList string       // the listened topics, "topic#buckets" one per line, for the heartbeat
	info      string       // this consumer's Info, JSON, for the heartbeat
	older     bool         // a consumer of the older format (SetOlderFormat)
	silentAt  atomic.Int64 // where the reaper's next look at silent consumers starts
	// reaps tells whether this client's reaper looks for silent consumers
	// now (SetReaper); nil: always.
	reaps func() bool
	// startLog tells whether the namespace writes a rate's starts to its
	// start log only (SetStartLog); nil: no, to both layouts.
	startLog func() bool

	fetchCancel, handlerCancel, settleCancel, bgCancel context.CancelFunc
	handlerCtx, settleCtx                              context.Context

	fetchWG, workerWG, bgWG sync.WaitGroup
}

// NewGroup returns a Group with a fresh consumer id. Its quarantined jobs
// run in slot q, one at a time across every group given q; nil gives the
// group a slot of its own.
func NewGroup(c redis.UniversalClient, cfg config.Config, e env.Env, reg *bucket.Registry, locker *lock.Locker, q *Quarantine) *Group {
	cid := uuid.NewString()
	settler := ack.NewSettler(c, cfg.Prefix, cid, cfg.DeadRetention)
	settler.SetDurability(rdb.Durability{Replicas: cfg.WaitReplicas, Timeout: cfg.WaitTimeout})
	if q == nil {
		q = NewQuarantine()
	}
	g := &Group{
		rdb: c, cfg: cfg, env: e, reg: reg, locker: locker, cid: cid,
		settler: settler, quarantine: q,
		runners: map[string]*runner{},
		base:    e.Clock.Now(),
		info:    LocalInfo(cfg.ClientName).encode(),
	}
	g.heardAt.Store(neverHeard)
	return g
}

// neverHeard is heardAt before a first heartbeat got through: far enough
// in the past that heard is false.
const neverHeard = math.MinInt64 / 2

// SetOlderFormat, before Start, makes the group's consumer behave as one
// of the version before this one as to the format of the job state (for
// tests of a rolling upgrade): it fetches only that format and records no
// format it reads.
func (g *Group) SetOlderFormat() {
	g.older = true
	info := LocalInfo(g.cfg.ClientName)
	info.Format = ""
	g.info = info.encode()
}

// SetReaper, before Start, makes the reaper look for silent consumers
// only while reaps says so: the client runtime lets the first two clients
// of the fleet do it, so that the looks cost the same however many
// clients run. Reap, called directly, always looks.
func (g *Group) SetReaper(reaps func() bool) error {
	if g.started.Load() {
		return ErrStarted
	}
	g.reaps = reaps
	return nil
}

// SetStartLog, before Start, makes the fetches under a rate write their
// starts to the start log only while startLog says so (the namespace
// switched to keys.FormatStartLog: bucket.Fleet.WritesStartLog); until
// then, and without a call, they write them to the previous version's
// ZSET of starts too, so that a client of that version counts them.
func (g *Group) SetStartLog(startLog func() bool) error {
	if g.started.Load() {
		return ErrStarted
	}
	g.startLog = startLog
	return nil
}

// ID is this consumer's id: its in-flight lists and heartbeat carry it.
func (g *Group) ID() string { return g.cid }

// Register adds l before Start. A second listener for one topic, a nil
// listener or a bad topic is an error.
func (g *Group) Register(l Listener) error {
	if l == nil {
		return fmt.Errorf("%w: nil listener", pool.ErrInvalidArgument)
	}
	if g.started.Load() {
		return ErrStarted
	}
	topic := l.Topic()
	if err := config.CheckName("topic", topic); err != nil {
		return fmt.Errorf("%w: register listener: %v", pool.ErrInvalidArgument, err)
	}
	for _, have := range g.listeners {
		if have.Topic() == topic {
			return fmt.Errorf("register listener for %q: %w", topic, ErrDuplicate)
		}
	}
	if c, ok := l.(Configured); ok {
		lim := c.ListenerOptions().Limits
		if err := lim.Check(); err != nil {
			return fmt.Errorf("%w: listener of %q: %v", pool.ErrInvalidArgument, topic, err)
		}
		if lim.Set() && g.cfg.Concurrency != 1 {
			// Every key a limited fetch touches must share one slot, so
			// that one script sees every delivery of the topic.
			return fmt.Errorf("%w: listener of %q: global limits need a topic of one bucket (Concurrency 1), not %d",
				pool.ErrInvalidArgument, topic, g.cfg.Concurrency)
		}
	}
	g.listeners = append(g.listeners, l)
	return nil
}

// Use adds client-wide middleware before Start: it wraps every listener's
// handler, outside the listener's own; the first given is the outermost.
func (g *Group) Use(mw ...Middleware) error {
	if g.started.Load() {
		return ErrStarted
	}
	for i, m := range mw {
		if m == nil {
			return fmt.Errorf("%w: middleware %d is nil", pool.ErrInvalidArgument, i)
		}
	}
	g.middleware = append(g.middleware, mw...)
	return nil
}

// Topics returns the topics this group listens to.
func (g *Group) Topics() []string {
	out := make([]string, len(g.listeners))
	for i, l := range g.listeners {
		out[i] = l.Topic()
	}
	return out
}

// Start records the listened topics, announces this consumer with a first
// heartbeat, and starts the heartbeat, the reaper, the broadcast
// dispatcher, the listeners and the lease renewals, in that order. Values
// of ctx reach the handlers; its cancellation does not stop the group
// (Shutdown does).
func (g *Group) Start(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return ErrStarted
	}
	pending, err := g.announce(ctx)
	if err != nil {
		g.started.Store(false) // nothing runs yet: a later Start may try again
		return err
	}
	base := context.WithoutCancel(ctx)
	var bgCtx, fetchCtx context.Context
	bgCtx, g.bgCancel = context.WithCancel(base)
	fetchCtx, g.fetchCancel = context.WithCancel(base)
	g.handlerCtx, g.handlerCancel = context.WithCancel(base)
	g.settleCtx, g.settleCancel = context.WithCancel(base)

	g.bgWG.Go(func() { g.heartbeatLoop(bgCtx) })
	g.bgWG.Go(func() { g.reapLoop(bgCtx) })
	g.startBroadcasts(base)
	for _, l := range g.listeners {
		r := newRunner(g, l, g.cfg.Concurrency)
		if pending[l.Topic()] {
			r.unchecked = make(chan struct{})
		}
		g.runners[l.Topic()] = r
		r.runAll(fetchCtx, &g.fetchWG, &g.workerWG)
	}
	g.bgWG.Go(func() { g.leaseLoop(bgCtx) }) // after the runners: it reads them
	if len(pending) > 0 {
		g.bgWG.Go(func() { g.recordLoop(bgCtx, pending) })
	}
	return nil
}

// announce records the listened topics and sends the first heartbeat.
// A topic recorded with another bucket count is an error. One whose
// record cannot be read or written (its node is down) holds up only its
// own listener: announce reports it and returns it in pending, and
// recordLoop records it later. A first heartbeat that fails is reported
// too, and the heartbeat loop tries again: no runner fetches before a
// heartbeat got through (heard), so that no in-flight set exists for a
// consumer the reaper does not know.
func (g *Group) announce(ctx context.Context) (pending map[string]bool, err error) {
	// The topics are recorded side by side, and waited for StepTimeout at
	// most: a node that hangs (a topic's meta, the topic set) holds up
	// Start no longer than a bucket step.
	type recorded struct {
		topic string
		err   error
	}
	results := make(chan recorded, len(g.listeners))
	for _, l := range g.listeners {
		go func() {
			_, err := g.reg.Ensure(ctx, l.Topic(), g.cfg.Concurrency)
			results <- recorded{topic: l.Topic(), err: err}
		}()
	}
	addPending := func(topic string, err error) {
		if pending == nil {
			pending = map[string]bool{}
		}
		pending[topic] = true
		g.env.Logger.Warn("redeq: start: a listened topic cannot be recorded; it is served once it is, the others now", "topic", topic, "err", err)
	}
	unanswered := map[string]bool{}
	for _, l := range g.listeners {
		unanswered[l.Topic()] = true
	}
	stepTimeout := bucket.MoverConfig{ScanInterval: g.cfg.ScanInterval}.StepTimeout()
	step := time.NewTimer(stepTimeout)
	defer step.Stop()
wait:
	for range g.listeners {
		select {
		case r := <-results:
			delete(unanswered, r.topic)
			if r.err == nil {
				continue
			}
			if errors.Is(r.err, pool.ErrBucketMismatch) || ctx.Err() != nil {
				return nil, r.err
			}
			addPending(r.topic, r.err)
		case <-step.C:
			break wait
		}
	}
	for topic := range unanswered {
		if g.reg.Matches(topic, g.cfg.Concurrency) {
			// Its bucket count is checked; only its listing in the topic
			// set waits, and the movers record it again.
			g.env.Logger.Warn("redeq: start: a listened topic's listing gets no answer; it is served now", "topic", topic)
			continue
		}
		addPending(topic, errors.New("no answer within StepTimeout"))
	}
	// The limits are for Stats only: recorded in the background, so that
	// a hung master of a topic's meta holds up nothing.
	lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*stepTimeout)
	g.bgWG.Go(func() {
		defer lcancel()
		g.publishLimits(lctx)
	})
	lines := make([]string, len(g.listeners))
	for i, l := range g.listeners {
		lines[i] = keys.Address(l.Topic(), g.cfg.Concurrency)
	}
	g.topicList = strings.Join(lines, "\n")
	if err := g.firstHeartbeat(ctx, stepTimeout); err != nil { // it joins the topics too
		if ctx.Err() != nil {
			return nil, err
		}
		alive := keys.Alive(g.cfg.Prefix)
		g.env.Logger.Warn("redeq: start: the first heartbeat failed; nothing is fetched until one gets through",
			"key", alive, "node", rdb.NodeOf(ctx, g.rdb, alive), "err", err)
	}
	return pending, nil
}

// firstHeartbeat sends the first heartbeat and waits step for it at most:
// a hung master of the alive set holds up Start no longer than a bucket
// step. Until a heartbeat gets through nothing is fetched (heard), so one
// that answers later, in the background (bounded by go-redis's timeouts
// and 2 x step), opens the fetch gate then, as the heartbeat loop's would.
func (g *Group) firstHeartbeat(ctx context.Context, step time.Duration) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*step)
	done := make(chan error, 1)
	g.bgWG.Go(func() {
		defer cancel()
		done <- g.heartbeat(hctx)
	})
	timer := time.NewTimer(step)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("heartbeat: no answer within StepTimeout (%v)", step)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recordLoop records the topics of pending until each is, with a backoff
// up to ScanInterval x 5, and lets each one's runner fetch once its bucket
// count is checked (its listing in the topic set may come later). A
// topic found recorded with another count is never served: the error is
// logged, as Start would have returned it. Each topic's record runs on a
// goroutine of its own, one at a time per topic, and the loop looks at
// every backoff whether a count was checked meanwhile: a topic set whose
// node hangs (the listing waits for go-redis's timeouts) holds up neither
// the serving of a topic whose count its meta's node answered nor the
// records of the other topics.
func (g *Group) recordLoop(ctx context.Context, pending map[string]bool) {
	bo := env.Backoff{Min: g.cfg.ScanInterval / 4, Max: 5 * g.cfg.ScanInterval}
	served := map[string]bool{}
	type recorded struct {
		topic string
		err   error
	}
	results := make(chan recorded, len(pending))
	busy := map[string]bool{}
	var calls sync.WaitGroup
	defer calls.Wait()
	serve := func(topic string) {
		if !served[topic] && g.reg.Matches(topic, g.cfg.Concurrency) {
			served[topic] = true
			close(g.runners[topic].unchecked)
			g.env.Logger.Info("redeq: a listened topic is recorded; it is served now", "topic", topic)
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for len(pending) > 0 {
		wait := bo.Next()
		timer.Reset(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				break waiting
			case r := <-results:
				busy[r.topic] = false
				serve(r.topic)
				switch {
				case r.err == nil:
					delete(pending, r.topic)
				case errors.Is(r.err, pool.ErrBucketMismatch):
					g.env.Logger.Error("redeq: a listened topic is not served", "topic", r.topic, "err", r.err)
					delete(pending, r.topic)
				case ctx.Err() == nil:
					g.env.Failure("redeq: a listened topic cannot be recorded yet", "topic", r.topic, "err", r.err, "retry_in", wait)
				}
			}
		}
		for topic := range pending {
			serve(topic) // a late answer of Start's call, or a listing that hangs
			if busy[topic] {
				continue
			}
			busy[topic] = true
			calls.Go(func() {
				_, err := g.reg.Ensure(ctx, topic, g.cfg.Concurrency)
				results <- recorded{topic, err}
			})
		}
	}
}

// Notify tells the listener of topic, if any, that bucket n has ready work.
func (g *Group) Notify(topic string, n int) {
	if r, ok := g.runners[topic]; ok {
		r.wake(n)
	}
}

// Shutdown stops fetching and starting broadcast handlers, waits for
// running handlers (broadcast ones too) until ctx ends or
// ShutdownTimeout passes, then cancels the handlers still running and
// waits a short grace for them. It applies the outcomes handlers returned,
// rolls every job still in this consumer's in-flight lists back to its
// bucket due now (with CrashRollback; otherwise the reaper recovers them
// later), and stops the heartbeat and the reaper. When it had to cancel
// handlers it returns an error wrapping ctx.Err() (or
// context.DeadlineExceeded after ShutdownTimeout), joined with any error
// of the rollback.
// A handler still running when the rollback comes (it ignores its
// context, or winds down for longer than a short grace) keeps its
// goroutine and its job: the job stays in flight, so that no other
// consumer runs it beside the handler; when the handler returns, its
// worker applies its outcome, or gives the job back to the head of its
// ready list if it was canceled. Should the handler never return, the
// reaper recovers the job ConsumerTimeout after a last heartbeat.
func (g *Group) Shutdown(ctx context.Context) error {
	if !g.started.Load() || !g.stopping.CompareAndSwap(false, true) {
		return nil
	}
	g.fetchCancel()
	g.closeBroadcasts()
	waitCtx, cancel := context.WithTimeout(ctx, g.cfg.ShutdownTimeout)
	defer cancel()
	// One goroutine waits for the workers, whatever the waits below: a
	// handler that never returns keeps it, and only it.
	workersDone := make(chan struct{})
	go func() {
		g.workerWG.Wait()
		close(workersDone)
	}()
	finished := waitDone(waitCtx, workersDone)
	// From here on every step shares one budget (see cleanupContext), so
	// that Shutdown returns soon after ctx ends even when Redis hangs.
	cleanup, cancelCleanup := g.cleanupContext(ctx)
	defer cancelCleanup()
	if !finished && !g.handlersRunning() {
		// ctx ended (or had ended), but no handler runs: the workers end
		// as soon as the dispatchers do, and nothing was abandoned.
		grace, cancelGrace := context.WithTimeout(cleanup, handlerGrace)
		finished = waitDone(grace, workersDone)
		cancelGrace()
	}
	if !finished {
		g.handlerCancel()
		// A short grace: a handler that returns as soon as it is canceled
		// ends here, and its job is rolled back below; one still running
		// after it keeps its job (keepRunning).
		grace, cancelGrace := context.WithTimeout(cleanup, handlerGrace)
		waitDone(grace, workersDone)
		cancelGrace()
	}
	g.handlerCancel()
	finished = g.endBroadcasts(waitCtx, cleanup) && finished
	// From now on, a handler still running keeps its job in flight: its
	// worker concludes it itself once the handler returns (keepRunning).
	// The outcomes of the handlers that returned before reach the
	// settlers, which apply them before they stop.
	keep := make(map[*runner][]map[string]bool, len(g.runners))
	kept := 0
	for _, r := range g.runners {
		k, n := r.dl.keepRunning(func() {
			g.keptWG.Add(1)
			g.keptN.Add(1)
		})
		keep[r], kept = k, kept+n
	}
	if kept > 0 {
		// A heartbeat now: the reaper's ConsumerTimeout for the jobs kept
		// counts from here at the earliest, so a handler that returns
		// within it of being canceled concludes its job before any other
		// consumer may take it, whatever happens to the rollback. On a
		// goroutine of its own, like the rollback: a new connection's
		// handshake ignores ctx.
		_, herr := within(cleanup, g.cfg.HeartbeatInterval, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, g.heartbeat(ctx)
		})
		if herr != nil {
			g.env.Logger.Warn("redeq: heartbeat for the jobs left in flight failed", "err", herr)
		}
	}
	waitFor(cleanup, &g.fetchWG) // dispatchers end with fetchCtx; settlers end below
	for _, r := range g.runners {
		waitFor(cleanup, &r.submits) // outcomes on their way to the settler
		close(r.stopSettle)
	}
	settled := make(chan struct{})
	go func() {
		for _, r := range g.runners {
			<-r.settlerDone
		}
		close(settled)
	}()
	select {
	case <-settled:
	case <-cleanup.Done():
		g.settleCancel() // outcomes not applied run again: at least once
	}
	g.settleCancel()

	var err error
	clean := kept == 0
	if g.cfg.Rollback() {
		// go-redis does not bound every wait by ctx (a new connection's
		// handshake has its own timeout), so the rollback runs on its own
		// and Shutdown stops waiting for it when the budget ends. What it
		// had not rolled back by then stays in flight for the reaper; if
		// it goes on later, its scripts are fenced and harmless.
		rolled := make(chan error, 1)
		go func() { rolled <- g.rollback(cleanup, keep) }()
		select {
		case err = <-rolled:
		case <-cleanup.Done():
			err = fmt.Errorf("redeq: rollback unfinished when shutdown's time ran out (the reaper recovers the rest): %w", cleanup.Err())
		}
		// A job left in flight keeps this consumer in the alive set: the
		// reaper recovers it only after ConsumerTimeout, should its
		// handler never return.
		clean = clean && err == nil
	} else {
		clean = false
	}
	g.bgCancel()
	waitFor(cleanup, &g.bgWG)
	if clean {
		g.leave(cleanup)
	}
	if !finished {
		// Like net/http.Server.Shutdown: say that handlers were abandoned.
		cause := ctx.Err()
		if cause == nil {
			cause = context.DeadlineExceeded // ShutdownTimeout passed
		}
		what := "their jobs were rolled back"
		switch {
		case kept > 0:
			what = fmt.Sprintf("%d of their jobs stay in flight until their handlers return", kept)
		case err != nil || !g.cfg.Rollback():
			what = "their jobs go back with the rollback or the reaper"
		}
		err = errors.Join(fmt.Errorf("redeq: shutdown canceled handlers still running (%s): %w", what, cause), err)
	}
	return err
}

const (
	// handlerGrace is how long Shutdown waits for handlers it canceled.
	handlerGrace = 100 * time.Millisecond
	// cleanupMin is the least time Shutdown gives itself, after its ctx
	// ended, to apply outcomes and roll back: a healthy Redis needs
	// milliseconds, and the jobs then run again at once rather than after
	// the reaper's ConsumerTimeout.
	cleanupMin = 500 * time.Millisecond
)

// cleanupContext is the budget of Shutdown's steps after the handlers:
// until ctx's deadline, but at least cleanupMin from now; without a
// deadline, ShutdownTimeout. A step still waiting on Redis when it ends is
// abandoned: its jobs stay in flight and the reaper recovers them.
func (g *Group) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	until := g.CleanupDeadline(ctx)
	g.cleanupUntil.Store(&until)
	return g.Budget(ctx)
}

// Budget is a context that ends with Shutdown's budget (CleanupDeadline),
// or cleanupMin after ctx is canceled, whichever comes first: a ctx
// canceled without a deadline ends the budget as its deadline would.
func (g *Group) Budget(ctx context.Context) (context.Context, context.CancelFunc) {
	budget, cancel := context.WithDeadline(context.WithoutCancel(ctx), g.CleanupDeadline(ctx))
	var timer atomic.Pointer[time.Timer]
	stop := context.AfterFunc(ctx, func() {
		// From the first time ctx was seen canceled: the client's steps
		// after the group's share the budget.
		now := g.env.Clock.Now()
		g.canceledAt.CompareAndSwap(nil, &now)
		timer.Store(time.AfterFunc(max(cleanupMin-now.Sub(*g.canceledAt.Load()), 0), cancel))
	})
	return budget, func() {
		stop()
		if t := timer.Load(); t != nil {
			t.Stop()
		}
		cancel()
	}
}

// WaitKept waits until every job Shutdown left in flight for its handler
// was concluded by its worker, or ctx ends; it reports whether they were.
func (g *Group) WaitKept(ctx context.Context) bool { return waitFor(ctx, &g.keptWG) }

// Kept is the number of jobs Shutdown left in flight for their handlers
// that are not concluded yet.
func (g *Group) Kept() int { return int(g.keptN.Load()) }

// handlersRunning reports whether a listener's handler runs (or its
// FinalRetry).
func (g *Group) handlersRunning() bool {
	for _, r := range g.runners {
		if r.dl.anyRunning() {
			return true
		}
	}
	return false
}

// CleanupDeadline is when Shutdown stops waiting on Redis and on its
// background goroutines: ctx's deadline, but at least cleanupMin from now;
// without a deadline, ShutdownTimeout from now. Once Shutdown fixed its
// budget, it is that budget's end, so that the client's own steps after
// the group's share it.
func (g *Group) CleanupDeadline(ctx context.Context) time.Time {
	if until := g.cleanupUntil.Load(); until != nil {
		return *until
	}
	now := g.env.Clock.Now()
	until := now.Add(g.cfg.ShutdownTimeout)
	if d, ok := ctx.Deadline(); ok {
		until = d
	} else if ctx.Err() != nil {
		until = now // canceled: as a deadline passed
	}
	if least := now.Add(cleanupMin); until.Before(least) {
		until = least
	}
	return until
}

// waitFor waits for wg until ctx ends; it reports whether wg finished.
func waitFor(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return waitDone(ctx, done)
}

// waitDone waits for done to close until ctx ends; it reports whether it
// closed.
func waitDone(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// rollback returns every job of this consumer's in-flight lists to its
// bucket, due now, without counting an attempt; except the jobs kept in
// flight for their handlers (keep, from deliveries.keepRunning), and any whose
// handler runs still: another consumer must not run a job beside its
// handler here, and the worker concludes it.
func (g *Group) rollback(ctx context.Context, keep map[*runner][]map[string]bool) error {
	var errs []error
	for topic, r := range g.runners {
		for b := range r.buckets {
			var n int
			var err error
			if len(keep[r][b]) > 0 || r.dl.runningIn(b) {
				n, err = ready.Release(ctx, g.rdb, g.cfg.Prefix, topic, b, g.cid, func(m string) bool {
					return keep[r][b][m] || r.dl.isRunning(b, m)
				})
			} else {
				n, _, err = g.recoverList(ctx, topic, b, g.cid, modeRollback, "+inf", g.cfg.ConsumerTimeout)
			}
			if err != nil {
				errs = append(errs, err)
			}
			g.returned(topic, n, false)
		}
	}
	return errors.Join(errs...)
}

// leave removes this consumer from its topics' consumer sets and from
// the alive set.
func (g *Group) leave(ctx context.Context) {
	pipe := g.rdb.Pipeline()
	for topic := range g.runners {
		pipe.ZRem(ctx, keys.ForTopic(g.cfg.Prefix, topic).Consumers(), g.cid)
	}
	if len(g.runners) > 0 {
		pipe.ZRem(ctx, keys.Alive(g.cfg.Prefix), g.cid)
		pipe.HDel(ctx, keys.AliveTopics(g.cfg.Prefix), g.cid, keys.AliveTimeout(g.cid), keys.AliveJoined(g.cid), keys.AliveInfo(g.cid))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		g.env.Logger.Warn("redeq: cannot remove consumer from its topics", "err", err)
	}
}

// publishLimits writes the limits of each listener into its topic's meta
// (keys.LimitsField), where Stats and the tools read them; a listener
// without limits clears them. The fetch takes its limits from its own
// listener, not from there: a failed write only hides them from view.
func (g *Group) publishLimits(ctx context.Context) {
	pipe := g.rdb.Pipeline()
	for _, l := range g.listeners {
		var lim ready.Limits
		if c, ok := l.(Configured); ok {
			lim = c.ListenerOptions().Limits
		}
		meta := keys.ForTopic(g.cfg.Prefix, l.Topic()).Meta()
		if lim.Set() {
			pipe.HSet(ctx, meta, keys.LimitsField, lim.Spec())
		} else {
			pipe.HDel(ctx, meta, keys.LimitsField)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		g.env.Logger.Warn("redeq: start: cannot record the listeners' limits for Stats", "err", err)
	}
}
